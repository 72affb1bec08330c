import { TEST_FIXTURES } from "../helpers/paths.js";
import { execFileSync } from "node:child_process";
import { appendFileSync, cpSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { calibrate } from "../../src/grader/grade/calibrate.js";
import { gradeSubmission } from "../../src/grader/grade/grade.js";
import { sessionCases } from "../../src/grader/grade/junit-report.js";
import { graderSandboxFactory } from "../../src/grader/grade/sandbox-factory.js";
import type { Calibration } from "../../src/grader/grade/types.js";
import { bundledTasksDir } from "../../src/lib/paths.js";
import { loadGraderTask, type GraderTask } from "../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../src/task/public/snapshot.js";

/**
 * Golden-differential probes end to end (issue 22), one real grade per bundled CPU task at world size 2
 * (bwrap sandbox, real ranks over gloo; gold calibrated once, one run): a design-level wrong patch
 * that passes every official test and every hand-written probe's sizes is rejected by a differential
 * rule, whose message shows the minimal failing workload; an alternative-correct patch is accepted.
 *
 *  - weight-sync-delta, wsd-header-3-words.patch: three int64 words of header per parameter (24·P
 *    bytes), over the prompt's 16·P + 64 once a module has more than 8 parameters; the hand-written
 *    probes' modules have at most 6.
 *  - grad-bucketing, gb-grads-from-hooks.patch: gradients captured by autograd hooks into the buckets
 *    instead of read from .grad at sync time: a .grad edited or cleared between backward and sync is
 *    ignored.
 *
 * And one attack (weight-sync-delta): the same wrong patch, plus code that at import searches every
 * folder its session can see (the working directory, every loaded module's folder, sys.path, /tmp,
 * home) for golden's WeightSync — source or a bundle of it — and runs golden's in place of its own.
 * Golden's side is recorded in a session of its own, so there must be nothing to find.
 */

/** Appended to nanorl/weight_sync.py by the attack: borrow golden's WeightSync if the session shows it anywhere. */
const BORROW_GOLDEN = `

def _borrow_golden():
    import base64, json, os, sys
    own = os.path.dirname(os.path.abspath(__file__))
    roots = [os.getcwd()]
    for m in list(sys.modules.values()):
        f = getattr(m, "__file__", None)
        if f and "-packages" not in f and "/python3." not in f:
            roots.append(os.path.dirname(os.path.abspath(f)))
    roots += [p for p in sys.path if p and "-packages" not in p and "/python3." not in p] + ["/tmp", os.path.expanduser("~")]
    seen, done = 0, set()
    for root in roots:
        if root in done or not os.path.isdir(root):
            continue
        done.add(root)
        for dirpath, _dirs, names in os.walk(root):
            if dirpath == own:
                continue
            for name in names:
                seen += 1
                if seen > 50000:
                    return None, None, seen
                if not name.endswith((".json", ".py")):
                    continue
                path = os.path.join(dirpath, name)
                try:
                    with open(path, "rb") as fh:
                        text = fh.read(8 << 20).decode("utf-8", "replace")
                except OSError:
                    continue
                if name.endswith(".json") and "nanorl/weight_sync.py" in text:
                    try:
                        return path, base64.b64decode(json.loads(text)["files"]["nanorl/weight_sync.py"]).decode(), seen
                    except Exception:
                        pass
                if name.endswith(".py") and "class WeightSync" in text and "_borrow_golden" not in text:
                    return path, text, seen
    return None, None, seen


_found = _borrow_golden()
import sys as _sys
_sys.stderr.write("infradev-redteam: searched %d files\\n" % _found[2])
if _found[0] is not None:
    _sys.stderr.write("infradev-redteam: golden found at %s\\n" % _found[0])
    exec(compile(_found[1], _found[0], "exec"), globals())
`;

const CASES = [
  { id: "weight-sync-delta", wrong: "wsd-header-3-words.patch", rules: ["diff-delta-bytes", "diff-header-only", "diff-every-later-sync"], label: "behavioral-resource", alternative: "runs-with-fallback" },
  { id: "grad-bucketing", wrong: "gb-grads-from-hooks.patch", rules: ["diff-averaged-grads"], label: "numerical", alternative: "first-fit-decreasing" },
] as const;

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-differential-e2e-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe.each(CASES)("$id: differential probes in a real grade at world size 2", (c) => {
  let task: GraderTask;
  let cal: Calibration;
  const factory = () => graderSandboxFactory("local", [root]);
  beforeAll(async () => {
    const tasks = join(root, `tasks-${c.id}`);
    cpSync(join(bundledTasksDir(), c.id), join(tasks, c.id), { recursive: true });
    task = loadGraderTask(c.id, tasks);
    cal = (await calibrate({ task, cacheDir: join(root, `cal-${c.id}`), sandboxFactory: factory(), runs: 1, worldSizes: [2] })).calibration;
  }, 900_000);

  it("gold passes every differential case (one per rule)", () => {
    const diff = cal.cases.filter((k) => k.id.includes("test_differential.py::"));
    expect(diff.length).toBe(task.hidden.differential!.spec.rules.length);
    expect(diff.filter((k) => k.outcomes.some((o) => o !== "passed")).map((k) => k.id)).toEqual([]);
  });

  it("a design-level wrong patch passes the official tests and is rejected by a differential rule with its minimal case", async () => {
    const { result: r, artifactDir } = await gradeSubmission({ task, patchFile: join(TEST_FIXTURES, "differential", c.wrong), outDir: join(root, `out-${c.id}-wrong`), sandboxFactory: factory(), calibration: cal, worldSizes: [2] });
    expect(r.official!.resolved).toBe(true);
    expect(r.with_probes!.resolved).toBe(false);
    const failed = r.cases.filter((k) => k.outcome !== "passed" && k.id.includes("test_differential.py::"));
    const caught = failed.filter((k) => c.rules.some((rule) => k.id.endsWith(`::test_${rule.replace(/-/g, "_")}`)));
    expect(caught.length, JSON.stringify(failed, null, 1)).toBeGreaterThan(0);
    const recorded = sessionCases(artifactDir);
    for (const k of caught) {
      expect(k.label).toBe(c.label);
      // The session's record of the case (what the JUnit report and the logs show): the rule, the violation, the minimal case.
      expect(recorded.get(k.id)?.record.message).toMatch(/^AssertionError: differential rule diff-[a-z-]+ \(promise [a-z-]+\): .*; minimal failing workload: \{/);
    }
  }, 900_000);

  it.runIf(c.id === "weight-sync-delta")("a wrong patch that searches its session for golden's code finds none and is still rejected", async () => {
    // Control: the search finds golden where grading rules 6 staged it (a bundle of golden's package beside the probes).
    const staged = join(root, "borrow-control");
    mkdirSync(join(staged, "tests"), { recursive: true });
    writeFileSync(join(staged, "tests", "abcdefgh.json"), JSON.stringify({ package: "nanorl", files: { "nanorl/weight_sync.py": Buffer.from("class WeightSync:\n    GOLDEN = 1\n").toString("base64") } }));
    const search = `__file__ = "/nonexistent/weight_sync.py"\n${BORROW_GOLDEN.split("\n_found = ")[0]}\nprint(_borrow_golden()[0])\n`;
    expect(execFileSync("/usr/bin/python3", ["-c", search], { cwd: staged, encoding: "utf8" }).trim()).toBe(join(staged, "tests", "abcdefgh.json"));
    const dir = join(root, "borrow-golden");
    await createSnapshot(task, dir);
    execFileSync("git", ["apply", join(TEST_FIXTURES, "differential", c.wrong)], { cwd: dir });
    appendFileSync(join(dir, "nanorl", "weight_sync.py"), BORROW_GOLDEN);
    const patch = join(root, "borrow-golden.patch");
    writeFileSync(patch, await diffAgainstBase(dir));
    const { result: r, artifactDir } = await gradeSubmission({ task, patchFile: patch, outDir: join(root, `out-${c.id}-borrow`), sandboxFactory: factory(), calibration: cal, worldSizes: [2] });
    expect(r.with_probes!.resolved).toBe(false);
    expect(r.cases.filter((k) => k.outcome !== "passed" && c.rules.some((rule) => k.id.endsWith(`::test_${rule.replace(/-/g, "_")}`))).length).toBeGreaterThan(0);
  }, 900_000);

  it("an alternative-correct patch is accepted", async () => {
    const alt = task.hidden.alternatives.find((a) => a.name === c.alternative)!;
    const { result: r } = await gradeSubmission({ task, patchFile: alt.patchPath, outDir: join(root, `out-${c.id}-alt`), sandboxFactory: factory(), calibration: cal, worldSizes: [2] });
    expect(r.with_probes!.resolved_strict, JSON.stringify(r.cases.filter((k) => k.outcome !== "passed"), null, 1)).toBe(true);
  }, 900_000);
});
