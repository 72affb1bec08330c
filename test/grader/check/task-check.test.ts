import { REPO_ROOT, TEST_FIXTURES } from "../../helpers/paths.js";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { checkHtml, checkText } from "../../../src/grader/check/check-report.js";
import { checkTask, type CheckReport } from "../../../src/grader/check/task-check.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";

/**
 * `task check` on real runs: the check-mean fixture (2 ranks over gloo, world sizes 1 and 2) passes;
 * a copy of it with one defect of each kind fails with each defect's own message; a `breaks` typo is a
 * load error naming file and line. The mutants are generated from the golden patch and graded through
 * the normal pipeline, with the early stop.
 */

const ROOT = REPO_ROOT;
const CLI = join(ROOT, "dist", "cli", "main.js");
const FIXTURES = join(TEST_FIXTURES, "check", "tasks");

let root: string;
const errors = (r: CheckReport) => r.findings.filter((f) => f.level === "error").map((f) => `[${f.area}] ${f.message}`);

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-task-check-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

function copyTask(name: string): string {
  const dir = join(root, name, "tasks");
  cpSync(join(FIXTURES, "check-mean"), join(dir, "check-mean"), { recursive: true });
  return dir;
}

async function check(tasksDir: string, out: string): Promise<CheckReport> {
  const task = loadGraderTask("check-mean", tasksDir);
  return checkTask({
    task,
    outDir: join(root, out),
    calibrationDir: join(root, "calibration"),
    sandboxFactory: graderSandboxFactory("local", [root]),
    jobs: 2,
  });
}

describe("task check on the check-mean fixture", () => {
  let good: CheckReport;
  beforeAll(async () => {
    good = await check(FIXTURES, "good");
  }, 900_000);

  it("passes: every promise probed, controls accepted, adversaries caught, mutants killed", () => {
    expect(errors(good)).toEqual([]);
    expect(good.passed).toBe(true);
    expect(good.coverage.map((c) => c.id).sort()).toEqual(["dtype-and-shape", "input-unchanged", "mean-value", "one-all-reduce"]);
    for (const c of good.coverage) expect(c.probes.length, c.id).toBeGreaterThan(0);
    const alt = good.submissions.filter((s) => s.kind === "alternative");
    expect(alt.map((a) => [a.name, a.ok])).toEqual([
      ["divide-first", true],
      ["helper-in-place", true],
    ]);
    const adv = good.submissions.filter((s) => s.kind === "adversarial");
    expect(adv.length).toBe(3);
    for (const a of adv) {
      expect(a.set_a.resolved, a.name).toBe(true);
      expect(a.set_b.resolved, a.name).toBe(false);
    }
    // The hollow generated from the golden patch is graded and rejected, like the hand-written one.
    const gen = good.submissions.find((s) => s.kind === "hollow-generated")!;
    expect(gen.ok).toBe(true);
    expect(gen.set_a.resolved).toBe(false);
    const m = good.mutants!;
    expect(m.generated).toBeGreaterThan(3);
    expect(m.score).toBeGreaterThanOrEqual(0.9);
    // The author's equivalent mutant is reported with its reason, outside the score.
    expect(m.rows.filter((r) => r.verdict === "equivalent").map((r) => r.id)).toEqual(["tinyinfra/ops.py:all_mean:drop-kw#1"]);
    expect(m.killed_official + m.killed_probes + m.survived).toBe(m.graded);
    // The coverage table names, per promise, the adversarial patch its probes caught.
    expect(good.coverage.find((c) => c.id === "input-unchanged")!.adversarial).toContain("reduce-in-place");
    // Controls are graded until their verdict is decided: the base stops at its first failing session;
    // an adversarial patch caught at world size 1 never runs the world-size-2 probes, yet its row still
    // names a failing probe of each promise it breaks (the rows that ran every session need not).
    const base = good.submissions.find((s) => s.kind === "base")!;
    expect(base.skipped_sessions?.length).toBeGreaterThan(0);
    const decided = adv.filter((a) => a.skipped_sessions?.length);
    expect(decided.length).toBeGreaterThan(0);
    for (const a of decided) {
      expect(a.skipped_sessions!.every((f) => f.endsWith(".probe")), a.name).toBe(true);
      for (const b of a.breaks!) expect(a.failing_probes.map((f) => f.promise), a.name).toContain(b);
    }
    // Alternatives are always graded in full.
    for (const a of alt) expect(good.submissions.find((s) => s.name === a.name)!.skipped_sessions, a.name).toBeUndefined();
  });

  it("renders the report as text and HTML (coverage, controls, mutants with diffs)", () => {
    const text = checkText(good);
    expect(text).toMatch(/^PASSED: 0 error\(s\)/m);
    expect(text).toContain("mean-value");
    const html = checkHtml(good);
    expect(html).toContain('<table id="coverage">');
    expect(html).toContain('<table id="mutants">');
    expect(html).toContain("divide-first");
    expect(html).not.toMatch(/<script/i);
  });

  it("reuses every grade the second time (resumable: nothing is graded again)", async () => {
    const again = await check(FIXTURES, "good");
    expect(again.mutants!.reused).toBe(again.mutants!.graded + again.mutants!.errors);
    expect(again.duration_s).toBeLessThan(good.duration_s);
    expect(again.mutants!.score).toBe(good.mutants!.score);
  }, 600_000);
});

describe("task check fails a task with each defect, naming it", () => {
  let bad: CheckReport;
  beforeAll(async () => {
    const tasksDir = copyTask("bad");
    const t = join(tasksDir, "check-mean", "hidden");
    const probes = join(t, "probes", "test_probe_mean.py");
    let src = readFileSync(probes, "utf8");
    // (1) a probe without a marker; (2) a bad kind.
    src = src.replace('@pytest.mark.probe(promise="input-unchanged", kind="state")\n', "");
    src = src.replace('kind="condition"', 'kind="conditional"');
    // (3) a weak mean probe instead of the real one (zeros: any scaling passes), and no equivalents
    // declared: the division's mutant survives (the dropped op= is "killed" by the over-strict probe).
    src = src.replace(/@pytest\.mark\.probe\(promise="mean-value"[\s\S]*?\n\n\n/, '@pytest.mark.probe(promise="mean-value", kind="numerical")\ndef test_mean_of_zeros():\n    assert torch.equal(all_mean(torch.zeros(3)), torch.zeros(3))\n\n\n');
    rmSync(join(t, "mutants.yaml"));
    // (4) an over-strict probe: reads the golden patch's source text.
    src += '\n\n@pytest.mark.probe(promise="mean-value", kind="numerical")\ndef test_uses_reduce_op_sum():\n    import inspect\n    assert "ReduceOp.SUM" in inspect.getsource(all_mean)\n';
    writeFileSync(probes, src);
    // (5) a promise no probe names.
    writeFileSync(join(t, "promises.yaml"), `${readFileSync(join(t, "promises.yaml"), "utf8")}- id: empty-input\n  text: an empty tensor gives an empty tensor.\n  prompt: "Floating-point inputs only"\n`);
    bad = await check(tasksDir, "bad");
  }, 900_000);

  it("fails, with one precise message per defect", () => {
    expect(bad.passed).toBe(false);
    const e = errors(bad);
    const has = (re: RegExp) => expect(e.some((m) => re.test(m)), `${re}\n${e.join("\n")}`).toBe(true);
    has(/\[markers\] .*test_probe_mean\.py:\d+: test_input_left_unchanged: no probe marker/);
    has(/\[markers\] .*test_probe_mean\.py:\d+: test_dtype_and_shape_kept: probe marker: kind "conditional" is not one of numerical, resource, state, condition/);
    has(/\[promises\] .*promises\.yaml:\d+: promise "empty-input" has no probe/);
    has(/\[alternative\] alternative divide-first: over-strict probe\(s\), a false reject: .*test_uses_reduce_op_sum \(mean-value\)/);
    // all_mean's six mutants: early-return, two dropped statements, the dropped op= (killed by the
    // over-strict probe), the all_reduce issued twice (killed by the one-all-reduce probe), '/' -> '*'.
    has(/\[mutants\] mutation score 0\.\d+ < 0\.9 \(5 killed of 6; 1 survived\)/);
    expect(bad.mutants!.rows.find((r) => r.operator === "dup-collective")?.verdict).toBe("killed_probes");
    const survivors = bad.mutants!.rows.filter((r) => r.verdict === "survived");
    expect(survivors.map((r) => r.id)).toEqual(["tinyinfra/ops.py:all_mean:arith#1"]);
    // Each survivor comes with its diff against the golden patch.
    for (const s of survivors) expect(s.diff).toMatch(/^-.*\n\+/m);
    // The weak probe lets the sum through as well: the adversarial patch is resolved in Set B.
    has(/\[adversarial\] adversarial sum-not-mean: resolved in Set B: no probe catches it/);
  });
});

describe("task check --static", () => {
  it("finds a probe-marker typo in seconds, before anything runs: exit 1, nothing calibrated or graded", async () => {
    const tasksDir = copyTask("static");
    const probes = join(tasksDir, "check-mean", "hidden", "probes", "test_probe_mean.py");
    writeFileSync(probes, readFileSync(probes, "utf8").replace('kind="condition"', 'kind="conditional"'));
    const out = join(root, "static-out");
    const cal = join(root, "static-calibration");
    const r = await execa("node", [CLI, "task", "check", "check-mean", "--tasks-dir", tasksDir, "--static", "--out", out, "--calibration-dir", cal], { reject: false });
    expect(r.exitCode, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/static check: \[markers\] .*test_dtype_and_shape_kept: probe marker: kind "conditional"/);
    expect(r.stdout).toMatch(/static checks only \(--static\)/);
    expect(r.stderr).not.toMatch(/calibrating gold/);
    expect(existsSync(cal)).toBe(false);
    const report = JSON.parse(readFileSync(join(out, "report.json"), "utf8")) as CheckReport;
    expect([report.stage, report.passed, report.gold, report.submissions, report.mutants]).toEqual(["static", false, null, [], null]);
  });

  it("the full check says a static error before gold's calibration starts", async () => {
    const tasksDir = copyTask("static-first");
    const probes = join(tasksDir, "check-mean", "hidden", "probes", "test_probe_mean.py");
    writeFileSync(probes, readFileSync(probes, "utf8").replace('kind="condition"', 'kind="conditional"'));
    const said: string[] = [];
    const task = loadGraderTask("check-mean", tasksDir);
    // Stopped as soon as calibration is announced: the order of the messages is what is tested.
    await checkTask({ task, outDir: join(root, "static-first"), calibrationDir: join(root, "calibration"), sandboxFactory: graderSandboxFactory("local", [root]), runMutants: false, onProgress: (m) => {
      said.push(m);
      if (/calibrating gold/.test(m)) throw new Error("stop here");
    } }).catch((e: Error) => expect(e.message).toBe("stop here"));
    const marker = said.findIndex((m) => /static check: \[markers\]/.test(m));
    const calibrating = said.findIndex((m) => /calibrating gold/.test(m));
    expect(marker, said.join("\n")).toBeGreaterThanOrEqual(0);
    expect(marker).toBeLessThan(calibrating);
  });
});

describe("load errors name the file and the line", () => {
  it("a `breaks` typo in the adversarial index", async () => {
    const tasksDir = copyTask("typo");
    const index = join(tasksDir, "check-mean", "hidden", "adversarial", "index.yaml");
    writeFileSync(index, readFileSync(index, "utf8").replace("breaks: [one-all-reduce]", "breaks: [one-allreduce]"));
    const r = await execa("node", [CLI, "task", "check", "check-mean", "--tasks-dir", tasksDir, "--no-mutants", "--out", join(root, "typo-out")], { reject: false });
    expect(r.exitCode).toBe(2);
    expect(r.stderr).toMatch(/adversarial\/index\.yaml:7: two-all-reduces: breaks: unknown promise "one-allreduce" \(known: mean-value, one-all-reduce, input-unchanged, dtype-and-shape\)/);
  });

  it("a promise whose prompt fragment is not in prompt.md", () => {
    const tasksDir = copyTask("fragment");
    const file = join(tasksDir, "check-mean", "hidden", "promises.yaml");
    writeFileSync(file, readFileSync(file, "utf8").replace("exactly one all-reduce and no other collective\"", 'exactly one all-gather"'));
    expect(() => loadGraderTask("check-mean", tasksDir)).toThrow(/promises\.yaml:\d+: one-all-reduce: prompt: the fragment is not in .*prompt\.md: "exactly one all-gather"/);
  });
});
