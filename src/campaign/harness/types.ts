/**
 * One adapter per agent harness: how to give it a private configuration that names only our MCP
 * server and the model endpoint, the command line of a non-interactive attempt (first, or a
 * re-prompt of the same session), and how to read its JSON event stream (session id, model
 * requests, tokens). The runner (campaign/run.ts) knows nothing harness-specific beyond this.
 */
import type { TokenCounts } from "../types.js";

export interface HarnessSetup {
  /** Private folder for HOME, the harness's config and data dirs, and its scratch cwd. */
  root: string;
  /** The MCP server's stdio argv, as cli/connect.ts writes it (plus --resume of the run). */
  serveArgv: string[];
  /** The task's run_timeout_sec (tool timeouts follow from it: cli/connect.ts toolTimeoutSec). */
  runTimeoutSec: number;
  model: string;
  /** OpenAI-compatible base URL (…/v1). */
  providerUrl: string;
  /** Name of the environment variable that holds the API key, and its value (passed to the harness only). */
  providerKeyEnv: string;
  providerKey: string;
  skill: boolean;
}

export interface AttemptSpec {
  prompt: string;
  /** The harness's session id from an earlier attempt: continue that conversation. */
  resumeSession: string | null;
}

/** What the runner reads out of an attempt's events. */
export interface EventTally {
  sessionId: string | null;
  /** Model requests (steps); null when the harness reports none. */
  turns: number | null;
  tokens: TokenCounts;
  /** The harness's last error event (an endpoint it cannot reach, a refused request), for run.json's error. */
  lastError: string | null;
}

export interface PreparedHarness {
  readonly name: "codex" | "opencode";
  readonly version: string | null;
  /** Absolute argv[0] and its arguments; never a shell string. */
  argv(attempt: AttemptSpec): string[];
  /** The whole environment of the harness process (HOME and XDG dirs private). */
  env: Record<string, string>;
  cwd: string;
  /** Folds one parsed JSON event line into the tally. */
  fold(tally: EventTally, event: Record<string, unknown>): void;
}

export const emptyTally = (): EventTally => ({ sessionId: null, turns: null, tokens: { input: null, cached_input: null, output: null, reasoning: null }, lastError: null });

/** Adds `n` to a nullable counter. */
export function add(a: number | null, n: unknown): number | null {
  return typeof n === "number" && Number.isFinite(n) ? (a ?? 0) + n : a;
}

/** HOME and the XDG dirs inside `root`, plus PATH and the few variables a harness needs. */
export function privateEnv(root: string, extra: Record<string, string>): Record<string, string> {
  const home = `${root}/home`;
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
    HOME: home,
    XDG_CONFIG_HOME: `${home}/.config`,
    XDG_DATA_HOME: `${home}/.local/share`,
    XDG_CACHE_HOME: `${home}/.cache`,
    XDG_STATE_HOME: `${home}/.local/state`,
    TMPDIR: `${root}/tmp`,
    LANG: process.env.LANG ?? "C.UTF-8",
    ...extra,
  };
  // The server the harness starts reads these (interpreter, logs); nothing else of ours leaks in.
  for (const k of ["INFRADEV_PYTHON", "INFRADEV_LOG_LEVEL", "INFRADEV_DEBUG"]) if (process.env[k] !== undefined) env[k] = process.env[k]!;
  return env;
}
