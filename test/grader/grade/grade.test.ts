import { REPO_ROOT, TEST_FIXTURES } from "../../helpers/paths.js";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { calibrate } from "../../../src/grader/grade/calibrate.js";
import { gradeSubmission, submissionHash, type GradeMeta } from "../../../src/grader/grade/grade.js";
import type { SandboxFactory } from "../../../src/grader/grade/pipeline.js";
import type { Calibration, GradeResult, SessionResult } from "../../../src/grader/grade/types.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../../src/task/public/snapshot.js";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { pruneSandboxes } from "../../../src/sandbox/docker/create.js";
import { ownerAlive } from "../../../src/sandbox/docker/prune.js";
import { SANDBOX_BACKENDS, TEST_DOCKER_OPTIONS, backendCliFlags, prepareBackend } from "../../helpers/backends.js";

/**
 * The grader end to end on the tiny-mean fixture task: real git, real 2-rank torch sessions through
 * the Python launcher. Gold is calibrated once (3 runs) per sandbox backend and shared by that
 * backend's tests. Backends: test/helpers/backends.ts (local, plus docker where an engine runs).
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
let sandboxFactory: SandboxFactory;

let root: string;
let task: GraderTask;
let calibration: Calibration;
const calDir = () => join(root, "calibration");

/** A submission made the way an agent's diff is: edit a fresh snapshot, diff against base. */
async function makePatch(name: string, edit: (dir: string) => void): Promise<string> {
  const dir = join(root, `src-${name}`);
  await createSnapshot(task, dir);
  edit(dir);
  const file = join(root, `${name}.patch`);
  writeFileSync(file, await diffAgainstBase(dir));
  return file;
}

const appendMean = (body: string) => (dir: string) => {
  const ops = join(dir, "tinyinfra", "ops.py");
  writeFileSync(ops, `${readFileSync(ops, "utf8")}\n\ndef all_mean(t: torch.Tensor) -> torch.Tensor:\n${body}\n`);
};
const byId = (r: GradeResult) => new Map(r.cases.map((c) => [c.id.split("::")[1]!, c]));

describe.each(SANDBOX_BACKENDS)("grader on the %s sandbox", (backend) => {
  beforeAll(async () => {
    await prepareBackend(backend);
    root = mkdtempSync(join(tmpdir(), `infradev-grader-grade-${backend}-`));
    task = loadGraderTask("tiny-mean", FIXTURES);
    // The shipped factory (createSandbox), with the test's folders hidden as the CLI hides its own.
    sandboxFactory = graderSandboxFactory(backend, [root], backend === "docker" ? TEST_DOCKER_OPTIONS : {});
    calibration = (await calibrate({ task, cacheDir: calDir(), sandboxFactory })).calibration;
  }, 300_000);
  afterAll(() => { if (!process.env.INFRADEV_KEEP_TEST_DIRS) rmSync(root, { recursive: true, force: true }); });

  describe("calibration", () => {
    it("ran gold three times and keeps the cases gold fails or skips in N_p", () => {
      expect(calibration.runs).toBe(3);
      const ids = calibration.cases.map((c) => c.id.split("::")[1]);
      expect(ids).toEqual(expect.arrayContaining(["test_all_sum", "test_skipped_by_gold", "test_failed_by_gold", "test_mean_is_the_average", "test_one_all_reduce_call"]));
      expect(calibration.cases).toHaveLength(8);
      expect(calibration.cases.find((c) => c.id.endsWith("test_failed_by_gold"))!.outcomes).toEqual(["failed", "failed", "failed"]);
      expect(calibration.cases.find((c) => c.id.endsWith("test_one_all_reduce_call"))!.probe).toEqual({ promise: "one-all-reduce", kind: "resource" });
      expect(calibration.flaky).toEqual([]);
    });
  });

  describe("grading on real ranks", () => {
    it("an adversarial patch passes every official test and is caught by the probe of the promise it breaks", async () => {
      const adv = task.hidden.adversarial.find((a) => a.name === "sum-not-mean")!;
      const { result } = await gradeSubmission({ task, patchFile: adv.patchPath, outDir: join(root, "out"), calibrationDir: calDir(), sandboxFactory });
      expect(result).toMatchObject({ status: "graded", apply_method: "git_apply", n_cases: 8 });
      expect(result.official).toEqual({ n_cases: 6, passed: 4, score: 4 / 6, resolved: true, resolved_strict: true });
      expect(result.with_probes).toMatchObject({ passed: 5, resolved: false, resolved_strict: false });
      expect(byId(result).get("test_mean_is_the_average")).toMatchObject({ suite: "probe", outcome: "failed", label: "numerical" });
    });

    it("a submission's edits to the official tests are reverted: they cannot make a test pass", async () => {
      // Hollow code, plus test edits that would make every test pass if they were kept.
      const patch = await makePatch("edits-tests", (dir) => {
        appendMean('    raise NotImplementedError("all_mean")')(dir);
        writeFileSync(join(dir, "tests", "test_ops.py"), "def test_all_mean_shape():\n    pass\n\ndef test_all_mean_keeps_input():\n    pass\n");
        const conftest = join(dir, "tests", "conftest.py");
        writeFileSync(conftest, `${readFileSync(conftest, "utf8")}\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n        item.obj = lambda *a, **k: None\n`);
        writeFileSync(join(dir, "tests", "conftest_helper.py"), "PASS = True\n");
      });
      const out = await gradeSubmission({ task, patchFile: patch, outDir: join(root, "out"), calibrationDir: calDir(), sandboxFactory });
      const cases = byId(out.result);
      expect(cases.get("test_all_mean_shape")).toMatchObject({ outcome: "failed", label: "structural:not-implemented" });
      expect(cases.get("test_all_mean_keeps_input")).toMatchObject({ outcome: "failed", label: "structural:not-implemented" });
      expect(cases.get("test_all_sum")!.outcome).toBe("passed");
      expect(out.result.official.resolved).toBe(false);
      const meta = JSON.parse(readFileSync(join(out.artifactDir, "meta.json"), "utf8")) as GradeMeta;
      expect(meta.reverted_test_edits.sort()).toEqual(["tests/conftest.py", "tests/conftest_helper.py", "tests/test_ops.py"]);
    });

    it("a submission that hangs one rank gets that case labelled a hang, and the rest of the suite still runs", async () => {
      const patch = await makePatch(
        "hang",
        appendMean(
          "    import time\n    if dist.get_rank() == 1 and t.numel() == 7:\n        time.sleep(3600)\n    out = t.clone()\n    dist.all_reduce(out, op=dist.ReduceOp.SUM)\n    return out / dist.get_world_size()",
        ),
      );
      const out = await gradeSubmission({ task, patchFile: patch, outDir: join(root, "out"), calibrationDir: calDir(), sandboxFactory });
      const cases = byId(out.result);
      expect(out.result.status).toBe("graded");
      expect(cases.get("test_all_mean_same_on_every_rank")).toMatchObject({ outcome: "error", label: "structural:hang" });
      // Before the kill the launcher dumped every rank's stacks and read them: rank 0 waits in all_reduce
      // (the call site is the patch's, not the probe library's counting wrapper), rank 1 never came.
      const killed = cases.get("test_all_mean_same_on_every_rank")!.killed!;
      expect(killed.reason).toBe("hang");
      expect(killed.message).toMatch(/collective hang: rank 0 waits in all_reduce called at \S+\.py:\d+ in all_mean; did not arrive: rank 1 \(at \S+\.py:\d+ in all_mean\)/);
      expect(killed.stacks.map((s) => s.rank)).toEqual([0, 1]);
      expect(killed.stacks[0]!.text).toMatch(/Python stacks of rank 0 when it was killed:[\s\S]*distributed_c10d\.py", line \d+ in all_reduce/);
      expect(killed.stacks[1]!.text).toMatch(/Python stacks of rank 1 when it was killed:[\s\S]*line \d+ in all_mean/);
      expect(killed.stacks[1]!.text).not.toMatch(/distributed_c10d/);
      // Tests after the hang ran (in the launcher's restarted session) and passed.
      for (const id of ["test_all_mean_keeps_input", "test_mean_is_the_average", "test_one_all_reduce_call"]) expect(cases.get(id)!.outcome, id).toBe("passed");
      expect(out.result.with_probes).toMatchObject({ passed: 5, resolved: false });
      // Each launcher session has its own kernel count, and each is judged (a hang cannot leave the
      // traffic after it unjudged): the killed one has no totals from its hung rank, the restarted one does.
      const sessionDir = join(out.artifactDir, "sessions");
      const restarted = readdirSync(sessionDir).map((f) => JSON.parse(readFileSync(join(sessionDir, f), "utf8")) as SessionResult).filter((s) => s.wires);
      expect(restarted.length, "a session file with one wire record per launcher session").toBe(1);
      const wires = restarted[0]!.wires!;
      if (/not private|no kernel counters/.test(wires[0]!.skip ?? "")) return; // `none`: no loopback of its own to count
      // A session the launcher killed (the hang; and a twin of the hanging test, where one was drawn,
      // hangs its own restarted session) has a rank whose pytest never returned, so no totals: its
      // record says so. Every session whose ranks all finished is judged and, here, honest.
      const audit = restarted[0]!.audit!.filter((a) => a !== null);
      const sessions = [...new Set(audit.map((a) => a.session ?? 0))].sort((a, b) => a - b);
      expect(sessions.length, "one wire record per launcher session").toBe(wires.length);
      const why = JSON.stringify({ audit, wires });
      const finished = sessions.map((s) => audit.filter((a) => (a.session ?? 0) === s).every((a) => a.done));
      expect(finished[0], why).toBe(false);
      expect(finished.at(-1), why).toBe(true);
      sessions.forEach((_, i) => {
        if (finished[i]) expect(wires[i], why).toMatchObject({ verdict: false });
        else expect(wires[i]!.skip, why).toMatch(/a rank wrote no collective totals/);
      });
      expect(restarted[0]!.tamper_evidence).toEqual([]);
    }, 180_000);

    it("the base as it is (the acceptance check's base row) really runs: the post-PR tests and the probes fail on it", async () => {
      const out = await gradeSubmission({ task, patchFile: null, baseAsIs: true, outDir: join(root, "out"), calibrationDir: calDir(), sandboxFactory });
      expect(out.result).toMatchObject({ status: "graded", apply_method: null, n_cases: 8 });
      expect(out.artifactDir.endsWith(join("tiny-mean", "base-as-is"))).toBe(true);
      // all_mean does not exist before the PR: the post-PR test module fails to import, and every
      // probe fails; each case is labelled (none is scored unseen, as an empty patch would be).
      for (const c of out.result.cases) expect(c.outcome, c.id).not.toBe("passed");
      expect(out.result.cases.filter((c) => c.suite === "probe").length).toBeGreaterThan(0);
      expect(out.result.cases.every((c) => c.label === undefined || c.label.startsWith("structural") || c.suite === "probe")).toBe(true);
      expect(out.result.with_probes).toMatchObject({ passed: 0, resolved: false });
      expect(readFileSync(join(out.artifactDir, "apply.log"), "utf8")).toMatch(/nothing applied/);
    });

    it("reuses a complete result without running anything", async () => {
      const adv = task.hidden.adversarial.find((a) => a.name === "sum-not-mean")!;
      const again = await gradeSubmission({
        task,
        patchFile: adv.patchPath,
        outDir: join(root, "out"),
        calibrationDir: calDir(),
        // The fingerprint is taken in a sandbox (grader/fingerprint.ts); a caller that has it (demo)
        // starts none at all for a complete result.
        fingerprint: calibration.fingerprint,
        sandboxFactory: () => Promise.reject(new Error("must not start a sandbox")),
      });
      expect(again.reused).toBe(true);
      expect(again.result.with_probes.resolved).toBe(false);
    });
  });

  describe("resume", () => {
    it("after SIGKILL midway, a second run completes without redoing finished suites", async () => {
      const adv = task.hidden.adversarial.find((a) => a.name === "two-all-reduces")!;
      const out = join(root, "resume-out");
      const sessions = join(out, task.id, submissionHash(readFileSync(adv.patchPath)), "sessions");
      const cli = join(REPO_ROOT, "src", "cli", "main.ts");
      const tsx = join(REPO_ROOT, "node_modules", ".bin", "tsx");
      const args = [cli, "grade", "--task", join(FIXTURES, task.id), "--patch", adv.patchPath, "--out", out, "--calibration-dir", calDir(), "--sandbox", backend, ...backendCliFlags(backend), "--separate-suites", "--json"];

      // First run (the real CLI): killed with SIGKILL, its whole process group, once the official suite's file exists.
      const first = spawn(tsx, args, { detached: true, stdio: ["ignore", "ignore", "pipe"] });
      let log1 = "";
      first.stderr!.on("data", (d) => (log1 += String(d)));
      const exited = new Promise<void>((res) => first.on("exit", () => res()));
      const deadline = Date.now() + 120_000;
      while (!existsSync(join(sessions, "cpu.official.json")) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      expect(existsSync(join(sessions, "cpu.official.json")), log1).toBe(true);
      if (backend === "docker") {
        // Each session has a container of its own: wait for the probe session's before the kill, so
        // that the killed grader leaves one behind.
        const mine = async () => (await new Docker().listContainers({ filters: { label: ["infradev.kind=grader"] } })).filter((c) => c.Labels["infradev.session"]?.startsWith(`grade-${task.id}-`));
        for (let i = 0; i < 300 && (await mine()).length === 0; i++) await new Promise((r) => setTimeout(r, 100));
      }
      process.kill(-first.pid!, "SIGKILL");
      await exited;
      if (backend === "docker") {
        // The killed grader never removed its container: prune does (its owner is gone).
        const running = async () => (await new Docker().listContainers({ filters: { label: ["infradev.kind=grader"] } })).filter((c) => c.Labels["infradev.session"]?.startsWith(`grade-${task.id}-`));
        let orphans: string[] = [];
        // The killed process may take a moment to be reaped; until then its container still has an owner.
        for (let i = 0; i < 100 && orphans.length === 0; i++) {
          orphans = (await running()).filter((c) => ownerAlive(c.Labels) === false).map((c) => c.Id);
          if (orphans.length === 0) await new Promise((r) => setTimeout(r, 100));
        }
        expect(orphans.length, "no container of the killed grader found").toBeGreaterThan(0);
        expect((await pruneSandboxes()).removed.map((c) => c.id)).toEqual(expect.arrayContaining(orphans));
        expect((await running()).filter((c) => orphans.includes(c.Id))).toEqual([]);
      }
      expect(existsSync(join(sessions, "cpu.probe.json"))).toBe(false);
      expect(existsSync(join(out, task.id, submissionHash(readFileSync(adv.patchPath)), "result.json"))).toBe(false);
      const officialBefore = statSync(join(sessions, "cpu.official.json")).mtimeMs;
      // The killed run left its workspace (named in workspace.path): the next run must remove it.
      const killedWorkspace = readFileSync(join(out, task.id, submissionHash(readFileSync(adv.patchPath)), "workspace.path"), "utf8").trim();
      expect(existsSync(killedWorkspace)).toBe(true);

      // Second run: picks up the finished official suite, runs only the probes.
      const second = spawn(tsx, args, { stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let log2 = "";
      second.stdout!.on("data", (d) => (stdout += String(d)));
      second.stderr!.on("data", (d) => (log2 += String(d)));
      const code = await new Promise<number | null>((res) => second.on("exit", (c) => res(c)));
      expect(code, log2).toBe(0);
      expect(log2).toMatch(/cpu\.official: finished in an earlier run, reusing/);
      expect(log2).toMatch(/cpu\.probe: running/);
      expect(log2).not.toMatch(/cpu\.official: running/);
      expect(statSync(join(sessions, "cpu.official.json")).mtimeMs).toBe(officialBefore);
      const probe = JSON.parse(readFileSync(join(sessions, "cpu.probe.json"), "utf8")) as SessionResult;
      expect(probe.cases.length).toBe(2);
      const result = JSON.parse(stdout) as GradeResult;
      expect(result).toMatchObject({ status: "graded", official: { resolved: true }, with_probes: { resolved: false } });
      expect(result.cases.find((c) => c.id.endsWith("test_one_all_reduce_call"))).toMatchObject({ label: "behavioral-resource" });
      // The killed run's workspace was cleaned up by the second one.
      // (Other suites grade in parallel: only this run's folder is checked, not every folder of the name.)
      expect(existsSync(killedWorkspace)).toBe(false);
    }, 240_000);
  });
});
