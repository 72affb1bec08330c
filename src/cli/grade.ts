import { existsSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { InvalidArgumentError, Option, type Command } from "commander";
import { UsageError } from "../lib/errors.js";
import { readJsonFile } from "../lib/json.js";
import { bundledTasksDir, defaultCalibrationDir } from "../lib/paths.js";
import type { SandboxKind } from "../sandbox/types.js";
import { defaultResultsDir } from "../grader/grade/results-dir.js";
import type { SandboxFactory } from "../grader/grade/pipeline.js";
import { reasonOnce } from "../grader/grade/score.js";
import type { GradeResult } from "../grader/grade/types.js";
import type { GraderTask } from "../task/hidden/grader-task.js";
import { SKIP_RUNNABLE_FLAG, requireRunnableHere, taskPython } from "../task/public/runnable.js";
import { addDockerOptions, dockerOptionsFromFlags, type DockerFlags } from "./sandbox-options.js";
import { graderSandboxFactory } from "../grader/grade/sandbox-factory.js";
import { ProgressLine } from "./progress-line.js";

// The grader, the sandboxes (dockerode) and the task loader are imported inside the action
// handlers: `infradev --help` or `tasks list` does not load them.

/** Options every grader command shares. */
export interface GraderCliOptions extends DockerFlags {
  out: string;
  sandbox: SandboxKind;
  calibrationDir: string;
  tasksDir?: string;
  /** Accepted for older scripts; does nothing (the suites always run in separate sessions). */
  separateSuites?: boolean;
  /** The tests' interpreter (tasks/runnable.ts taskPython: --python, else $INFRADEV_PYTHON, else env.python). */
  python?: string;
  /** Run a task this machine cannot run (SKIP_RUNNABLE_FLAG). */
  skipRunnableCheck?: boolean;
  json?: boolean;
}


export function sandboxOption(): Option {
  return new Option("--sandbox <kind>", "sandbox for the grading runs (none = plain processes, nothing isolated; for debugging)")
    .choices(["local", "docker", "none"])
    .default("local");
}

export function addGraderOptions(cmd: Command): Command {
  return addDockerOptions(cmd.addOption(sandboxOption()))
    .option("--python <path>", "Python interpreter the tests run with, inside the sandbox (docker: inside the image); default $INFRADEV_PYTHON, else the task's env.python")
    .option("--calibration-dir <dir>", "cache of gold calibrations (default from $INFRADEV_CALIBRATION_DIR, else ~/.cache/infradev/calibration)", defaultCalibrationDir())
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .option(SKIP_RUNNABLE_FLAG, "experts: run a task this machine cannot run (e.g. requires_gpu without a GPU) instead of refusing it; gold's calibration and the scores then describe this machine, not the task")
    .option("--separate-suites", "no effect, kept so older scripts still run: the official tests and the probes always run in separate launcher sessions, each from the same fresh state");
}

/**
 * What every grader command checks before anything runs or is cached (exit 2 on failure): the task
 * can run here (requireRunnableHere; the override warns), and --sandbox docker has an image.
 */
export function checkGraderRun(command: string, task: Pick<GraderTask, "id" | "spec">, opts: Pick<GraderCliOptions, "sandbox" | "image" | "python" | "skipRunnableCheck">): void {
  requireRunnableHere(task, { command, skipCheck: opts.skipRunnableCheck, python: taskPython(task.spec, opts.python).python, sandbox: opts.sandbox });
  requireDockerImage(command, task, opts);
}

/** --sandbox docker without --image for a task with no `image:` fails here, before any patch is applied. */
export function requireDockerImage(command: string, task: Pick<GraderTask, "id" | "spec">, opts: Pick<GraderCliOptions, "sandbox" | "image">): void {
  if (opts.sandbox === "docker" && !opts.image && !task.spec.image) {
    throw new UsageError(`${command}: --sandbox docker needs an image and task ${task.id} names none: pass --image <image> (on the engine already: docker pull <image>) or set \`image:\` in its task.yaml`);
  }
}

/** The grader's factory from the parsed CLI options (backend + docker flags + --python). */
export function graderSandboxFactoryFromFlags(opts: GraderCliOptions, hiddenPaths: string[]): SandboxFactory {
  return graderSandboxFactory(opts.sandbox, hiddenPaths, dockerOptionsFromFlags(opts), { python: opts.python });
}

/** Progress on stderr: a live status line on a terminal, plain lines in a log (progress-line.ts); `done()` before printing output. */
export function progressOnStderr(label: string): ProgressLine {
  return new ProgressLine(process.stderr, { label });
}

function yesNo(b: boolean | null): string {
  return b === null ? "n/a" : b ? "yes" : "no";
}

/** The human summary of one result. */
/** What the grader undid before testing, from meta.json (absent when nothing was applied). */
export interface RevertSummary {
  reverted_test_edits?: string[];
  reverted_test_config?: Array<{ path: string; action: string }>;
  tamper_findings?: Array<{ file: string; line: number; what: string; text: string }>;
}

export function formatResult(r: GradeResult, resultPath: string, reverts: RevertSummary = {}): string {
  const set = (name: string, s: GradeResult["official"]) =>
    `${name.padEnd(22)} ${s.passed ?? "-"}/${s.n_cases} passed   s_p ${s.score === null ? "n/a" : s.score.toFixed(3)}   resolved ${yesNo(s.resolved)}   strict ${yesNo(s.resolved_strict)}`;
  const lines = [
    `${r.task_id}: ${r.status}${r.apply_method ? ` (applied with ${r.apply_method})` : ""}${r.reason ? ` — ${reasonOnce(r)}` : ""}`,
    ...(r.world_sizes ? [`world sizes graded: ${r.world_sizes.join(", ")}`] : []),
    ...(r.partial ? [`stopped early after ${r.partial.stopped_after}; skipped: ${r.partial.skipped.join(", ")}`] : []),
    set(r.pass_to_pass ? "Set A (official + p2p)" : "Set A (official)", r.official),
    set("Set B (with probes)", r.with_probes),
    ...(r.pass_to_pass ? [set("  of which pass-to-pass", r.pass_to_pass)] : []),
  ];
  const evidence = r.tamper_evidence ?? [];
  if (evidence.length) {
    lines.push(`TAMPERED — scored 0; evidence (${evidence.length}):`);
    for (const e of evidence.slice(0, 20)) lines.push(`  - ${e}`);
    if (evidence.length > 20) lines.push(`  … ${evidence.length - 20} more in result.json`);
  }
  const edits = reverts.reverted_test_edits ?? [];
  const config = reverts.reverted_test_config ?? [];
  if (edits.length || config.length) {
    lines.push(
      `undone before testing: ${edits.length} edit(s) under the test dirs, ${config.length} pytest-affecting file(s)` +
        (config.length ? ` (${config.map((c) => `${c.action} ${c.path}`).join(", ")})` : ""),
    );
  }
  const tamper = reverts.tamper_findings ?? [];
  if (tamper.length) {
    lines.push(`flagged for review (not scored): ${tamper.length} added line(s) reach for the grading harness`);
    for (const t of tamper.slice(0, 10)) lines.push(`  ${t.file}:${t.line}  ${t.what}: ${t.text}`);
    if (tamper.length > 10) lines.push(`  … ${tamper.length - 10} more in meta.json`);
  }
  const failing = r.cases.filter((c) => c.label);
  if (failing.length) {
    lines.push("cases gold passes and this submission does not:");
    for (const c of failing) lines.push(`  ${c.label!.padEnd(26)} ${c.outcome.padEnd(7)} ${c.id}`);
  }
  lines.push(`result: ${resultPath}`);
  return lines.join("\n");
}

/** `--ranks N`: grade (or calibrate) at world size N only, instead of the task's world sizes. */
export function parseRanks(v: string): number {
  const n = Number(v);
  if (!/^[0-9]+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < 1 || n > 1024) throw new InvalidArgumentError(`expected a whole number of ranks from 1 to 1024, got "${v}"`);
  return n;
}

export const RANKS_HELP = "grade at this world size only (an integer ≥ 1), instead of the task's world_sizes (default: its ranks); gold is calibrated at it once and cached apart";

function parseOut(v: string): string {
  if (!v.trim()) throw new InvalidArgumentError("expected a folder");
  return v;
}

export function registerGradeCommands(program: Command): void {
  const cmd = program
    .command("grade")
    .description("grade one patch: fresh snapshot, post-PR tests + hidden probes, multi-rank, scored against gold's calibration (Set A and Set B)")
    .requiredOption("--task <id>", "task id (or a path to a task folder)")
    .option("--patch <file>", "the submission (a unified diff against the task's base); omitted = scores 0 as missing_patch; a file that does not exist is an error (exit 2) unless --allow-missing-patch")
    .option("--allow-missing-patch", "batch grading: a --patch file that does not exist scores 0 as missing_patch (results keyed by its path) instead of failing")
    .option("--force", "grade again: ignore a complete earlier result of this submission and its session files (gold's cached calibration is kept; calibrate --force re-runs it)")
    .option("--out <dir>", `results folder: <out>/<task_id>/<submission-hash>/result.json (default from $INFRADEV_RESULTS_DIR, else $XDG_STATE_HOME/infradev/results or ~/.local/state/infradev/results; never inside the package)`, parseOut, defaultResultsDir())
    .option("--ranks <n>", RANKS_HELP, parseRanks)
    .option("--json", "print the result as one JSON object on stdout")
    .option("--junit <file>", "also write the grade as JUnit XML (one testcase per graded case, one testsuite per suite: official, probe) for CI test reports", (v: string) => {
      if (!v.trim()) throw new InvalidArgumentError("expected a file path");
      return v;
    });
  addGraderOptions(cmd).action(async (opts: GraderCliOptions & { task: string; patch?: string; allowMissingPatch?: boolean; force?: boolean; ranks?: number; junit?: string }) => {
    const [{ loadGraderTask }, { gradeSubmission }] = await Promise.all([import("../task/hidden/grader-task.js"), import("../grader/grade/grade.js")]);
    const task = loadGraderTask(opts.task, opts.tasksDir);
    const patchFile = opts.patch ? resolve(opts.patch) : null;
    if (patchFile !== null && !opts.allowMissingPatch && !(existsSync(patchFile) && statSync(patchFile).isFile())) {
      throw new UsageError(`grade: --patch ${opts.patch}: ${existsSync(patchFile) ? "not a regular file" : "no such file"} (${patchFile}); omit --patch, or add --allow-missing-patch, to score a submission that produced nothing as missing_patch`);
    }
    checkGraderRun("grade", task, opts);
    const progress = progressOnStderr(`grade ${task.id}`);
    const out = await gradeSubmission({
      task,
      patchFile,
      outDir: resolve(opts.out),
      calibrationDir: resolve(opts.calibrationDir),
      sandboxFactory: graderSandboxFactoryFromFlags(opts, [opts.tasksDir ?? bundledTasksDir(), opts.out, opts.calibrationDir]),
      force: opts.force,
      ...(opts.ranks !== undefined ? { worldSizes: [opts.ranks] } : {}),
      onProgress: progress.progress,
    }).finally(() => progress.done());
    const resultPath = resolve(out.artifactDir, "result.json");
    if (opts.junit) (await import("../grader/grade/junit-report.js")).writeJunitReport(resolve(opts.junit), out.result, out.artifactDir);
    process.stdout.write(opts.json ? `${JSON.stringify(out.result, null, 2)}\n` : `${formatResult(out.result, resultPath, readJsonFile<RevertSummary>(resolve(out.artifactDir, "meta.json")) ?? {})}\n`);
    // A harness fault is not a verdict on the submission: a distinct exit code lets scripts retry.
    if (out.result.status === "harness_fault") process.exitCode = 3;
  });
}
