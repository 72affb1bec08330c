import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { UsageError } from "../../lib/errors.js";
import { bundledTasksDir } from "../../lib/paths.js";
import { listTaskIds } from "../../task/public/loader.js";
import { loadGraderTask, type GraderTask } from "../../task/hidden/grader-task.js";
import { requireRunnableHere, taskPython, taskRunnableHere } from "../../task/public/runnable.js";
import { calibrate } from "../grade/calibrate.js";
import { taskContentHash } from "../../lib/files.js";
import { hardwareFingerprint } from "../workspace/fingerprint.js";
import { gradeSubmission } from "../grade/grade.js";
import type { SandboxFactory } from "../grade/pipeline.js";
import { reasonOnce } from "../grade/score.js";
import { acceptanceProblems, failingCases } from "./acceptance-rules.js";
import type { Calibration, FailureLabel, GradeResult } from "../grade/types.js";

/**
 * `demo`: for every bundled task this machine can run, grade the golden patch, every adversarial
 * patch, the hollow patch, the pre-PR base as it is and an empty patch — one calibration per task,
 * shared by all of them. It is also the task author's acceptance check (`--tasks-dir`, `--task`).
 */

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
   * Only these task ids (default: every task of tasksRoot); an unknown id is an error, and so is one
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
  onProgress?: (msg: string) => void;
}

function promisesOf(cal: Calibration): Record<string, string> {
  return Object.fromEntries(cal.cases.filter((c) => c.probe).map((c) => [c.id, c.probe!.promise]));
}

export async function runDemo(opts: RunDemoOptions): Promise<DemoReport> {
  const tasksRoot = opts.tasksRoot ?? bundledTasksDir();
  const say = (msg: string) => opts.onProgress?.(msg);
  const rows: DemoRow[] = [];
  const notRunnable: DemoReport["notRunnable"] = [];
  const known = listTaskIds(tasksRoot);
  const unknown = (opts.taskIds ?? []).filter((t) => !known.includes(t));
  if (unknown.length) throw new UsageError(`demo: unknown task ${unknown.map((t) => JSON.stringify(t)).join(", ")} in ${tasksRoot} (known: ${known.join(", ")})`);
  // Every check before anything is calibrated or graded.
  const selected: GraderTask[] = [];
  for (const id of opts.taskIds ?? known) {
    const task = loadGraderTask(id, tasksRoot);
    const probe = { ...(opts.hasGpu === undefined ? {} : { hasGpu: opts.hasGpu }), python: taskPython(task.spec, opts.python).python, sandbox: opts.sandbox };
    const runnable = taskRunnableHere(task.spec, probe);
    if (!runnable.runnable && !opts.skipRunnableCheck && !opts.taskIds) {
      notRunnable.push({ task: id, reason: runnable.reason ?? "not runnable here" });
      say(`${id}: not runnable here: ${runnable.reason}`);
      continue;
    }
    // Asked for by name: refused (exit 2), or run anyway with a loud warning.
    requireRunnableHere(task, { ...probe, command: "demo", skipCheck: opts.skipRunnableCheck });
    opts.checkTask?.(task);
    selected.push(task);
  }
  mkdirSync(opts.outDir, { recursive: true });
  const emptyPatch = join(opts.outDir, "empty.patch");
  writeFileSync(emptyPatch, "");
  for (const task of selected) {
    const id = task.id;
    // Per task: the sandbox (image, interpreter, environment) may differ between tasks.
    const fingerprint = await hardwareFingerprint(task, opts.sandboxFactory);
    const taskHash = taskContentHash(task.taskDir);
    const handle = await calibrate({
      task,
      cacheDir: opts.calibrationDir,
      sandboxFactory: opts.sandboxFactory,
      fingerprint,
      taskHash,
     
      onProgress: say,
    });
    say(`${id}: gold calibration ${handle.cached ? "cached" : "done"}: ${handle.calibration.cases.length} cases, ${handle.calibration.flaky.length} flaky (${handle.file})`);
    const subs = demoSubmissions(task, emptyPatch);
    for (const [i, sub] of subs.entries()) {
      const tag = `[${id} ${i + 1}/${subs.length}] ${sub.name}`;
      const out = await gradeSubmission({
        task,
        patchFile: sub.patchFile,
        baseAsIs: sub.kind === "base",
        outDir: opts.outDir,
        sandboxFactory: opts.sandboxFactory,
        calibration: handle.calibration,
        fingerprint,
        taskHash,
       
        onProgress: (m) => say(`${tag}: ${m}`),
      });
      say(`${tag}: ${out.result.status}, Set A ${yesNo(out.result.official.resolved)}, Set B ${yesNo(out.result.with_probes.resolved)}`);
      rows.push({ ...sub, result: out.result, promises: promisesOf(handle.calibration) });
    }
  }
  return { rows, notRunnable };
}

function yesNo(b: boolean | null): string {
  return b === null ? "n/a" : b ? "yes" : "no";
}

/** Labels of one result, counted, most frequent first: `numerical×3, state×1`. */
export function labelSummary(result: GradeResult): string {
  const counts = new Map<FailureLabel, number>();
  for (const c of result.cases) if (c.label) counts.set(c.label, (counts.get(c.label) ?? 0) + 1);
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([label, n]) => `${label}×${n}`)
    .join(", ");
}

/** Per promise an adversarial patch declares to break: the labels of the failing probes of that promise. */
export function caughtBy(row: Pick<DemoRow, "breaks" | "result" | "promises">): Array<{ promise: string; labels: FailureLabel[] }> {
  return (row.breaks ?? []).map((promise) => ({
    promise,
    labels: [...new Set(row.result.cases.filter((c) => c.label && c.suite === "probe" && row.promises[c.id] === promise).map((c) => c.label!))].sort(),
  }));
}

function resolvedCell(s: { resolved: boolean | null; resolved_strict: boolean | null }): string {
  if (s.resolved === null) return "n/a";
  return s.resolved === s.resolved_strict ? yesNo(s.resolved) : `${yesNo(s.resolved)} (strict ${yesNo(s.resolved_strict)})`;
}

function pct(x: number | null): string {
  return x === null ? "n/a" : x.toFixed(3);
}

export const DEMO_HEADER = ["submission", "Set A resolved", "Set B resolved", "s_p A", "s_p B", "failure labels (cases gold passes)", "declared promise → caught by"];

/** The demo table's rows (pure; the CLI aligns them). */
export function demoTableRows(report: DemoReport): string[][] {
  const rows = report.rows.map((r) => {
    const res = r.result;
    const labels =
      res.status === "graded"
        ? labelSummary(res) || "—"
        : res.status === "tampered"
          ? `— (TAMPERED: ${(res.tamper_evidence ?? []).slice(0, 2).join("; ")}${(res.tamper_evidence ?? []).length > 2 ? "; …" : ""})`
          : `— (${res.status}${res.reason ? `: ${reasonOnce(res)}` : ""})`;
    const caught = caughtBy(r)
      .map((c) => `${c.promise} → ${c.labels.length ? c.labels.join(", ") : "NOT caught"}`)
      .join("; ");
    return [`${r.task}:${r.name}`, resolvedCell(res.official), resolvedCell(res.with_probes), pct(res.official.score), pct(res.with_probes.score), labels, caught];
  });
  for (const n of report.notRunnable) rows.push([`${n.task} (every submission)`, "—", "—", "—", "—", `not run here: ${n.reason}`, ""]);
  return rows;
}

/** The demo table's width: every line of demoTable fits it. */
export const DEMO_WIDTH = 100;

export const DEMO_LEGEND =
  "Set A = official post-PR tests; Set B = official tests + hidden probes. resolved = paper rule (passed ≥ gold's); " +
  "(strict …) shown where the strict rule differs. labels: failure labels of the cases gold passes and this submission " +
  "does not (or why nothing was scored); caught: per promise an adversarial patch declares to break, the labels of its failing probes.";

/** `text` cut at spaces into lines of at most `width` (a word longer than that is cut), each after `indent`. */
export function wrapText(text: string, width: number, indent: string): string[] {
  const room = Math.max(10, width - indent.length);
  const out: string[] = [];
  let line = "";
  for (const word of text.split(/ +/)) {
    let w = word;
    while (w.length > room) {
      if (line) out.push(line);
      line = "";
      out.push(w.slice(0, room));
      w = w.slice(room);
    }
    if (!line) {
      line = w;
    } else if (line.length + 1 + w.length <= room) {
      line += ` ${w}`;
    } else {
      out.push(line);
      line = w;
    }
  }
  if (line) out.push(line);
  return out.map((l) => `${indent}${l}`);
}

/**
 * The demo table in DEMO_WIDTH columns: one row per submission with its Set A / Set B verdicts and
 * scores, then its failure labels and the promises it was caught by on indented lines below (wrapped,
 * nothing cut). A submission name too long for its column stands alone on its line, the figures below.
 */
export function demoTable(report: DemoReport, width = DEMO_WIDTH): string {
  const header = ["submission", "Set A", "Set B", "s_p A", "s_p B"];
  const rows = demoTableRows(report);
  const widths = [1, 2, 3, 4].map((i) => Math.max(header[i]!.length, ...rows.map((r) => r[i]!.length)));
  const rest = widths.reduce((a, b) => a + b + 2, 0);
  const nameWidth = Math.max(header[0]!.length, Math.min(width - rest, Math.max(...rows.map((r) => r[0]!.length), 0)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(i === 0 ? nameWidth : widths[i - 1]!)).join("  ").trimEnd();
  const out = [line(header), line([nameWidth, ...widths].map((w) => "-".repeat(w)))];
  for (const r of rows) {
    const [name, ...figures] = r.slice(0, 5) as [string, ...string[]];
    if (name.length > nameWidth) out.push(...wrapText(name, width, ""), line(["", ...figures]));
    else out.push(line([name, ...figures]));
    if (r[5] && r[5] !== "—") out.push(...wrapText(r[5].startsWith("not run here") ? r[5] : `labels: ${r[5]}`, width, "    "));
    if (r[6]) out.push(...wrapText(`caught: ${r[6]}`, width, "    "));
  }
  return out.join("\n");
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
