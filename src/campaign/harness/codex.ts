/**
 * Codex CLI (`codex exec --json`), pinned as a devDependency. Its config is private: CODEX_HOME in
 * the run's temp folder holds a config.toml that names one model provider (the endpoint given to
 * `run`, Responses API) and one MCP server (ours, from codexConfig below: required, tools
 * approved, tool timeout from the task). Codex's own tools that reach past our server — its shell,
 * web search, sub-agents, plugins — are switched off, so the model works through our sandbox only.
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { spawnSync } from "node:child_process";
import { parse as parseToml } from "smol-toml";
import { UsageError } from "../../lib/errors.js";
import { TOKEN_ENV } from "../../server/transports/http.js";
import { serveArgv, toolTimeoutSec, type ConnectOptions } from "./mcp-entry.js";
import { defaultSkillsRoot, installSkill } from "./skills.js";
import { add, privateEnv, type EventTally, type HarnessSetup, type PreparedHarness } from "./types.js";

/** The Codex entry script: $INFRADEV_CODEX_JS, else the installed @openai/codex. */
export function codexEntry(): string | null {
  if (process.env.INFRADEV_CODEX_JS) return process.env.INFRADEV_CODEX_JS;
  try {
    const pkg = createRequire(import.meta.url).resolve("@openai/codex/package.json");
    const bin = join(dirname(pkg), (JSON.parse(readFileSync(pkg, "utf8")) as { bin: { codex: string } }).bin.codex);
    return existsSync(bin) ? bin : null;
  } catch {
    return null;
  }
}

const toml = (s: string) => JSON.stringify(s); // a JSON string is a valid TOML basic string

/** `[mcp_servers.infradev]` for ~/.codex/config.toml. */
export function codexConfig(o: ConnectOptions, runTimeoutSec: number): string {
  const [command, ...args] = serveArgv(o);
  return [
    "[mcp_servers.infradev]",
    `command = ${toml(command!)}`,
    `args = [${args.map(toml).join(", ")}]`,
    "# workspace + base checkout are created at start-up",
    "startup_timeout_sec = 60",
    "# multi-rank pytest_run / measure (twice with compare_with_base) outlast Codex's 60 s default",
    `tool_timeout_sec = ${toolTimeoutSec(runTimeoutSec)}`,
    ...CODEX_POLICY,
    "",
  ].join("\n");
}

/**
 * Seen with Codex 0.169: a server that is not `required` is not waited for (the first turns go out
 * without our tools), and run_shell (a destructive tool) is refused under approval_policy "never"
 * unless the server's tools are approved by default.
 */
const CODEX_POLICY = [
  "# wait for the server before the first turn (else the model starts without these tools)",
  "required = true",
  "# run_shell and the test runs change the workspace: approved, or refused under approval_policy = \"never\"",
  'default_tools_approval_mode = "approve"',
];

/** `[mcp_servers.infradev]` for a server already listening: Codex sends $INFRADEV_HTTP_TOKEN as the bearer token. */
export function codexHttpConfig(url: string, runTimeoutSec: number): string {
  return [
    "[mcp_servers.infradev]",
    `url = ${toml(url)}`,
    `bearer_token_env_var = ${toml(TOKEN_ENV)}`,
    "# multi-rank pytest_run / measure (twice with compare_with_base) outlast Codex's 60 s default",
    `tool_timeout_sec = ${toolTimeoutSec(runTimeoutSec)}`,
    ...CODEX_POLICY,
    "",
  ].join("\n");
}

/**
 * Puts the `[mcp_servers.infradev]` table into a Codex config.toml, replacing the one already there
 * (and its sub-tables) and keeping everything else byte for byte, comments included: appending the
 * printed config twice would break Codex (a duplicate key). Pure; the result is checked to parse.
 */
export function mergeCodexConfig(existing: string, table: string): string {
  const lines = existing.split("\n");
  const out: string[] = [];
  let skipping = false;
  for (const line of lines) {
    const header = /^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$/.exec(line);
    if (header) {
      const name = header[1]!.replace(/\s*\.\s*/g, ".").replace(/^"?mcp_servers"?\."?infradev"?/, "mcp_servers.infradev");
      skipping = name === "mcp_servers.infradev" || name.startsWith("mcp_servers.infradev.");
    }
    if (!skipping) out.push(line);
  }
  const kept = out.join("\n").replace(/\n*$/, "");
  const merged = `${kept ? `${kept}\n\n` : ""}${table.replace(/\n*$/, "\n")}`;
  const doc = parseToml(merged) as { mcp_servers?: Record<string, unknown> };
  if (!doc.mcp_servers?.infradev) throw new UsageError("connect --write: the merged config.toml has no [mcp_servers.infradev] (an inline mcp_servers table?); merge it by hand");
  return merged;
}


/** Codex features that would give the model a way around our server (its shell, the web, host files as images, helpers). */
const FEATURES_OFF = ["shell_tool", "unified_exec", "multi_agent", "goals", "apps", "plugins", "image_generation", "browser_use", "computer_use", "memories", "view_image"];

/** `[mcp_servers.infradev]` of connect's codexConfig, its args extended (the run's --resume and --python). */
export function codexServerTable(connect: ConnectOptions, runTimeoutSec: number, extraArgs: string[]): string {
  const table = codexConfig(connect, runTimeoutSec);
  const out = table.replace(/^args = \[(.*)\]$/m, (_m, inner: string) => `args = [${[inner, ...extraArgs.map(toml)].filter(Boolean).join(", ")}]`);
  const parsed = parseToml(out) as { mcp_servers?: { infradev?: { args?: string[] } } };
  const args = parsed.mcp_servers?.infradev?.args ?? [];
  if (extraArgs.some((a, i) => args[args.length - extraArgs.length + i] !== a)) throw new Error("codex config: could not extend the server's args (connect's config format changed?)");
  return out;
}

export function codexConfigToml(setup: HarnessSetup, serverTable: string): string {
  return [
    "# written by infradev run: a private CODEX_HOME for one run",
    `model = ${toml(setup.model)}`,
    'model_provider = "infradev_run"',
    'approval_policy = "never"',
    'sandbox_mode = "read-only"',
    'web_search = "disabled"',
    "",
    "[features]",
    ...FEATURES_OFF.map((f) => `${f} = false`),
    "",
    "[model_providers.infradev_run]",
    'name = "infradev run endpoint"',
    `base_url = ${toml(setup.providerUrl)}`,
    'wire_api = "responses"',
    `env_key = ${toml(setup.providerKeyEnv)}`,
    "",
    serverTable,
  ].join("\n");
}

export function prepareCodex(setup: HarnessSetup, serverTable: string): PreparedHarness {
  const entry = codexEntry();
  if (!entry) throw new Error("codex: the Codex CLI is not installed (npm install @openai/codex, or set INFRADEV_CODEX_JS to its bin/codex.js)");
  const codexHome = join(setup.root, "codex-home");
  const cwd = join(setup.root, "scratch");
  for (const d of [codexHome, cwd, join(setup.root, "home"), join(setup.root, "tmp")]) mkdirSync(d, { recursive: true });
  writeFileSync(join(codexHome, "config.toml"), codexConfigToml(setup, serverTable), { mode: 0o600 });
  const env = privateEnv(setup.root, { CODEX_HOME: codexHome, [setup.providerKeyEnv]: setup.providerKey });
  if (setup.skill) installSkill(defaultSkillsRoot("codex", env));
  const v = spawnSync(process.execPath, [entry, "--version"], { encoding: "utf8", env, timeout: 30_000 });
  const version = /(\d+\.\d+\.\d+\S*)/.exec(v.stdout ?? "")?.[1] ?? null;
  return {
    name: "codex",
    version,
    env,
    cwd,
    argv: ({ prompt, resumeSession }) => [
      process.execPath,
      entry,
      "exec",
      ...(resumeSession ? ["resume"] : []),
      "--json",
      "--skip-git-repo-check",
      ...(resumeSession ? [resumeSession] : ["-C", cwd]),
      "--",
      prompt,
    ],
    fold: codexEventFolder(),
  };
}

/**
 * Codex's events: `thread.started` names the session; `turn.completed.usage` holds the thread's
 * tokens so far — cumulative: a resumed thread's first turn reports the earlier attempts' tokens
 * too (seen with 0.169), so each thread's latest usage replaces the one before and threads add up.
 * Input includes the cached part and output includes reasoning, as the Responses API counts them.
 * Model requests: every completed item the model produced (a message or a tool call) came from one.
 */
export function codexEventFolder(): (t: EventTally, e: Record<string, any>) => void {
  const byThread = new Map<string, Record<string, unknown>>();
  let thread = "";
  return (t, e) => {
    if (e.type === "thread.started" && typeof e.thread_id === "string") t.sessionId = thread = e.thread_id;
    if (e.type === "item.completed" && e.item && MODEL_ITEMS.has(e.item.type)) t.turns = (t.turns ?? 0) + 1;
    if ((e.type === "error" || e.type === "turn.failed") && (typeof e.message === "string" || typeof e.error?.message === "string")) t.lastError = String(e.message ?? e.error.message);
    if (e.type !== "turn.completed" || !e.usage || typeof e.usage !== "object") return;
    byThread.set(thread, e.usage as Record<string, unknown>);
    const sum = (k: string) => [...byThread.values()].reduce<number | null>((acc, u) => add(acc, u[k]), null);
    t.tokens = { input: sum("input_tokens"), cached_input: sum("cached_input_tokens"), output: sum("output_tokens"), reasoning: sum("reasoning_output_tokens") };
  };
}

const MODEL_ITEMS = new Set(["agent_message", "mcp_tool_call", "command_execution", "file_change", "web_search"]);
