/**
 * Progress messages of long commands (grade, calibrate, demo, task check), with what each one is
 * worth to a reader: a `tick` is a counter moving (tests done in a session) and belongs only on a
 * live status line; a `step` is worth a line in a log (a session started or ended); a `result` is
 * worth a line even on a terminal that shows a live status line (a submission's verdict). The CLI
 * decides how to show them (cli/progress-line.ts); the grader only says which kind a message is.
 */

export type ProgressKind = "tick" | "step" | "result";

/** A progress callback: `kind` defaults to "step". */
export type Progress = (msg: string, kind?: ProgressKind) => void;

/** `p` with `prefix` before every message, each message keeping its kind. */
export function prefixed(p: Progress | undefined, prefix: string): Progress {
  return (msg, kind) => p?.(`${prefix}${msg}`, kind);
}
