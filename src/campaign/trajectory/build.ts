import { existsSync } from "node:fs";
import { join } from "node:path";
import { readRegularText } from "../../lib/safe-fs.js";
import { HARNESS_EVENTS_FILE, TRACE_FILE, type RunRecord, type TokenCounts } from "../types.js";
import { runCost, type Prices } from "../report/prices.js";
import { excerpt, type Trajectory, type TrajectoryEvent } from "./types.js";

/**
 * A run folder's trajectory. Tool calls come from trace.jsonl (our server's own record: arguments,
 * duration, exit code, the result the agent saw). Model turns come from the harness's event stream:
 * OpenCode reports one `step_finish` per model request with its tokens and the tool calls of that
 * step; Codex reports each item the model produced (a message, an MCP tool call) and its usage per
 * attempt (`turn.completed`, cumulative per thread). Each turn is placed before the tool calls it
 * issued, matched by order (the harness's n-th call of our server is the trace's n-th tool line).
 * Without harness events the stand-in's request log gives the turns; without either, the tool calls
 * stand alone.
 */

const MAX_TRACE_BYTES = 64 * 1024 * 1024;
const MAX_EVENTS_BYTES = 64 * 1024 * 1024;
const STANDIN_REQUESTS_FILE = "standin-requests.jsonl";
const MAX_TEXT = 4_000;

function jsonLines(text: string): Record<string, any>[] {
  const out: Record<string, any>[] = [];
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    try {
      const v = JSON.parse(line) as unknown;
      if (v && typeof v === "object" && !Array.isArray(v)) out.push(v as Record<string, any>);
    } catch {
      // a torn last line (killed mid-write) loses only itself
    }
  }
  return out;
}

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);

/** One model request as read from a harness: what it said, how many of our tools it called, its tokens. */
interface Turn {
  ts: string | null;
  text: string;
  calls: number;
  tokens: (TokenCounts & { scope: "request" | "attempt" }) | null;
}

const OUR_TOOL = /^(mcp__)?infradev[_.]|^infradev$/;

/** OpenCode (`opencode run --format json`): step_start … text / tool_use parts … step_finish with tokens. */
function opencodeTurns(events: Record<string, any>[]): Turn[] {
  const turns: Turn[] = [];
  let cur: Turn | null = null;
  const open = (e: Record<string, any>) => (cur ??= { ts: tsOf(e), text: "", calls: 0, tokens: null });
  for (const e of events) {
    if (e.type === "step_start") open(e);
    else if (e.type === "text" && typeof e.part?.text === "string") open(e).text += e.part.text;
    else if (e.type === "tool_use") {
      const name = String(e.part?.tool ?? "");
      if (OUR_TOOL.test(name)) open(e).calls += 1;
    } else if (e.type === "step_finish") {
      const t = open(e);
      const k = e.part?.tokens;
      if (k && typeof k === "object") {
        const cached = num(k.cache?.read) ?? 0;
        const reasoning = num(k.reasoning) ?? 0;
        t.tokens = { input: (num(k.input) ?? 0) + cached, cached_input: cached, output: (num(k.output) ?? 0) + reasoning, reasoning, scope: "request" };
      }
      turns.push(t);
      cur = null;
    }
  }
  if (cur) turns.push(cur);
  return turns;
}

function tsOf(e: Record<string, any>): string | null {
  const t = e.timestamp ?? e.part?.time?.start;
  if (typeof t === "number") return new Date(t).toISOString();
  return typeof t === "string" ? t : null;
}

/** Codex (`codex exec --json`): item.completed per model item; turn.completed.usage per attempt (cumulative per thread). */
function codexTurns(events: Record<string, any>[]): Turn[] {
  const turns: Turn[] = [];
  const lastUsage = new Map<string, Record<string, number>>();
  let thread = "";
  let attemptStart = 0;
  for (const e of events) {
    if (e.type === "thread.started" && typeof e.thread_id === "string") thread = e.thread_id;
    if (e.type === "item.completed" && e.item) {
      const it = e.item as Record<string, any>;
      if (it.type === "agent_message" || it.type === "reasoning") turns.push({ ts: null, text: String(it.text ?? ""), calls: 0, tokens: null });
      else if (it.type === "mcp_tool_call") turns.push({ ts: null, text: "", calls: String(it.server ?? "infradev") === "infradev" ? 1 : 0, tokens: null });
    }
    if (e.type === "turn.completed" && e.usage && typeof e.usage === "object") {
      const u = e.usage as Record<string, number>;
      const prev = lastUsage.get(thread) ?? {};
      lastUsage.set(thread, u);
      const d = (k: string) => Math.max(0, (num(u[k]) ?? 0) - (num(prev[k]) ?? 0));
      const last = turns[turns.length - 1];
      if (last && turns.length > attemptStart) {
        last.tokens = { input: d("input_tokens"), cached_input: d("cached_input_tokens"), output: d("output_tokens"), reasoning: d("reasoning_output_tokens"), scope: "attempt" };
      }
      attemptStart = turns.length;
    }
  }
  return turns;
}

/** The stand-in's request log (`standin-requests.jsonl`): one line per request it answered. */
function standinTurns(lines: Record<string, any>[]): Turn[] {
  return lines
    .filter((r) => r.step !== null)
    .map((r) => ({
      ts: null,
      text: String(r.answer ?? ""),
      calls: String(r.answer ?? "").startsWith("call ") ? 1 : 0,
      tokens: r.usage ? { input: num(r.usage.input), cached_input: num(r.usage.cached_input), output: num(r.usage.output), reasoning: num(r.usage.reasoning), scope: "request" as const } : null,
    }));
}

function readLines(file: string, max: number): Record<string, any>[] | null {
  return existsSync(file) ? jsonLines(readRegularText(file, max).text) : null;
}

export interface BuildOptions {
  prices?: Prices | null;
  /** Cap on a turn's text and a tool result in the output (the trace already caps results at ~3,800 chars). */
  maxText?: number;
}

export function buildTrajectory(runDir: string, record: RunRecord, opts: BuildOptions = {}): Trajectory {
  const max = opts.maxText ?? MAX_TEXT;
  const trace = readLines(join(runDir, TRACE_FILE), MAX_TRACE_BYTES) ?? [];
  const harness = readLines(join(runDir, HARNESS_EVENTS_FILE), MAX_EVENTS_BYTES);
  let turns: Turn[] = [];
  let from: Trajectory["turns_from"] = "none";
  if (harness && harness.length) {
    turns = record.harness === "opencode" ? opencodeTurns(harness) : record.harness === "codex" ? codexTurns(harness) : [];
    if (turns.length) from = "harness-events";
  }
  if (!turns.length) {
    const standin = readLines(join(runDir, STANDIN_REQUESTS_FILE), MAX_EVENTS_BYTES);
    if (standin?.length) {
      turns = standinTurns(standin);
      from = "standin-requests";
    }
  }
  const price = opts.prices?.[record.model] ?? null;
  const events: TrajectoryEvent[] = [];
  const push = (e: Omit<TrajectoryEvent, "i">) => events.push({ i: events.length, ...e });
  const toolLines = trace.filter((t) => typeof t.tool === "string");
  const sessionLines = trace.filter((t) => typeof t.event === "string");
  let next = 0;
  const pushTool = (t: Record<string, any>) =>
    push({
      kind: "tool",
      ts: typeof t.ts === "string" ? t.ts : null,
      tool: t.tool,
      args: t.args ?? {},
      duration_ms: num(t.duration_ms),
      exit_code: num(t.exit_code),
      is_error: t.is_error === true,
      result: typeof t.result === "string" ? excerpt(t.result, max) : undefined,
      result_bytes: num(t.result_text_bytes),
      result_truncated: t.result_truncated === true || (typeof t.result === "string" && t.result.length > max),
    });
  const start = sessionLines.find((s) => s.event === "session_start");
  if (start) push({ kind: "session", ts: typeof start.ts === "string" ? start.ts : null, text: "session_start" });
  for (const turn of turns) {
    push({
      kind: "turn",
      ts: turn.ts ?? (toolLines[next]?.ts as string | undefined) ?? null,
      text: excerpt(turn.text, max),
      ...(turn.tokens ? { tokens: turn.tokens, cost_usd: price ? runCost(turn.tokens, price) : null } : {}),
    });
    for (let k = 0; k < turn.calls && next < toolLines.length; k++) pushTool(toolLines[next++]!);
  }
  while (next < toolLines.length) pushTool(toolLines[next++]!);
  const end = [...sessionLines].reverse().find((s) => s.event === "session_end");
  if (end) push({ kind: "session", ts: typeof end.ts === "string" ? end.ts : null, text: `session_end${end.reason ? ` (${String(end.reason)})` : ""}` });
  return { run_id: record.run_id, turns_from: from, events };
}
