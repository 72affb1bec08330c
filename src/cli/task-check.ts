import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { UsageError } from "../lib/errors.js";
import { bundledTasksDir } from "../lib/paths.js";
import { defaultResultsDir } from "../grader/grade/results-dir.js";
import { addGraderOptions, checkGraderRun, graderSandboxFactoryFromFlags, progressOnStderr, type GraderCliOptions } from "./grade.js";

// The grader and the analysis helpers are imported inside the actions: `tasks list` stays light.

export function positiveInt(name: string) {
  return (v: string): number => {
    if (!/^\d+$/.test(v) || Number(v) < 1) throw new UsageError(`${name}: expected an integer ≥ 1, got "${v}"`);
    return Number(v);
  };
}

function nonNegativeInt(name: string) {
  return (v: string): number => {
    if (!/^\d+$/.test(v)) throw new UsageError(`${name}: expected an integer ≥ 0, got "${v}"`);
    return Number(v);
  };
}

function score(v: string): number {
  const n = Number(v);
  if (!/^\d*\.?\d+$/.test(v) || n < 0 || n > 1) throw new UsageError(`--min-mutation-score: expected a number in [0, 1], got "${v}"`);
  return n;
}

function minutes(v: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new UsageError(`--time-limit: expected minutes > 0, got "${v}"`);
  return n;
}

interface CheckCliOptions extends GraderCliOptions {
  json?: boolean;
  html?: string;
  out: string;
  /** A number from --mutants N; false from --no-mutants. */
  mutants?: number | false;
  seed: number;
  timeLimit?: number;
  jobs?: number;
  fullGrades?: boolean;
  minMutationScore?: number;
  hostPython?: string;
  static?: boolean;
}

export function registerTaskCheckCommands(tasks: Command): void {
  const cmd = tasks
    .command("check <id>")
    .description(
      "the task author's acceptance check: promises covered by marked probes, gold 3× with no skipped probe, base / empty / hollow rejected, every adversarial patch passing the official tests and caught by a probe of each promise it breaks, every alternative-correct patch accepted (a probe failing one is over-strict), mutants of the golden patch killed (mutation score), interface contract named in prompt.md, author traps; exit 1 when it fails",
    )
    .option("--out <dir>", "the check's folder: grades, mutants (reused by the next check), report.json (default <results dir>/check/<task>)")
    .option("--json", "print the report as JSON on stdout")
    .option("--html <file>", "also write the report as one HTML page")
    .option("--mutants <n>", "grade at most n mutants: a seeded sample (default: all)", nonNegativeInt("--mutants"))
    .option("--no-mutants", "skip the mutants (the rest of the check only)")
    .option("--static", "the static half only (seconds; no sandbox, no GPU): promises and probe markers, author traps and placeholders, interface contract, prompt leaks, collective timeouts, the generated hollow; exit 1 on an error")
    .option("--seed <n>", "seed of the mutant sample", nonNegativeInt("--seed"), 0)
    .option("--time-limit <minutes>", "stop starting mutants after this long (those left are reported not run; graded ones are reused next time)", minutes)
    .option("--jobs <n>", "grades at once (default: half the cores, at least 1; a GPU task: 1)", positiveInt("--jobs"))
    .option("--full-grades", "grade the base, hollow and adversarial controls in full (default: each stops once its verdict is decided; their rows then name the sessions not run)")
    .option("--min-mutation-score <x>", "the threshold (default 0.9)", score)
    .option("--host-python <path>", "Python for the static analysis on this machine (stdlib only; default $INFRADEV_HOST_PYTHON, else python3)");
  addGraderOptions(cmd).action(async (id: string, opts: CheckCliOptions) => {
    const [{ loadGraderTask }, { checkTask }, { checkText, checkHtml }] = await Promise.all([import("../task/hidden/grader-task.js"), import("../grader/check/task-check.js"), import("../grader/check/check-report.js")]);
    const task = loadGraderTask(id, opts.tasksDir);
    const out = resolve(opts.out ?? join(defaultResultsDir(), "check", task.id));
    if (opts.static) {
      // Nothing runs the task's tests: no runnable check, no sandbox.
      const { checkTaskStatic } = await import("../grader/check/task-check.js");
      const progress = progressOnStderr(`check ${task.id}`);
      const report = await checkTaskStatic({ task, outDir: out, sandboxFactory: () => Promise.reject(new Error("task check --static grades nothing")), hostPython: opts.hostPython, onProgress: progress.progress }).finally(() => progress.done());
      process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : `${checkText(report)}\nreport: ${join(out, "report.json")} (static half only)\n`);
      if (!report.passed) process.exitCode = 1;
      return;
    }
    checkGraderRun("tasks check", task, opts);
    // commander: --no-mutants sets mutants=false; --mutants N sets a number.
    const runMutants = opts.mutants !== false;
    const progress = progressOnStderr(`check ${task.id}`);
    const report = await checkTask({
      task,
      outDir: out,
      calibrationDir: resolve(opts.calibrationDir),
      sandboxFactory: graderSandboxFactoryFromFlags(opts, [opts.tasksDir ?? bundledTasksDir(), out, opts.calibrationDir]),
      hostPython: opts.hostPython,
      runMutants,
      mutants: typeof opts.mutants === "number" ? opts.mutants : null,
      seed: opts.seed,
      timeLimitSec: opts.timeLimit ? opts.timeLimit * 60 : undefined,
      jobs: opts.jobs,
      ...(opts.fullGrades ? { fullGrades: true } : {}),
      minMutationScore: opts.minMutationScore,
      onProgress: progress.progress,
    }).finally(() => progress.done());
    if (opts.html) writeFileSync(resolve(opts.html), checkHtml(report));
    process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : `${checkText(report)}\nreport: ${join(out, "report.json")}${opts.html ? `, ${resolve(opts.html)}` : ""}\n`);
    if (!report.passed) process.exitCode = 1;
  });

  tasks
    .command("hollow <id>")
    .description("print a hollow patch generated from the golden patch: every function it adds raises NotImplementedError, every function it changes is the pre-PR one (save it as hidden/hollow.patch)")
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .option("--host-python <path>", "Python for the analysis (stdlib only; default $INFRADEV_HOST_PYTHON, else python3)")
    .action(async (id: string, opts: { tasksDir?: string; hostPython?: string }) => {
      const [{ loadGraderTask }, { generateHollow }, { mkdtempSync, rmSync }, { tmpdir }] = await Promise.all([import("../task/hidden/grader-task.js"), import("../grader/check/mutants.js"), import("node:fs"), import("node:os")]);
      const task = loadGraderTask(id, opts.tasksDir);
      const work = mkdtempSync(join(tmpdir(), "infradev-hollow-"));
      try {
        const h = await generateHollow(task, { python: opts.hostPython, workDir: work });
        process.stdout.write(h.patch);
        process.stderr.write(`infradev: tasks hollow: ${h.stubbed.length} function(s) stubbed${h.stubbed.length ? `: ${h.stubbed.join(", ")}` : ""}\n`);
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    });
}
