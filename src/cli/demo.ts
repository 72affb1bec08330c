import { availableParallelism } from "node:os";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { bundledTasksDir } from "../lib/paths.js";
import { defaultResultsDir } from "../grader/grade/results-dir.js";
import { addGraderOptions, graderSandboxFactoryFromFlags, progressOnStderr, requireDockerImage, type GraderCliOptions } from "./grade.js";
import { clock } from "./progress-line.js";
import { positiveInt } from "./task-check.js";

export function registerDemoCommands(program: Command): void {
  const cmd = program
    .command("demo")
    .description(
      "show patches that pass every official test and are still wrong: grade the golden patch, adversarial patches, the hollow patch, the pre-PR base as it is and an empty patch, print one table, exit 1 when an expectation fails. Quick by default (one task at one world size, two adversarial patches); --full grades every task runnable here at every world size with every adversarial patch (or --tasks-dir's: the task author's acceptance check)",
    )
    .option("--out <dir>", "results folder (complete results found there are reused; default <results dir>/demo, outside the package)", join(defaultResultsDir(), "demo"))
    .option("--full", "the whole matrix: every task runnable here, at every world size it is graded at, every adversarial patch (tens of minutes on 2 cores)")
    .option("--task <id>", "only this task (repeatable; default: quick, weight-sync-delta; --full, every task; one this machine cannot run is refused, exit 2)", (v: string, prev: string[] = []) => [...prev, v])
    .option("--json", "print an array of { submission, result } on stdout")
    // Two at once by default on a machine of 2+ cores: a grade keeps ~0.6 of 2 cores busy on its own
    // (workspace, sandbox start, bookkeeping run one process at a time), so a second fills the gaps.
    .option("--jobs <n>", "submissions graded at once, after gold's calibration (default: 2, or 1 on a 1-core machine)", positiveInt("--jobs"));
  addGraderOptions(cmd).action(async (opts: GraderCliOptions & { task?: string[]; full?: boolean; jobs?: number }) => {
    const { demoExpectationFailures, demoJson, runDemo } = await import("../grader/check/demo-matrix.js");
    const { DEMO_LEGEND, DEMO_WIDTH, demoTable, wrapText } = await import("../grader/check/demo-table.js");
    const tasksRoot = opts.tasksDir ?? bundledTasksDir();
    const started = Date.now();
    const progress = progressOnStderr("demo");
    let report: Awaited<ReturnType<typeof runDemo>>;
    try {
      report = await runDemo({
        tasksRoot,
        outDir: resolve(opts.out),
        calibrationDir: resolve(opts.calibrationDir),
        sandboxFactory: graderSandboxFactoryFromFlags(opts, [tasksRoot, opts.out, opts.calibrationDir]),
        taskIds: opts.task,
        scope: opts.full ? "full" : "quick",
        jobs: opts.jobs ?? Math.min(2, availableParallelism()),
        skipRunnableCheck: opts.skipRunnableCheck,
        python: opts.python,
        sandbox: opts.sandbox,
        checkTask: (task) => requireDockerImage("demo", task, opts),
        onPlan: (plans) =>
          progress.line(
            `${opts.full ? "full matrix" : "quick demo"}: ${plans.map((p) => `${p.task.id} at world size(s) ${p.worldSizes.join(", ")}, ${p.submissions.length} submissions`).join("; ")}${opts.full ? "" : " (the whole matrix: --full)"}`,
          ),
        onProgress: progress.progress,
      });
    } finally {
      progress.done();
    }
    const failures = demoExpectationFailures(report);
    const wall = Date.now() - started;
    if (opts.json) {
      process.stdout.write(`${JSON.stringify(demoJson(report), null, 2)}\n`);
    } else {
      const wrap = (text: string, indent = "") => wrapText(text, DEMO_WIDTH, indent);
      const lines = [
        demoTable(report),
        "",
        ...wrap(DEMO_LEGEND),
        ...(failures.length
          ? ["EXPECTATIONS NOT MET:", ...failures.flatMap((f) => wrap(`- ${f}`, "  ").map((l, i) => (i ? `  ${l}` : l)))]
          : wrap("expectations met: golden resolved in A and B; every adversarial patch resolved in A, not in B; hollow and empty not resolved; the base not resolved in B; empty scores 0.")),
        `results under ${resolve(opts.out)} (${clock(wall)})`,
        ...(opts.full ? [] : wrap(fullMatrixHint(report, wall))),
      ];
      process.stdout.write(`${lines.join("\n")}\n`);
    }
    if (failures.length) process.exitCode = 1;
  });
}

/**
 * The closing line of a quick demo: what it left out and how to run it, with the full matrix's time
 * estimated from this run's pace per launcher session when this run took nothing from a cache.
 */
export function fullMatrixHint(report: { plans?: Array<{ task: string; world_sizes: number[]; adversarial: number; adversarial_of: number }>; sessions?: { planned: number; full: number }; fresh?: boolean }, wallMs: number): string {
  const what = (report.plans ?? []).map((p) => `${p.task} at world size ${p.world_sizes.join(", ")} with ${p.adversarial} of its ${p.adversarial_of} adversarial patches`).join("; ");
  const s = report.sessions;
  const pace = s && report.fresh && s.planned > 0 ? wallMs / s.planned : null;
  const estimate = s && pace !== null ? `, ${s.full} sessions against this run's ${s.planned}: about ${Math.round((pace * s.full) / 60_000)} min at this run's pace (ranks of larger world sizes cost more)` : s ? ` (${s.full} launcher sessions against this run's ${s.planned})` : "";
  return `This was the quick demo (${what}). The whole matrix — every task runnable here, at every world size it is graded at, every adversarial patch — is one flag away: npm run demo -- --full${estimate}.`;
}
