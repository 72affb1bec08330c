import { TEST_FIXTURES } from "../../helpers/paths.js";
import { readFileSync, readdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { calibrate } from "../../../src/grader/grade/calibrate.js";
import { CANARY_STYLES, MUST_PASS_STYLES } from "../../../src/grader/workspace/test-renaming.js";
import { gradeSubmission, type GradeMeta } from "../../../src/grader/grade/grade.js";
import type { SandboxFactory } from "../../../src/grader/grade/pipeline.js";
import type { Calibration, GradeResult, SessionResult } from "../../../src/grader/grade/types.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../../src/task/public/snapshot.js";

/**
 * Tamper verdicts and lost records on real runs: the tiny-mean fixture task, 2 ranks over gloo in the
 * local (bwrap) sandbox, graded by the shipped factory. Each hostile submission implements all_mean
 * wrongly (sum, not mean: the probe catches it) and then tries to hide that.
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
let root: string;
let task: GraderTask;
let calibration: Calibration;
let sandboxFactory: SandboxFactory;

/** all_mean that sums (the adversarial patch's code), plus `init` as tinyinfra/__init__.py. */
async function hostile(name: string, init: string): Promise<string> {
  const dir = join(root, `src-${name}`);
  await createSnapshot(task, dir);
  const ops = join(dir, "tinyinfra", "ops.py");
  writeFileSync(ops, `${readFileSync(ops, "utf8")}\n\ndef all_mean(t: torch.Tensor) -> torch.Tensor:\n    out = t.clone()\n    dist.all_reduce(out, op=dist.ReduceOp.SUM)\n    return out\n`);
  writeFileSync(join(dir, "tinyinfra", "__init__.py"), init);
  const file = join(root, `${name}.patch`);
  writeFileSync(file, await diffAgainstBase(dir));
  return file;
}

const grade = (patchFile: string) => gradeSubmission({ task, patchFile, outDir: join(root, "out"), calibration, sandboxFactory });
const sessions = (artifactDir: string): SessionResult[] =>
  readdirSync(join(artifactDir, "sessions")).map((f) => JSON.parse(readFileSync(join(artifactDir, "sessions", f), "utf8")) as SessionResult);
const zero = (r: GradeResult) => {
  expect(r.score).toBe(0);
  expect(r.official.score).toBe(0);
  expect(r.with_probes.resolved).toBe(false);
};

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "infradev-grader-tamper-runs-"));
  task = loadGraderTask("tiny-mean", FIXTURES);
  sandboxFactory = graderSandboxFactory("local", [root]);
  // One gold run: flakiness is not under test here. Gold itself must not read as tampered.
  calibration = (await calibrate({ task, cacheDir: join(root, "calibration"), sandboxFactory, runs: 1 })).calibration;
}, 120_000);
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("tamper verdict on real ranks", () => {
  it("gold and the adversarial patch are graded, never tampered: every canary on every rank as it must be, real ids only", async () => {
    for (const patch of [task.hidden.goldenPatch, task.hidden.adversarial.find((a) => a.name === "sum-not-mean")!.patchPath]) {
      const out = await grade(patch);
      expect(out.result.status).toBe("graded");
      expect(out.result.tamper_evidence).toEqual([]);
      const all = sessions(out.artifactDir);
      expect(all.map((s) => `${s.mode}.${s.session}`).sort()).toEqual(["cpu.official", "cpu.probe"]);
      for (const s of all) expect(s.tamper_evidence).toEqual([]);
      const canaries = all.flatMap((s) => s.canaries!);
      // One must-pass and one must-fail canary per assertion style, beside the official tests and beside the probes.
      expect(canaries.filter((c) => c.expected === "passed")).toHaveLength(2 * MUST_PASS_STYLES.length);
      expect(canaries.filter((c) => c.expected === "failed")).toHaveLength(2 * CANARY_STYLES.length);
      // Twins (they run a real test, then fail) must not pass: failed or error.
      expect(canaries.filter((c) => c.expected === "not_passed").length).toBeGreaterThan(0);
      for (const c of canaries) {
        if (c.expected === "not_passed") for (const o of c.ranks) expect(["failed", "error"], c.id).toContain(o);
        else expect(c.ranks, c.id).toEqual([c.expected, c.expected]);
      }
      // The results speak of the real tests only: no canary, no random name.
      expect(all.flatMap((s) => s.cases.map((c) => c.id)).sort()).toEqual(calibration.cases.map((c) => c.id).sort());
      expect(JSON.stringify(out.result)).not.toMatch(/test_[a-z]{10}\b|infradev_canaries/);
    }
  }, 60_000);

  it("a package __init__ that patches pytest's report class (names built from strings) so every failure reads as a pass: tampered, 0", async () => {
    const patch = await hostile(
      "flip-reports",
      [
        "def _quiet():",
        '    mod = __import__("_py" + "test." + "repo" + "rts", fromlist=["x"])',
        '    cls = getattr(mod, "Test" + "Report")',
        "    orig = cls.__init__",
        "",
        "    def init(self, *a, **k):",
        "        orig(self, *a, **k)",
        '        if self.outcome == "failed":',
        '            self.outcome = "passed"',
        "            self.longrepr = None",
        "",
        "    cls.__init__ = init",
        "",
        "",
        "_quiet()",
        "",
      ].join("\n"),
    );
    const out = await grade(patch);
    expect(out.result.status).toBe("tampered");
    zero(out.result);
    // Without the canaries this would be resolved: every record reads as a pass.
    for (const s of sessions(out.artifactDir)) expect(s.cases.every((c) => c.outcome === "passed" || c.outcome === "skipped")).toBe(true);
    expect(out.result.tamper_evidence).toEqual(expect.arrayContaining([expect.stringMatching(/^cpu\.(official|probe): canary infradev_canaries\/(official|probe)\/test_c\d\.py::test_fail_\d+ must fail but is passed on rank [01]$/)]));
    expect(out.result.tamper_evidence.filter((e) => /must fail but is passed/.test(e))).toHaveLength(2 * CANARY_STYLES.length * 2); // the must-fail canaries of both locations × 2 ranks
    expect(out.result.tamper_evidence.some((e) => /test_pass_/.test(e))).toBe(false);
  }, 60_000);

  it("a package that appends forged records to the recording plugin's files at exit: tampered, 0", async () => {
    const patch = await hostile(
      "forge-records",
      [
        "import atexit, json, os",
        "",
        "",
        "def _files():",
        "    mine = 'rank%s.' % os.environ.get('RANK', '0')",
        "    for base, _dirs, files in os.walk(os.getcwd()):",
        "        for name in files:",
        "            if name.startswith(mine) and name.endswith('.jsonl'):",
        "                yield os.path.join(base, name)",
        "",
        "",
        "def _forge():",
        "    for path in list(_files()):",
        "        with open(path, encoding='utf-8') as f:",
        "            lines = [l for l in f.read().splitlines() if l.strip()]",
        "        forged = []",
        "        for line in lines:",
        "            try:",
        "                rec = json.loads(line)",
        "            except ValueError:",
        "                continue",
        "            if rec.get('outcome') in ('failed', 'error'):",
        "                rec['outcome'] = 'passed'",
        "                forged.append(rec)",
        "        if lines:",
        "            extra = dict(json.loads(lines[-1]), nodeid='tests/test_forged.py::test_forged', outcome='passed')",
        "            forged.append(extra)",
        "        with open(path, 'a', encoding='utf-8') as f:",
        "            for rec in forged:",
        "                f.write(json.dumps(rec) + '\\n')",
        "",
        "",
        "atexit.register(_forge)",
        "",
      ].join("\n"),
    );
    const out = await grade(patch);
    expect(out.result.status, JSON.stringify(out.result.tamper_evidence)).toBe("tampered");
    zero(out.result);
    // The appended lines make the plugin count more than pytest itself did, on every rank (the
    // launcher keeps a record of a test the rank never collected out of the cases altogether).
    for (const r of [0, 1]) {
      expect(out.result.tamper_evidence).toContainEqual(expect.stringMatching(new RegExp(`^cpu\\.(official|probe): rank ${r}: the recording plugin's counts \\(.*\\) disagree with pytest's summary line`)));
      expect(out.result.tamper_evidence).toContainEqual(expect.stringMatching(new RegExp(`^cpu\\.(official|probe): rank ${r}: the recording plugin's counts \\(.*\\) disagree with pytest's own JUnit report`)));
    }
    expect(JSON.stringify(out.result)).not.toContain("test_forged");
  }, 60_000);

  it("a package that SIGTERMs the launcher at import is the submission's: graded 0 with the reason (the control run keeps its records), not a harness fault", async () => {
    const patch = await hostile("kill-launcher", "import os, signal\n\nos.kill(os.getppid(), signal.SIGTERM)\n");
    const out = await grade(patch);
    expect(out.result.status).toBe("graded");
    zero(out.result);
    expect(out.result.reason).toMatch(/^records lost: cpu\.official: .+; cpu\.probe: .+ \(the control run on the base kept its records: the submission's doing; those cases count failed\)$/);
    expect(out.result.cases.every((c) => c.outcome === "failed")).toBe(true);
    const meta = JSON.parse(readFileSync(join(out.artifactDir, "meta.json"), "utf8")) as GradeMeta;
    expect(meta.control).toMatch(/kept its records/);
    expect(meta.lost_records).toHaveLength(2); // the official session and the probe session
  }, 90_000);

  it("when the control run (fresh base, canaries only) loses its records too, the harness is at fault: nothing scored", async () => {
    const patch = await hostile("kill-launcher-2", "import os, signal\n\nos.kill(os.getppid(), signal.SIGTERM)\n");
    // The third sandbox is the control's (the first two are the official and the probe session's): a
    // harness whose launcher never reports (its command exits 1 at once).
    let made = 0;
    const broken: SandboxFactory = async (args) => {
      const sb = await sandboxFactory(args);
      if (++made < 3) return sb;
      return new Proxy(sb, { get: (t, k) => (k === "exec" ? (_argv: string[], o?: Parameters<typeof sb.exec>[1]) => t.exec(["sh", "-c", "exit 1"], o) : Reflect.get(t, k)) });
    };
    const out = await gradeSubmission({ task, patchFile: patch, outDir: join(root, "out-control"), calibration, sandboxFactory: broken });
    expect(made).toBe(3);
    expect(out.result).toMatchObject({ status: "harness_fault", score: null, passed: null });
    expect(out.result.reason).toMatch(/^harness fault \(not the submission's\): records lost: cpu\.official: .*; cpu\.probe: .*; the control run lost its records too: /);
  }, 90_000);

  it("a package that rewrites the staged tests from inside the sandbox cannot: they are read-only, the verdict stands", async () => {
    const patch = await hostile(
      "rewrite-tests",
      [
        "import os",
        "",
        "for base, _dirs, files in os.walk(os.path.join(os.getcwd(), 'tests')):",
        "    for name in files:",
        "        if name.endswith('.py') and name != 'conftest.py':",
        "            try:",
        "                with open(os.path.join(base, name), 'w') as f:",
        "                    f.write('def test_nothing():\\n    pass\\n')",
        "            except OSError:",
        "                pass",
        "",
      ].join("\n"),
    );
    const out = await grade(patch);
    expect(out.result).toMatchObject({ status: "graded", tamper_evidence: [], official: { resolved: true }, with_probes: { resolved: false } });
    expect(out.result.cases.find((c) => c.id.endsWith("::test_mean_is_the_average"))).toMatchObject({ outcome: "failed", label: "numerical" });
  }, 60_000);
});
