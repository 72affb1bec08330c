import type { RunRecord, TokenCounts } from "../types.js";
import type { Trajectory, TrajectoryEvent } from "./types.js";

/**
 * Harbor's Agent Trajectory Interchange Format (ATIF, `trajectory.json`; RFC 0001 of
 * harbor-framework/harbor, v1.6 here) from one of our trajectories, and back.
 *
 * Export. The task prompt is not in a run folder, so step 1 is a `user` step naming the task; every
 * model turn is an `agent` step carrying its tool calls (`tool_calls`, `function_name` = our tool's
 * name, `arguments` as our server recorded them) and their results (`observation.results`, one per
 * call, `source_call_id` = the call's id, `content` = the result the agent saw, capped); tokens go
 * to `metrics` (prompt = input incl. cached, completion = output incl. reasoning, cached; cost with
 * --prices), Codex's per-attempt usage to the attempt's last step with `extra.tokens_scope`.
 * Durations, exit codes, error flags and result sizes have no ATIF field: they go to the tool call's
 * observation under `extra` of the step (`extra.tool_results[call id]`). Tool calls not preceded by
 * a known model turn (no harness events) become agent steps of their own. `final_metrics` holds the
 * run's totals from run.json; `extra` of the root its grade summary and scan flag.
 *
 * Import (report and view read a run folder holding `trajectory.json` and no `trace.jsonl`): agent
 * steps become turns (message, tokens from `metrics`), their tool calls become tool events with the
 * observation whose `source_call_id` matches (content as result); `user` / `system` steps become
 * session events. What does not map: ATIF has no exit code or duration per call (kept when the file
 * is one of ours, from `extra`), no grade (a run imported without grade.json is "not graded"), and
 * no separate reasoning token count unless `metrics.extra.reasoning_tokens` is present.
 */

export const ATIF_VERSION = "ATIF-v1.6";
export const ATIF_FILE = "trajectory.json";

type Json = Record<string, unknown>;

const tokenMetrics = (t: TokenCounts & { scope?: string }, cost: number | null | undefined): Json => {
  const m: Json = {};
  if (t.input !== null) m.prompt_tokens = t.input;
  if (t.output !== null) m.completion_tokens = t.output;
  if (t.cached_input !== null) m.cached_tokens = t.cached_input;
  if (typeof cost === "number") m.cost_usd = cost;
  const extra: Json = {};
  if (t.reasoning !== null) extra.reasoning_tokens = t.reasoning;
  if (t.scope) extra.tokens_scope = t.scope;
  if (Object.keys(extra).length) m.extra = extra;
  return m;
};

export interface AtifExtra {
  grade?: { status: string; resolved: boolean | null; score: number | null } | null;
  flagged?: boolean | null;
  cost_usd?: number | null;
}

export function toAtif(record: RunRecord, traj: Trajectory, extra: AtifExtra = {}): Json {
  const steps: Json[] = [];
  const stepId = () => steps.length + 1;
  steps.push({ step_id: 1, source: "user", message: `infradev task ${record.task_id}: the task prompt (get_task returns it to the agent)`, extra: { task_id: record.task_id } });
  let current: { step: Json; calls: Json[]; results: Json[]; info: Json } | null = null;
  const close = () => {
    if (!current) return;
    if (current.calls.length) {
      current.step.tool_calls = current.calls;
      current.step.observation = { results: current.results };
      current.step.extra = { ...((current.step.extra as Json) ?? {}), tool_results: current.info };
    }
    steps.push(current.step);
    current = null;
  };
  const open = (e: TrajectoryEvent | null): { step: Json; calls: Json[]; results: Json[]; info: Json } => {
    const step: Json = { step_id: stepId(), source: "agent", model_name: record.model, message: e?.text ?? "" };
    if (e?.ts) step.timestamp = e.ts;
    if (e?.tokens) step.metrics = tokenMetrics(e.tokens, e.cost_usd);
    return { step, calls: [], results: [], info: {} };
  };
  for (const e of traj.events) {
    if (e.kind === "session") continue;
    if (e.kind === "turn") {
      close();
      current = open(e);
      continue;
    }
    if (!current) current = open(null);
    // A step's number is fixed when it is opened: its calls are named after it.
    const id = `call_${current.step.step_id as number}_${current.calls.length + 1}`;
    current.calls.push({ tool_call_id: id, function_name: e.tool ?? "unknown", arguments: e.args && typeof e.args === "object" && !Array.isArray(e.args) ? e.args : { value: e.args ?? null } });
    current.results.push({ source_call_id: id, content: e.result ?? "" });
    current.info[id] = { ts: e.ts, duration_ms: e.duration_ms ?? null, exit_code: e.exit_code ?? null, is_error: e.is_error ?? false, result_bytes: e.result_bytes ?? null, result_truncated: e.result_truncated ?? false };
    if (traj.turns_from === "none") close();
  }
  close();
  const t = record.tokens;
  const final: Json = { total_steps: steps.length };
  if (t.input !== null) final.total_prompt_tokens = t.input;
  if (t.output !== null) final.total_completion_tokens = t.output;
  if (t.cached_input !== null) final.total_cached_tokens = t.cached_input;
  if (typeof extra.cost_usd === "number") final.total_cost_usd = extra.cost_usd;
  return {
    schema_version: ATIF_VERSION,
    session_id: record.run_id,
    agent: { name: record.harness, version: record.harness_version ?? "unknown", model_name: record.model, extra: { infradev_agent: record.agent, skill: record.skill } },
    steps,
    notes: `infradev run ${record.run_id}: tool calls are infradev's MCP tools as recorded by its server (trace.jsonl); model turns from ${traj.turns_from}`,
    final_metrics: final,
    extra: {
      infradev: { run_id: record.run_id, task_id: record.task_id, agent: record.agent, repeat: record.repeat, exit_reason: record.exit_reason, wall_s: record.wall_s, reasoning_tokens: t.reasoning, grade: extra.grade ?? null, flagged: extra.flagged ?? null },
    },
  };
}

const numOr = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);
const textOf = (v: unknown): string => (typeof v === "string" ? v : Array.isArray(v) ? v.map((p) => (p && typeof p === "object" && typeof (p as Json).text === "string" ? ((p as Json).text as string) : "")).join("") : "");

/** Our trajectory from an ATIF document; throws with the field path when it is not one. */
export function fromAtif(doc: unknown, runId: string): Trajectory {
  const d = doc as Json;
  if (!d || typeof d !== "object" || typeof d.schema_version !== "string" || !d.schema_version.startsWith("ATIF-v") || !Array.isArray(d.steps)) {
    throw new Error("not an ATIF trajectory (schema_version \"ATIF-v…\" and steps[] expected)");
  }
  const events: TrajectoryEvent[] = [];
  const push = (e: Omit<TrajectoryEvent, "i">) => events.push({ i: events.length, ...e });
  for (const [k, raw] of (d.steps as unknown[]).entries()) {
    const s = raw as Json;
    if (!s || typeof s !== "object") throw new Error(`steps[${k}]: not an object`);
    const ts = typeof s.timestamp === "string" ? s.timestamp : null;
    if (s.source !== "agent") {
      push({ kind: "session", ts, text: `${String(s.source)}: ${textOf(s.message).slice(0, 2000)}` });
      continue;
    }
    const m = (s.metrics ?? null) as Json | null;
    const mx = (m?.extra ?? {}) as Json;
    push({
      kind: "turn",
      ts,
      text: [typeof s.reasoning_content === "string" ? `(reasoning) ${s.reasoning_content}` : "", textOf(s.message)].filter(Boolean).join("\n"),
      ...(m ? { tokens: { input: numOr(m.prompt_tokens), cached_input: numOr(m.cached_tokens), output: numOr(m.completion_tokens), reasoning: numOr(mx.reasoning_tokens), scope: mx.tokens_scope === "attempt" ? ("attempt" as const) : ("request" as const) }, cost_usd: numOr(m.cost_usd) } : {}),
    });
    const results = new Map<string, unknown>();
    for (const r of ((s.observation as Json | undefined)?.results as Json[] | undefined) ?? []) if (typeof r?.source_call_id === "string") results.set(r.source_call_id, r.content);
    const info = (((s.extra as Json | undefined)?.tool_results ?? {}) as Record<string, Json>);
    for (const c of (s.tool_calls as Json[] | undefined) ?? []) {
      const id = String(c.tool_call_id);
      const x = info[id] ?? {};
      const content = results.get(id);
      push({
        kind: "tool",
        ts: typeof x.ts === "string" ? x.ts : ts,
        tool: String(c.function_name),
        args: c.arguments ?? {},
        duration_ms: numOr(x.duration_ms),
        exit_code: numOr(x.exit_code),
        is_error: x.is_error === true,
        result: content === undefined ? undefined : typeof content === "string" ? content : JSON.stringify(content),
        result_bytes: numOr(x.result_bytes),
        result_truncated: x.result_truncated === true,
      });
    }
  }
  return { run_id: runId, turns_from: "atif", events };
}
