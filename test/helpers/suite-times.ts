/**
 * The per-suite time table of a test run: what `npm test` (and CI through it) prints at the end, so a
 * suite that got slower shows up in the next run's log (issue 23). Rows are test files, grouped under
 * their vitest project (fast, then slow), the slowest first; read by test/helpers/suite-times-reporter.ts
 * (live runs) and bench/ci_suite_times.ts (saved runs, and old vs new).
 */

export interface SuiteTime {
  /** Repository-relative path of the test file. */
  file: string;
  /** The vitest project (`fast`, `slow`). */
  project: string;
  /** Wall-clock seconds from the file's start to its end (collection, hooks and tests). */
  seconds: number;
  /** When the file started, seconds after the run's start (files run two at a time); absent in older runs. */
  started_s?: number;
  /**
   * CPU seconds the whole machine spent (every process, not only this file's) while the file ran, from
   * the kernel's per-core counters: beside `seconds` × cores it says whether a file is bound by CPU
   * (its grades and ranks) or by waiting (timeouts, daemons, polls). Absent in runs saved before it.
   */
  cpu_s?: number;
  tests: number;
  failed: number;
  skipped: number;
}

export interface SuiteTimes {
  /** When the run ended (ISO). */
  ended_at: string;
  /** The run's wall-clock seconds, start to end. */
  wall_s: number;
  /** Cores of the machine (for `cpu_s`); absent in runs saved before it. */
  cores?: number;
  /** Load average (1 min) at the start and at the end of the run: the machine's business. */
  load: { start: number; end: number };
  suites: SuiteTime[];
}

const fmt = (s: number) => (s >= 60 ? `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, "0")}s` : `${s.toFixed(1)}s`);

/** The table as lines: per project a header with its total, then its files slowest first (pure). */
export function suiteTable(t: Pick<SuiteTimes, "suites" | "wall_s" | "load" | "cores">, opts: { top?: number } = {}): string[] {
  const out: string[] = [];
  // "busy": the machine's CPU seconds over the file's wall × cores (100 % = every core busy throughout).
  const busy = (r: SuiteTime) => (r.cpu_s !== undefined && t.cores && r.seconds > 0 ? `${String(Math.round((100 * r.cpu_s) / (r.seconds * t.cores))).padStart(4)} %` : "     —");
  const projects = [...new Set(t.suites.map((s) => s.project))];
  const width = Math.max(40, ...t.suites.map((s) => s.file.length + 2));
  for (const project of projects) {
    const rows = t.suites.filter((s) => s.project === project).sort((a, b) => b.seconds - a.seconds);
    const total = rows.reduce((n, r) => n + r.seconds, 0);
    out.push(`${`${project} (${rows.length} files)`.padEnd(width)}  ${fmt(total).padStart(7)}    busy  tests  failed`);
    for (const r of rows.slice(0, opts.top ?? rows.length)) {
      out.push(`  ${r.file.padEnd(width - 2)}  ${fmt(r.seconds).padStart(7)}  ${busy(r)}  ${String(r.tests).padStart(5)}  ${r.failed ? String(r.failed).padStart(6) : "     -"}`);
    }
    if (opts.top !== undefined && rows.length > opts.top) out.push(`  … ${rows.length - opts.top} more`);
  }
  out.push(`wall ${fmt(t.wall_s)} (load average ${t.load.start.toFixed(1)} at the start, ${t.load.end.toFixed(1)} at the end)`);
  return out;
}
