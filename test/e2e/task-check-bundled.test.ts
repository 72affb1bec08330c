import { REPO_ROOT } from "../helpers/paths.js";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { scanProbeMarkers } from "../../src/grader/check/probe-markers.js";
import { interfaceContract, promptLeaks, withTaskTrees } from "../../src/grader/check/task-analysis.js";
import type { CheckReport } from "../../src/grader/check/task-check.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";

/**
 * The bundled tasks under `task check`. The static half (promises, markers, contract, leaks) for every
 * bundled task; the whole check, with a seeded sample of mutants, on grad-bucketing (CPU, world sizes 1, 2
 * and 4) through the real CLI. cuda-graph-decode needs a GPU: here it is refused as not runnable;
 * its full check on an H200 is in bench/gpu_check_cuda-graph-decode.json.
 */

const ROOT = REPO_ROOT;
const CLI = join(ROOT, "dist", "cli", "main.js");
let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-check-bundled-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe.each(["grad-bucketing", "cuda-graph-decode", "weight-sync-delta"])("%s, static half", (id) => {
  it("every probe is marked with a known promise and kind, every promise is probed", () => {
    const task = loadGraderTask(id);
    const scan = scanProbeMarkers(task);
    expect(scan.problems).toEqual([]);
    const probed = new Set(scan.probes.map((p) => p.marker!.promise));
    expect(task.hidden.promises!.filter((p) => !probed.has(p.id)).map((p) => p.id)).toEqual([]);
    // Every adversarial `breaks` names a promise (the loader refuses a typo; this is what it read).
    const known = new Set(task.hidden.promises!.map((p) => p.id));
    for (const a of task.hidden.adversarial) for (const b of a.breaks) expect(known.has(b), `${a.name}: ${b}`).toBe(true);
    expect(task.hidden.alternatives.length).toBeGreaterThanOrEqual(3);
  });

  it("prompt.md names every symbol of the golden patch the tests and probes use, and copies none of its code", async () => {
    const task = loadGraderTask(id);
    await withTaskTrees(task, { workDir: join(root, `trees-${id}`) }, async (trees) => {
      const symbols = await interfaceContract(task, { workDir: root, trees });
      expect(symbols.length).toBeGreaterThan(0);
      const missing = symbols.filter((s) => !new RegExp(`\\b${s.name.split(".").pop()}\\b`).test(task.prompt)).map((s) => `${s.name} (${s.definedAt})`);
      expect(missing).toEqual([]);
      expect(await promptLeaks(task, { workDir: root, trees })).toEqual([]);
    });
  }, 60_000);
});

describe("task check grad-bucketing through the CLI (a seeded sample of mutants)", () => {
  let report: CheckReport;
  let exitCode: number | undefined;
  beforeAll(async () => {
    const r = await execa("node", [CLI, "task", "check", "grad-bucketing", "--mutants", "8", "--seed", "3", "--jobs", "2", "--json", "--out", join(root, "check"), "--calibration-dir", join(root, "cal")], { reject: false, timeout: 2_400_000 });
    exitCode = r.exitCode;
    report = JSON.parse(r.stdout) as CheckReport;
  }, 2_400_000);

  it("passes: world sizes 1, 2 and 4, every promise probed, controls accepted, adversaries caught, sampled mutants killed", () => {
    expect(report.findings.filter((f) => f.level === "error")).toEqual([]);
    expect(exitCode).toBe(0);
    expect(report.world_sizes).toEqual([1, 2, 4]);
    expect(report.gold!.skipped_probes).toEqual([]);
    const alternatives = report.submissions.filter((s) => s.kind === "alternative");
    expect(alternatives.length).toBeGreaterThanOrEqual(3);
    for (const a of alternatives) expect([a.name, a.set_a.resolved_strict, a.set_b.resolved_strict]).toEqual([a.name, true, true]);
    for (const a of report.submissions.filter((s) => s.kind === "adversarial")) expect([a.name, a.set_a.resolved, a.set_b.resolved]).toEqual([a.name, true, false]);
    const m = report.mutants!;
    expect(m.graded + m.errors).toBe(8);
    expect(m.not_run).toBe(m.generated - m.equivalent - 8);
    expect(m.score).toBeGreaterThanOrEqual(0.9);
  });
});

it.skipIf(existsSync("/dev/nvidiactl"))("cuda-graph-decode's check is refused here (no GPU), exit 2 with the reason", async () => {
  const r = await execa("node", [CLI, "task", "check", "cuda-graph-decode", "--out", join(root, "gpu")], { reject: false });
  expect(r.exitCode).toBe(2);
  expect(r.stderr).toMatch(/requires a CUDA GPU/);
});
