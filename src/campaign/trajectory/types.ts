import type { TokenCounts } from "../types.js";

/**
 * One run's trajectory as the viewer, the export and the reward-hacking scan read it: every model
 * turn and every tool call of our server, in order. Built from the run folder (trace.jsonl = our
 * server's record of each tool call; harness-events.jsonl = the harness's own stream, for the model
 * turns and their tokens), or imported from a Harbor ATIF trajectory.json.
 */
export interface TrajectoryEvent {
  /** 0-based position in the run. */
  i: number;
  kind: "turn" | "tool" | "session";
  ts: string | null;
  /** turn: what the model said (capped); session: the event name (session_start, session_end). */
  text?: string;
  /** turn: its tokens; `scope` says whether they are this request's or a whole attempt's (Codex reports per attempt). */
  tokens?: TokenCounts & { scope: "request" | "attempt" };
  cost_usd?: number | null;
  /** tool: the tool's name and arguments as our server recorded them. */
  tool?: string;
  args?: unknown;
  duration_ms?: number | null;
  exit_code?: number | null;
  is_error?: boolean;
  /** tool: the result the agent saw (head + tail, capped), its whole size, whether it was cut. */
  result?: string;
  result_bytes?: number | null;
  result_truncated?: boolean;
}

export interface Trajectory {
  run_id: string;
  /** Where the model turns came from: the harness's events, the stand-in's request log, an ATIF file, or nowhere (tool calls only). */
  turns_from: "harness-events" | "standin-requests" | "atif" | "none";
  events: TrajectoryEvent[];
}

/** A string cut to head + tail around a marker, so the end of a log (where it says what failed) survives. */
export function excerpt(s: string, max: number): string {
  if (s.length <= max) return s;
  const head = Math.ceil(max * 0.6);
  const tail = max - head;
  return `${s.slice(0, head)}\n[... ${s.length - max} chars cut ...]\n${s.slice(s.length - tail)}`;
}
