import { TEST_FIXTURES } from "../helpers/paths.js";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
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
 */

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

  it("an alternative-correct patch is accepted", async () => {
    const alt = task.hidden.alternatives.find((a) => a.name === c.alternative)!;
    const { result: r } = await gradeSubmission({ task, patchFile: alt.patchPath, outDir: join(root, `out-${c.id}-alt`), sandboxFactory: factory(), calibration: cal, worldSizes: [2] });
    expect(r.with_probes!.resolved_strict, JSON.stringify(r.cases.filter((k) => k.outcome !== "passed"), null, 1)).toBe(true);
  }, 900_000);
});
