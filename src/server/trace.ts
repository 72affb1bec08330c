import { appendFileSync } from "node:fs";
import type { TraceSink } from "../tools/support/deps.js";

/** One string's cap in a trace line (a tool's result is capped below it by the tool wrapper, head + tail). */
const MAX_ARG_CHARS = 4000;

/** Long arguments (a heredoc in run_shell) are cut in the trace; the trace is for reading, not replay. */
function shrink(value: unknown): unknown {
  if (typeof value === "string") return value.length > MAX_ARG_CHARS ? `${value.slice(0, MAX_ARG_CHARS)}[... ${value.length - MAX_ARG_CHARS} chars]` : value;
  if (Array.isArray(value)) return value.map(shrink);
  if (value && typeof value === "object") return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, shrink(v)]));
  return value;
}

/**
 * Appends one JSON line per record to runs/<run-id>/trace.jsonl, synchronously: a line is on disk
 * when the tool's result leaves, so a SIGKILL loses at most the call in flight.
 */
export class JsonlTrace implements TraceSink {
  constructor(readonly path: string) {}

  append(record: Record<string, unknown>): void {
    appendFileSync(this.path, `${JSON.stringify(shrink(record))}\n`);
  }
}
