/**
 * The campaign's data model: what `infradev run`, `eval` and `grade-many` write into a campaign folder
 * and what `report` and `eval status` read back. Plain JSON on disk, written atomically, so a killed
 * campaign resumes from its files and a run on a cluster node is read the same way as one from here.
 *
 *   <campaign>/campaign.json        CampaignManifest
 *   <campaign>/runs/<run-id>/       run.json (RunRecord, written last), patch.diff, trace.jsonl,
 *                                   harness-events.jsonl, harness-stderr.log, grade.json, grade/
 *   <campaign>/jobs/<run-id>.json   JobRecord (engine bookkeeping)
 *   <campaign>/logs/<run-id>.out|.err
 */

export const RUN_RECORD_FILE = "run.json";
export const GRADE_FILE = "grade.json";
export const PATCH_FILE = "patch.diff";
export const TRACE_FILE = "trace.jsonl";
export const HARNESS_EVENTS_FILE = "harness-events.jsonl";
export const HARNESS_STDERR_FILE = "harness-stderr.log";
export const MANIFEST_FILE = "campaign.json";

/** Token counts as the harness reports them; null where it reports none of that kind. */
export interface TokenCounts {
  input: number | null;
  cached_input: number | null;
  output: number | null;
  reasoning: number | null;
}

/** How the harness part of a run ended (kept apart from the grade). */
export const EXIT_REASONS = ["submitted", "time_limit", "harness_exited", "error", "prediction"] as const;
export type ExitReason = (typeof EXIT_REASONS)[number];

export type HarnessName = "codex" | "opencode" | "predictions";

export interface RunRecord {
  schema_version: 1;
  run_id: string;
  task_id: string;
  category: string;
  type: string;
  /** Display name of the agent configuration (default: the harness's name). */
  agent: string;
  harness: HarnessName;
  harness_version: string | null;
  /** As given with --model; `standin:<script>` for the scripted stand-in model. */
  model: string;
  skill: boolean;
  repeat: number;
  started_at: string;
  ended_at: string;
  wall_s: number;
  time_limit_min: number | null;
  exit_reason: ExitReason;
  error: string | null;
  /** Harness invocations: 1 + the recoveries used. */
  attempts: number;
  recoveries_used: number;
  /** Model requests (steps) the harness reports; null when it reports none. */
  turns: number | null;
  /** Our MCP tool calls (trace lines naming a tool). */
  tool_calls: number;
  tools_used: Record<string, number>;
  tokens: TokenCounts;
  patch_bytes: number;
  submitted: boolean;
  grade: null | { status: string; file: typeof GRADE_FILE };
}

export interface AgentConfig {
  name: string;
  harness: Exclude<HarnessName, "predictions">;
  model: string;
  provider_url: string | null;
  provider_key_env: string | null;
  skill: boolean;
  recoveries: number;
  time_limit_min: number;
}

export interface CampaignManifest {
  schema_version: 1;
  kind: "eval" | "grade-many";
  created_at: string;
  updated_at: string;
  /** Absolute tasks folder, or null for the bundled tasks. */
  tasks_dir: string | null;
  tasks: string[];
  agents: AgentConfig[];
  repeats: number;
  engine: string;
  concurrency: number;
  /** The command line that made (or last resumed) the campaign. */
  argv: string[];
}

/** Engine bookkeeping for one run's job. */
export interface JobRecord {
  engine: string;
  engine_id: string;
  submitted_at: string;
  argv: string[];
  state?: string;
}

/** `<task>--<agent>--r<k>`: the folder name of one run (agent names are restricted to the same characters). */
export const RUN_ID_PART = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
export function runId(taskId: string, agent: string, repeat: number): string {
  for (const [what, v] of [["task id", taskId], ["agent name", agent]] as const) {
    if (!RUN_ID_PART.test(v) || v.includes("--")) throw new Error(`${what} "${v}" cannot name a run folder: use letters, digits, '.', '_' and single '-'`);
  }
  return `${taskId}--${agent}--r${repeat}`;
}
