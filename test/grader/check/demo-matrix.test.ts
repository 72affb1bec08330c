/**
 * What the demo grades (pure, over the bundled tasks): the quick default is one task at its `ranks`
 * with the first two adversarial patches and every control; --full is every task at every graded
 * world size with every patch. The session count is what a fresh run starts.
 */
import { describe, expect, it } from "vitest";
import { QUICK_ADVERSARIAL, QUICK_DEMO_TASK, defaultDemoTasks, demoPlan, plannedSessions } from "../../../src/grader/check/demo-matrix.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";
import { listTaskIds } from "../../../src/task/public/loader.js";
import { bundledTasksDir } from "../../../src/lib/paths.js";

describe("demo plans", () => {
  const wsd = loadGraderTask("weight-sync-delta");
  const gb = loadGraderTask("grad-bucketing");

  it("quick: the task's ranks only, golden, the first two adversarial patches in index order, hollow, base, empty", () => {
    const p = demoPlan(wsd, "quick", "/tmp/empty.patch");
    expect(p.worldSizes).toEqual([wsd.fullSpec.ranks]);
    expect(p.worldSizes).not.toEqual(wsd.fullSpec.world_sizes);
    const adversarial = wsd.hidden.adversarial.slice(0, QUICK_ADVERSARIAL).map((a) => `adversarial/${a.name}`);
    expect(p.submissions.map((s) => s.name)).toEqual(["golden", ...adversarial, "hollow", "base", "empty"]);
    for (const s of p.submissions.filter((x) => x.kind === "adversarial")) expect(s.breaks!.length).toBeGreaterThan(0);
  });

  it("full: every graded world size and every adversarial patch", () => {
    const p = demoPlan(gb, "full", "/tmp/empty.patch");
    expect(p.worldSizes).toEqual([1, 2, 4]);
    expect(p.submissions.filter((s) => s.kind === "adversarial")).toHaveLength(gb.hidden.adversarial.length);
  });

  it("sessions of a fresh run: gold's 3 runs and every submission but the empty one, per world size, an official and a probe session each", () => {
    const quick = demoPlan(wsd, "quick", "e");
    // 3 calibration runs + golden, 2 adversarial, hollow, base = 8 runs, 1 world size, 1 mode, 2 suites.
    expect(plannedSessions([quick])).toBe(8 * 1 * 1 * 2);
    const full = [demoPlan(gb, "full", "e"), demoPlan(wsd, "full", "e")];
    const runs = (t: typeof gb) => 3 + 1 + t.hidden.adversarial.length + 1 + 1;
    expect(plannedSessions(full)).toBe(runs(gb) * 3 * 2 + runs(wsd) * 2 * 2);
  });

  it("default tasks: quick grades QUICK_DEMO_TASK when it runs here, else the first task that does; full grades every one", () => {
    const known = listTaskIds(bundledTasksDir());
    expect(known).toContain(QUICK_DEMO_TASK);
    expect(defaultDemoTasks(known, () => true, "quick")).toEqual([QUICK_DEMO_TASK]);
    expect(defaultDemoTasks(known, (id) => id !== QUICK_DEMO_TASK && id !== "cuda-graph-decode", "quick")).toEqual([known.find((id) => id !== QUICK_DEMO_TASK && id !== "cuda-graph-decode")]);
    expect(defaultDemoTasks(known, () => false, "quick")).toEqual([]);
    expect(defaultDemoTasks(known, () => false, "full")).toEqual(known);
  });
});
