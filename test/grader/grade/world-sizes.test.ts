import { REPO_ROOT, TEST_FIXTURES } from "../../helpers/paths.js";
import { execFile } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { calibrate, calibrationDirFor } from "../../../src/grader/grade/calibrate.js";
import { gradeSubmission, shouldStopEarly, type GradeMeta } from "../../../src/grader/grade/grade.js";
import type { SandboxFactory } from "../../../src/grader/grade/pipeline.js";
import { goldView, scoreSubmission } from "../../../src/grader/grade/score.js";
import { gradedWorldSizes, planSessions } from "../../../src/grader/grade/sessions.js";
import type { Calibration, CaseRecord, GradeResult } from "../../../src/grader/grade/types.js";
import { TaskError } from "../../../src/task/public/errors.js";
import { loadPublicTask, loadTaskSpec } from "../../../src/task/public/loader.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../../src/task/public/snapshot.js";

/**
 * World sizes and the early stop, on a copy of the tiny-mean fixture task that grades at world sizes
 * 2 and 3 (real bwrap sandbox, real ranks over gloo). The fixture's official tests never check the
 * mean's value; its probe does, at whatever world size it runs at: a patch that divides by a constant 2
 * passes everything at 2 ranks and fails the probe at 3 — the reason a task names several world sizes.
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const run = promisify(execFile);

let root: string;
let tasksDir: string;
let task: GraderTask;
let sandboxFactory: SandboxFactory;
/** Gold at [2, 3], one run (the tests that grade against it pass it in). */
let cal23: Calibration;

/** The fixture task copied with `extra` appended to its task.yaml. */
function copyTask(into: string, extra: string): string {
  const dir = join(into, "tiny-mean");
  cpSync(join(FIXTURES, "tiny-mean"), dir, { recursive: true });
  writeFileSync(join(dir, "task.yaml"), `${readFileSync(join(dir, "task.yaml"), "utf8")}${extra}`);
  return dir;
}

/** A submission made the way an agent's diff is: a fresh snapshot with all_mean appended, diffed against base. */
async function meanPatch(name: string, body: string): Promise<string> {
  const dir = join(root, `src-${name}`);
  await createSnapshot(task, dir);
  const ops = join(dir, "tinyinfra", "ops.py");
  writeFileSync(ops, `${readFileSync(ops, "utf8")}\n\ndef all_mean(t: torch.Tensor) -> torch.Tensor:\n${body}\n`);
  const file = join(root, `${name}.patch`);
  writeFileSync(file, await diffAgainstBase(dir));
  return file;
}

/** Right only at world size 2: the world size is a constant. */
const DIVIDE_BY_TWO = "    out = t.clone()\n    dist.all_reduce(out, op=dist.ReduceOp.SUM)\n    return out / 2";
/** Right numbers, but reduces the caller's tensor in place (an official test checks the input is kept). */
const IN_PLACE = "    dist.all_reduce(t, op=dist.ReduceOp.SUM)\n    return t / dist.get_world_size()";

const sessionFiles = (artifactDir: string) => readdirSync(join(artifactDir, "sessions")).sort();
const outcome = (r: GradeResult, id: string) => r.cases.find((c) => c.id === id)?.outcome;

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "infradev-worldsizes-"));
  tasksDir = join(root, "tasks");
  copyTask(tasksDir, "world_sizes: [3, 2]\n");
  task = loadGraderTask("tiny-mean", tasksDir);
  sandboxFactory = graderSandboxFactory("local", [root]);
  cal23 = (await calibrate({ task, cacheDir: join(root, "cal-1run"), sandboxFactory, runs: 1 })).calibration;
}, 300_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("task.yaml world_sizes", () => {
  it("is grader-only, sorted when graded, and validated with the field named", () => {
    expect(task.fullSpec.world_sizes).toEqual([3, 2]);
    expect(gradedWorldSizes(task.fullSpec)).toEqual([2, 3]);
    expect(gradedWorldSizes(task.fullSpec, 4)).toEqual([4]);
    expect(gradedWorldSizes(loadGraderTask("tiny-mean", FIXTURES).fullSpec)).toEqual([2]);
    expect("world_sizes" in loadPublicTask("tiny-mean", tasksDir).spec).toBe(false);
    for (const [bad, why] of [
      ["[]", /task\.yaml: world_sizes: expected array ≥ 1 items/],
      ["[2, 2]", /task\.yaml: world_sizes: expected distinct world sizes, got \[2,2\]/],
      ["[0, 2]", /task\.yaml: world_sizes\.0: expected a number ≥ 1, got 0/],
      ["[1.5]", /task\.yaml: world_sizes\.0: expected integer/],
    ] as const) {
      const dir = copyTask(mkdtempSync(join(root, "bad-")), `world_sizes: ${bad}\n`);
      expect(() => loadTaskSpec(dir), bad).toThrow(TaskError);
      expect(() => loadTaskSpec(dir), bad).toThrow(why);
    }
  });

  it("plans every official session first, then every probe session, world sizes ascending; names carry the world size", () => {
    const layout = { officialDirs: ["tests"], probeFiles: ["tests/test_abcdefghij.py"], probeOnly: ["tests/test_abcdefghij.py"], probePlugin: null, canaries: [] };
    const pin = { args: [], config: null, droppedAddopts: [] };
    const plans = planSessions(task, "/nonexistent", layout, { pin });
    expect(plans.map((p) => [p.fileName, p.ranks, p.idPrefix])).toEqual([
      ["cpu.ws2.official", 2, "ws2/"],
      ["cpu.ws3.official", 3, "ws3/"],
      ["cpu.ws2.probe", 2, "ws2/"],
      ["cpu.ws3.probe", 3, "ws3/"],
    ]);
    // At exactly the task's ranks, names stay as they were before world sizes existed.
    expect(planSessions(task, "/nonexistent", layout, { pin, worldSizes: [2] }).map((p) => [p.fileName, p.idPrefix])).toEqual([
      ["cpu.official", ""],
      ["cpu.probe", ""],
    ]);
    expect(planSessions(task, "/nonexistent", layout, { pin, worldSizes: [1] }).map((p) => p.fileName)).toEqual(["cpu.ws1.official", "cpu.ws1.probe"]);
  });
});

describe("early stop, the pure parts", () => {
  const rec = (id: string, o: CaseRecord["outcome"]): CaseRecord => ({ id, suite: id.includes("infradev_probes/") ? "probe" : "official", outcome: o, time_s: 0 });
  const g = goldView({
    cases: [
      { id: "ws2/t.py::a", suite: "official", outcomes: ["passed", "passed"] },
      { id: "ws2/t.py::flaky", suite: "official", outcomes: ["passed", "failed"] },
      { id: "ws3/t.py::a", suite: "official", outcomes: ["passed", "passed"] },
      { id: "ws2/infradev_probes/p.py::p", suite: "probe", outcomes: ["passed", "passed"] },
      { id: "ws3/infradev_probes/p.py::p", suite: "probe", outcomes: ["passed", "passed"] },
    ],
  });
  it("stops when a case of this session that gold always passes did not pass; flaky and other sessions' cases do not count", () => {
    const ws2 = { name: "official" as const, idPrefix: "ws2/" };
    expect(shouldStopEarly(g, { cases: [rec("ws2/t.py::a", "passed"), rec("ws2/t.py::flaky", "failed")] }, ws2)).toBe(false);
    expect(shouldStopEarly(g, { cases: [rec("ws2/t.py::a", "failed")] }, ws2)).toBe(true);
    // Not collected at all counts as not passed.
    expect(shouldStopEarly(g, { cases: [] }, ws2)).toBe(true);
    expect(shouldStopEarly(g, { cases: [rec("ws2/infradev_probes/p.py::p", "passed")] }, { name: "probe", idPrefix: "ws2/" })).toBe(false);
  });

  it("a stop in an official session leaves Set A unresolved; a stop in a probe session only Set B", () => {
    const passedOfficial = [rec("ws2/t.py::a", "passed"), rec("ws2/t.py::flaky", "passed"), rec("ws3/t.py::a", "passed")];
    const afterProbe = scoreSubmission(g, {
      task_id: "t",
      status: "graded",
      apply_method: "git_apply",
      cases: [...passedOfficial, rec("ws2/infradev_probes/p.py::p", "failed")],
      partial: { stopped_after: "cpu.ws2.probe", skipped: ["cpu.ws3.probe"], stopped_suite: "probe", skipped_sessions: [{ idPrefix: "ws3/", suite: "probe" }] },
    });
    expect(afterProbe.official).toMatchObject({ resolved: true, resolved_strict: true });
    expect(afterProbe.with_probes).toMatchObject({ resolved: false, resolved_strict: false });
    expect(afterProbe.partial).toEqual({ stopped_after: "cpu.ws2.probe", skipped: ["cpu.ws3.probe"] });
    expect(afterProbe.cases.find((c) => c.id === "ws3/infradev_probes/p.py::p")).toEqual({ id: "ws3/infradev_probes/p.py::p", suite: "probe", outcome: "not_run" });
    const afterOfficial = scoreSubmission(g, {
      task_id: "t",
      status: "graded",
      apply_method: "git_apply",
      // Passes everything it ran but a; the paper rule alone could still count it resolved.
      cases: [rec("ws2/t.py::a", "failed"), rec("ws2/t.py::flaky", "passed")],
      partial: { stopped_after: "cpu.ws2.official", skipped: ["cpu.ws3.official", "cpu.ws2.probe", "cpu.ws3.probe"], stopped_suite: "official", skipped_sessions: [] },
    });
    expect(afterOfficial.official.resolved).toBe(false);
    expect(afterOfficial.with_probes.resolved).toBe(false);
  });
});

describe("grading at several world sizes (real ranks)", () => {
  it("gold's ids carry the world size, and every case is there at each", () => {
    expect(cal23.world_sizes).toEqual([2, 3]);
    const ids = cal23.cases.map((c) => c.id);
    const at = (ws: number) => ids.filter((id) => id.startsWith(`ws${ws}/`)).map((id) => id.slice(`ws${ws}/`.length)).sort();
    expect(ids.every((id) => /^ws[23]\//.test(id))).toBe(true);
    expect(at(2)).toEqual(at(3));
    expect(at(2)).toContain("infradev_probes/test_probe_mean.py::test_mean_is_the_average");
    expect(at(2)).toHaveLength(8);
  });

  it("a patch right only at world size 2 is resolved at [2] and not at [2, 3]; gold at [2] is calibrated once and reused", async () => {
    const patch = await meanPatch("divide-by-two", DIVIDE_BY_TWO);
    const calDir = join(root, "cal");
    const said: string[] = [];
    const at2 = await gradeSubmission({ task, patchFile: patch, worldSizes: [2], outDir: join(root, "out"), calibrationDir: calDir, sandboxFactory, onProgress: (m) => said.push(m) });
    expect(at2.result).toMatchObject({ status: "graded", world_sizes: [2], official: { resolved: true }, with_probes: { resolved: true, resolved_strict: true } });
    expect(at2.result.cases.every((c) => !c.id.startsWith("ws"))).toBe(true);
    expect(said.some((m) => m.startsWith("calibrated gold (3 runs)"))).toBe(true);
    const calFile = join(calibrationDirFor(calDir, task, cal23.task_hash, cal23.fingerprint, [2]), "calibration.json");
    expect(calFile).toMatch(/-ws2[/\\]calibration\.json$/);
    const calBefore = statSync(calFile).mtimeMs;

    // A second grade at [2] (another submission) uses the same calibration: gold does not run again.
    const again: string[] = [];
    const gold = await gradeSubmission({ task, patchFile: task.hidden.goldenPatch, worldSizes: [2], outDir: join(root, "out"), calibrationDir: calDir, sandboxFactory, onProgress: (m) => again.push(m) });
    expect(gold.result.with_probes.resolved_strict).toBe(true);
    expect(again.some((m) => m.includes("calibrat"))).toBe(false);
    expect(statSync(calFile).mtimeMs).toBe(calBefore);

    const at23 = await gradeSubmission({ task, patchFile: patch, outDir: join(root, "out"), calibration: cal23, sandboxFactory });
    expect(at23.artifactDir).not.toBe(at2.artifactDir);
    expect(at23.result).toMatchObject({ status: "graded", world_sizes: [2, 3], official: { resolved: true }, with_probes: { resolved: false, resolved_strict: false } });
    expect(outcome(at23.result, "ws2/infradev_probes/test_probe_mean.py::test_mean_is_the_average")).toBe("passed");
    expect(at23.result.cases.find((c) => c.id === "ws3/infradev_probes/test_probe_mean.py::test_mean_is_the_average")).toMatchObject({ outcome: "failed", label: "numerical" });
    expect(sessionFiles(at23.artifactDir)).toEqual(["cpu.ws2.official.json", "cpu.ws2.probe.json", "cpu.ws3.official.json", "cpu.ws3.probe.json"]);
    expect(readdirSync(join(at23.artifactDir, "logs")).sort()).toEqual(["cpu.ws2.official", "cpu.ws2.probe", "cpu.ws3.official", "cpu.ws3.probe"]);
    expect((JSON.parse(readFileSync(join(at23.artifactDir, "meta.json"), "utf8")) as GradeMeta).world_sizes).toEqual([2, 3]);
  }, 300_000);

  it("early stop: failing an official test at the first world size stops that session there and skips every later one; a later full grade runs them", async () => {
    const patch = await meanPatch("in-place", IN_PLACE);
    const out = join(root, "out-stop");
    const stopped = await gradeSubmission({ task, patchFile: patch, outDir: out, calibration: cal23, sandboxFactory, stopEarly: true });
    expect(stopped.result.partial).toEqual({ stopped_after: "cpu.ws2.official", skipped: ["cpu.ws3.official", "cpu.ws2.probe", "cpu.ws3.probe"] });
    expect(sessionFiles(stopped.artifactDir)).toEqual(["cpu.ws2.official.json"]);
    expect(stopped.result, stopped.result.tamper_evidence.join("\n")).toMatchObject({ status: "graded", official: { resolved: false }, with_probes: { resolved: false } });
    expect(outcome(stopped.result, "ws2/tests/test_ops.py::test_all_mean_keeps_input")).toBe("failed");
    expect(outcome(stopped.result, "ws3/tests/test_ops.py::test_all_sum")).toBe("not_run");
    // The session itself stopped at that failure (fail fast): what it never reached did not run,
    // nothing else of it failed, and no canary it did not reach reads as tampering.
    const session = JSON.parse(readFileSync(join(stopped.artifactDir, "sessions", "cpu.ws2.official.json"), "utf8")) as { launch_status: string; tamper_evidence: string[] };
    expect(session.launch_status).toBe("fail_fast");
    expect(session.tamper_evidence).toEqual([]);
    const required = new Set(goldView(cal23).filter((g) => g.required).map((g) => g.id));
    const others = stopped.result.cases.filter((x) => required.has(x.id) && x.id.startsWith("ws2/tests/") && x.id !== "ws2/tests/test_ops.py::test_all_mean_keeps_input");
    expect(others.length).toBeGreaterThan(0);
    for (const c of others) expect([c.id, ["passed", "not_run"].includes(c.outcome)]).toEqual([c.id, true]);
    // Another early-stopping grade reuses it; a grade without stopEarly does not.
    expect((await gradeSubmission({ task, patchFile: patch, outDir: out, calibration: cal23, sandboxFactory, stopEarly: true })).reused).toBe(true);
    const full = await gradeSubmission({ task, patchFile: patch, outDir: out, calibration: cal23, sandboxFactory });
    expect(full.reused).toBe(false);
    expect(full.result.partial).toBeUndefined();
    expect(sessionFiles(full.artifactDir)).toHaveLength(4);
    expect(outcome(full.result, "ws3/tests/test_ops.py::test_all_sum")).toBe("passed");
    // The session cut short answers only another grade cut at the same cases: the full grade runs it again.
    expect((JSON.parse(readFileSync(join(full.artifactDir, "meta.json"), "utf8")) as GradeMeta).reused_sessions).toEqual([]);
  }, 300_000);

  it("early stop: failing only a probe is resolved in Set A, not in Set B; a right patch runs every session", async () => {
    const adv = task.hidden.adversarial.find((a) => a.name === "two-all-reduces")!;
    const out = join(root, "out-stop");
    const probeOnly = await gradeSubmission({ task, patchFile: adv.patchPath, outDir: out, calibration: cal23, sandboxFactory, stopEarly: true });
    expect(probeOnly.result.partial).toEqual({ stopped_after: "cpu.ws2.probe", skipped: ["cpu.ws3.probe"] });
    expect(sessionFiles(probeOnly.artifactDir)).toEqual(["cpu.ws2.official.json", "cpu.ws2.probe.json", "cpu.ws3.official.json"]);
    expect(probeOnly.result).toMatchObject({ official: { resolved: true, resolved_strict: true }, with_probes: { resolved: false, resolved_strict: false } });
    const gold = await gradeSubmission({ task, patchFile: task.hidden.goldenPatch, outDir: out, calibration: cal23, sandboxFactory, stopEarly: true });
    expect(gold.result.partial).toBeUndefined();
    expect(sessionFiles(gold.artifactDir)).toHaveLength(4);
    expect(gold.result.with_probes.resolved_strict).toBe(true);
  }, 300_000);
});

describe("the CLI", () => {
  const tsx = join(REPO_ROOT, "node_modules", ".bin", "tsx");
  const cli = join(REPO_ROOT, "src", "cli", "main.ts");
  it("grade --ranks 3 grades at 3 only (gold calibrated at 3); a bad --ranks is a usage error", async () => {
    const plain = join(root, "plain");
    copyTask(plain, "");
    const args = ["grade", "--task", "tiny-mean", "--tasks-dir", plain, "--patch", await meanPatch("cli-divide-by-two", DIVIDE_BY_TWO), "--out", join(root, "cli-out"), "--calibration-dir", join(root, "cli-cal")];
    const { stdout } = await run(tsx, [cli, ...args, "--ranks", "3", "--json"], { maxBuffer: 16 << 20 });
    const result = JSON.parse(stdout) as GradeResult;
    expect(result.world_sizes).toEqual([3]);
    expect(result.cases.length).toBe(8);
    expect(result.cases.every((c) => c.id.startsWith("ws3/"))).toBe(true);
    expect(result).toMatchObject({ official: { resolved: true }, with_probes: { resolved: false } });
    const calDirs = readdirSync(join(root, "cli-cal", "tiny-mean"));
    expect(calDirs).toHaveLength(1);
    expect(calDirs[0]).toMatch(/-ws3$/);
    expect(existsSync(join(root, "cli-cal", "tiny-mean", calDirs[0]!, "calibration.json"))).toBe(true);
    for (const bad of ["0", "two", "2.5", "-1"]) {
      const err = await run(tsx, [cli, ...args, `--ranks=${bad}`]).then(
        () => null,
        (e: { code: number; stderr: string }) => e,
      );
      expect(err?.code, bad).toBe(2);
      expect(err?.stderr, bad).toMatch(/--ranks <n>.*whole number of ranks from 1 to 1024/);
    }
  }, 300_000);
});
