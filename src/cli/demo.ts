import { join, resolve } from "node:path";
import type { Command } from "commander";
import { bundledTasksDir } from "../lib/paths.js";
import { defaultResultsDir } from "../grader/grade/results-dir.js";
import { addGraderOptions, graderSandboxFactoryFromFlags, progressToStderr, requireDockerImage, type GraderCliOptions } from "./grade.js";

export function registerDemoCommands(program: Command): void {
  const cmd = program
    .command("demo")
    .description(
      "grade, for every bundled task runnable here (or --tasks-dir's: the task author's acceptance check), the golden patch, each adversarial patch, the hollow patch, the pre-PR base as it is and an empty patch; print one table; exit 1 when an expectation fails",
    )
    .option("--out <dir>", "results folder (complete results found there are reused; default <results dir>/demo, outside the package)", join(defaultResultsDir(), "demo"))
    .option("--task <id>", "only this task (repeatable; default: every task; one this machine cannot run is refused, exit 2)", (v: string, prev: string[] = []) => [...prev, v])
    .option("--json", "print an array of { submission, result } on stdout");
  addGraderOptions(cmd).action(async (opts: GraderCliOptions & { task?: string[] }) => {
    const { DEMO_LEGEND, DEMO_WIDTH, demoExpectationFailures, demoJson, demoTable, runDemo, wrapText } = await import("../grader/check/demo-matrix.js");
    const tasksRoot = opts.tasksDir ?? bundledTasksDir();
    const started = Date.now();
    const report = await runDemo({
      tasksRoot,
      outDir: resolve(opts.out),
      calibrationDir: resolve(opts.calibrationDir),
      sandboxFactory: graderSandboxFactoryFromFlags(opts, [tasksRoot, opts.out, opts.calibrationDir]),
      taskIds: opts.task,
      skipRunnableCheck: opts.skipRunnableCheck,
      python: opts.python,
      sandbox: opts.sandbox,
      checkTask: (task) => requireDockerImage("demo", task, opts),
      onProgress: progressToStderr("[demo] "),
    });
    const failures = demoExpectationFailures(report);
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
        `results under ${resolve(opts.out)} (${((Date.now() - started) / 1000).toFixed(0)} s)`,
      ];
      process.stdout.write(`${lines.join("\n")}\n`);
    }
    if (failures.length) process.exitCode = 1;
  });
}
