import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { UsageError } from "../../lib/errors.js";
import { bundledTasksDir } from "../../lib/paths.js";
import { prefixed, type Progress } from "../../lib/progress.js";
import { listTaskIds } from "../../task/public/loader.js";
import { loadGraderTask, type GraderTask } from "../../task/hidden/grader-task.js";
import { requireRunnableHere, taskPython, taskRunnableHere } from "../../task/public/runnable.js";
import { CALIBRATION_RUNS, calibrate } from "../grade/calibrate.js";
import { taskContentHash } from "../../lib/files.js";
import { hardwareFingerprint } from "../workspace/fingerprint.js";
import { gradeSubmission } from "../grade/grade.js";
import type { SandboxFactory } from "../grade/pipeline.js";
import { gradedWorldSizes } from "../grade/sessions.js";
import { acceptanceProblems, failingCases } from "./acceptance-rules.js";
import { pool } from "./task-check.js";
import type { Calibration, GradeResult } from "../grade/types.js";

/**
 * `demo`: the project's point in one command — patches that pass every official test and are still
 * wrong, and the probe that says why. Two scopes:
 *
 * - quick (the default, the README's first command): one task (QUICK_DEMO_TASK unless --task), at
 *   one world size (the task's `ranks`), grading the golden patch, the first QUICK_ADVERSARIAL
 *   adversarial patches, the hollow patch, the pre-PR base as it is and an empty patch. Minutes on
 *   a 2-core machine, calibration included.
 * - full (`--full`): every task this machine can run, at every world size it is graded at, with
 *   every adversarial patch; tasks it cannot run are listed as such.
 *
 * Either way one calibration per task (gold run CALIBRATION_RUNS times at the same world sizes),
 * shared by all its submissions, and the same acceptance rules as `task check`; it is also the task
 * author's acceptance check (`--tasks-dir`, `--task`, `--full`).
 */

/** The bundled task the quick demo grades when no --task is given (its suites are the quickest of the CPU tasks). */
export const QUICK_DEMO_TASK = "weight-sync-delta";
/** How many adversarial patches the quick demo grades per task: the first ones of hidden/adversarial/index.yaml. */
export const QUICK_ADVERSARIAL = 2;

export type DemoScope = "quick" | "full";

export type SubmissionKind = "golden" | "adversarial" | "hollow" | "base" | "empty";

export interface DemoSubmission {
  task: string;
  kind: SubmissionKind;
  /** `golden`, `adversarial/<name>`, `hollow`, `base`, `empty`. */
  name: string;
  patchFile: string | null;
  /** Promises an adversarial patch is declared to break (hidden/adversarial/index.yaml). */
  breaks?: string[];
}

export interface DemoEntry {
  /** `<task>:<name>` */
  submission: string;
  result: GradeResult | null;
  /** Set when the task cannot run here (the reason) — listed, never silently skipped. */
  not_runnable?: string;
}

export interface DemoRow extends DemoSubmission {
  result: GradeResult;
  /** Probe promise per case id, from gold's calibration (for the labels column). */
  promises: Record<string, string>;
}

export interface DemoReport {
  rows: DemoRow[];
  notRunnable: Array<{ task: string; reason: string }>;
  /** What was graded: per task, the world sizes and how many of its adversarial patches. */
  plans?: Array<{ task: string; world_sizes: number[]; adversarial: number; adversarial_of: number }>;
  /** Launcher sessions this run planned (plannedSessions), and the full matrix's of the tasks runnable here. */
  sessions?: { planned: number; full: number };
  /** Nothing was taken from a cache (no calibration, no result): the wall time is a fresh run's. */
  fresh?: boolean;
}

export function demoSubmissions(task: GraderTask, emptyPatch: string): DemoSubmission[] {
  return [
    { task: task.id, kind: "golden", name: "golden", patchFile: task.hidden.goldenPatch },
    ...task.hidden.adversarial.map((a) => ({ task: task.id, kind: "adversarial" as const, name: `adversarial/${a.name}`, patchFile: a.patchPath, breaks: a.breaks })),
    ...(task.hidden.hollowPatch ? [{ task: task.id, kind: "hollow" as const, name: "hollow", patchFile: task.hidden.hollowPatch }] : []),
    // The suites really run on the base (an empty patch is scored 0 without running anything).
    { task: task.id, kind: "base", name: "base", patchFile: null },
    { task: task.id, kind: "empty", name: "empty", patchFile: emptyPatch },
  ];
}

export interface RunDemoOptions {
  tasksRoot?: string;
  outDir: string;
  calibrationDir?: string;
  sandboxFactory: SandboxFactory;
  /** Test hook: whether the machine has a GPU (default: /dev/nvidia*). */
  hasGpu?: boolean;
  /**
   * Only these task ids (default: defaultDemoTasks); an unknown id is an error, and so is one
   * this machine cannot run (NotRunnableError) unless skipRunnableCheck. Without taskIds, a task
   * that cannot run here is listed as such and skipped.
   */
  taskIds?: string[];
  /** Run tasks this machine cannot run (loud warning; --skip-runnable-check). */
  skipRunnableCheck?: boolean;
  /** The tests' interpreter and the backend, for the runnable check (tasks/runnable.ts). */
  python?: string;
  sandbox?: string;
  /** Checks of the caller's (the CLI's: docker needs an image), run on every task before anything runs. */
  checkTask?: (task: GraderTask) => void;
  /** quick (default for the CLI) or full (the default here: the acceptance check's whole matrix). */
  scope?: DemoScope;
  /** Told what will be graded, once every check has passed and before anything runs. */
  onPlan?: (plans: readonly DemoPlan[]) => void;
  onProgress?: Progress;
  /**
   * Submissions of a task graded at once (default 1). Each grade is another submission's, in its own
   * workspace and sandbox; gold's calibration comes first and alone. Rows keep the plan's order.
   */
  jobs?: number;
}

function promisesOf(cal: Calibration): Record<string, string> {
  return Object.fromEntries(cal.cases.filter((c) => c.probe).map((c) => [c.id, c.probe!.promise]));
}

/** What the demo grades of one task: at which world sizes, which submissions. */
export interface DemoPlan {
  task: GraderTask;
  worldSizes: number[];
  submissions: DemoSubmission[];
}

/** One task's plan in a scope (pure): quick keeps golden, the first QUICK_ADVERSARIAL adversarial patches, hollow, base and empty, at the task's `ranks`. */
export function demoPlan(task: GraderTask, scope: DemoScope, emptyPatch: string): DemoPlan {
  const all = demoSubmissions(task, emptyPatch);
  if (scope === "full") return { task, worldSizes: gradedWorldSizes(task.fullSpec), submissions: all };
  const adversarial = all.filter((s) => s.kind === "adversarial").slice(0, QUICK_ADVERSARIAL);
  return { task, worldSizes: [task.fullSpec.ranks], submissions: all.filter((s) => s.kind !== "adversarial" || adversarial.includes(s)) };
}

/**
 * Launcher sessions a run of these plans starts with nothing cached (pure): gold's calibration
 * runs and every submission that runs suites (an empty patch runs none), each at every world size
 * and mode, an official and a probe session each.
 */
export function plannedSessions(plans: readonly DemoPlan[]): number {
  return plans.reduce((sum, p) => {
    const running = p.submissions.filter((s) => s.kind !== "empty").length;
    const perRun = p.worldSizes.length * Object.keys(p.task.fullSpec.modes).length * 2;
    return sum + (CALIBRATION_RUNS + running) * perRun;
  }, 0);
}

/** The tasks a scope grades without --task (pure): full, every one; quick, QUICK_DEMO_TASK when it is runnable here, else the first that is. */
export function defaultDemoTasks(known: readonly string[], runnable: (id: string) => boolean, scope: DemoScope): string[] {
  if (scope === "full") return [...known];
  const first = known.includes(QUICK_DEMO_TASK) && runnable(QUICK_DEMO_TASK) ? QUICK_DEMO_TASK : known.find(runnable);
  return first ? [first] : [];
}

export async function runDemo(opts: RunDemoOptions): Promise<DemoReport> {
  const tasksRoot = opts.tasksRoot ?? bundledTasksDir();
  const scope = opts.scope ?? "full";
  const say: Progress = (msg, kind) => opts.onProgress?.(msg, kind);
  const rows: DemoRow[] = [];
  const notRunnable: DemoReport["notRunnable"] = [];
  const known = listTaskIds(tasksRoot);
  const unknown = (opts.taskIds ?? []).filter((t) => !known.includes(t));
  if (unknown.length) throw new UsageError(`demo: unknown task ${unknown.map((t) => JSON.stringify(t)).join(", ")} in ${tasksRoot} (known: ${known.join(", ")})`);
  const probe = (task: GraderTask) => ({ ...(opts.hasGpu === undefined ? {} : { hasGpu: opts.hasGpu }), python: taskPython(task.spec, opts.python).python, sandbox: opts.sandbox });
  const loaded = new Map<string, GraderTask>();
  const load = (id: string) => loaded.get(id) ?? loaded.set(id, loadGraderTask(id, tasksRoot)).get(id)!;
  const ids = opts.taskIds ?? defaultDemoTasks(known, (id) => opts.skipRunnableCheck === true || taskRunnableHere(load(id).spec, probe(load(id))).runnable, scope);
  const emptyPatch = join(opts.outDir, "empty.patch");
  // Every check before anything is written, calibrated or graded: a refused task leaves no folder.
  const plans: DemoPlan[] = [];
  for (const id of ids) {
    const task = load(id);
    const runnable = taskRunnableHere(task.spec, probe(task));
    if (!runnable.runnable && !opts.skipRunnableCheck && !opts.taskIds) {
      notRunnable.push({ task: id, reason: runnable.reason ?? "not runnable here" });
      say(`${id}: not runnable here: ${runnable.reason}`);
      continue;
    }
    // Asked for by name: refused (exit 2), or run anyway with a loud warning.
    requireRunnableHere(task, { ...probe(task), command: "demo", skipCheck: opts.skipRunnableCheck });
    opts.checkTask?.(task);
    plans.push(demoPlan(task, scope, emptyPatch));
  }
  opts.onPlan?.(plans);
  mkdirSync(opts.outDir, { recursive: true });
  writeFileSync(emptyPatch, "");
  const full = scope === "full" ? plans : fullPlans(known, load, (t) => opts.skipRunnableCheck === true || taskRunnableHere(t.spec, probe(t)).runnable, emptyPatch);
  let fresh = true;
  let started = 0;
  const total = plans.reduce((n, p) => n + p.submissions.length, 0);
  for (const { task, worldSizes, submissions } of plans) {
    const id = task.id;
    // Per task: the sandbox (image, interpreter, environment) may differ between tasks.
    const fingerprint = await hardwareFingerprint(task, opts.sandboxFactory);
    const taskHash = taskContentHash(task.taskDir);
    const handle = await calibrate({ task, cacheDir: opts.calibrationDir, sandboxFactory: opts.sandboxFactory, fingerprint, taskHash, worldSizes, onProgress: say });
    if (handle.cached) fresh = false;
    say(`${id}: gold calibration ${handle.cached ? "cached" : "done"} at world size(s) ${worldSizes.join(", ")}: ${handle.calibration.cases.length} cases, ${handle.calibration.flaky.length} flaky (${handle.file})`, "result");
    const first = started;
    started += submissions.length;
    const graded = await pool(submissions, opts.jobs ?? 1, async (sub, i) => {
      const tag = `[${first + i + 1}/${total}] ${id}:${sub.name}`;
      const t0 = Date.now();
      const out = await gradeSubmission({
        task,
        patchFile: sub.patchFile,
        baseAsIs: sub.kind === "base",
        outDir: opts.outDir,
        sandboxFactory: opts.sandboxFactory,
        calibration: handle.calibration,
        fingerprint,
        taskHash,
        worldSizes,
        // The base and the hollow patch only have to be not resolved: graded until their first
        // failing case gold passes (the table says so), not through every session.
        ...(sub.kind === "base" || sub.kind === "hollow" ? { stopEarly: true } : {}),
        onProgress: prefixed(say, `${tag}: `),
      });
      if (out.reused) fresh = false;
      const took = out.reused ? "reused" : `${((Date.now() - t0) / 1000).toFixed(0)} s`;
      say(`${tag}: ${out.result.status}, Set A ${yesNo(out.result.official.resolved)}, Set B ${yesNo(out.result.with_probes.resolved)} (${took})`, "result");
      return { ...sub, result: out.result, promises: promisesOf(handle.calibration) };
    });
    rows.push(...graded);
  }
  return {
    rows,
    notRunnable,
    plans: plans.map((p) => ({ task: p.task.id, world_sizes: p.worldSizes, adversarial: p.submissions.filter((s) => s.kind === "adversarial").length, adversarial_of: p.task.hidden.adversarial.length })),
    sessions: { planned: plannedSessions(plans), full: plannedSessions(full) },
    fresh,
  };
}

/** The full matrix's plans over every task of the folder this machine can run. */
function fullPlans(known: readonly string[], load: (id: string) => GraderTask, runnable: (t: GraderTask) => boolean, emptyPatch: string): DemoPlan[] {
  return known.map(load).filter(runnable).map((t) => demoPlan(t, "full", emptyPatch));
}

function yesNo(b: boolean | null): string {
  return b === null ? "n/a" : b ? "yes" : "no";
}

/**
 * What the demo must show; each broken expectation is one line. Golden resolved in A and B; every
 * adversarial patch resolved in A and not in B, caught by a probe of a promise it declares to
 * break; hollow and empty not resolved; the base not resolved in B; empty scores exactly 0.
 */
export function demoExpectationFailures(report: DemoReport): string[] {
  const out: string[] = [];
  for (const r of report.rows) {
    const failing = failingCases(r.result, (id) => r.promises[id] ?? null);
    for (const p of acceptanceProblems(r.kind, r.result, failing, r.breaks)) out.push(`${r.task}:${r.name}: ${p}`);
  }
  return out;
}

/** `--json`: one `{ submission, result }` per graded submission, plus tasks that could not run. */
export function demoJson(report: DemoReport): DemoEntry[] {
  return [
    ...report.rows.map((r) => ({ submission: `${r.task}:${r.name}`, result: r.result })),
    ...report.notRunnable.map((n) => ({ submission: n.task, result: null, not_runnable: n.reason })),
  ];
}
