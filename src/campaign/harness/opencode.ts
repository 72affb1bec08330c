/**
 * OpenCode (`opencode run --format json`), pinned as a devDependency (opencode-ai). Its config is
 * private: HOME and the XDG dirs in the run's temp folder, one opencode.json there naming one
 * provider (the endpoint given to `run`, chat completions through OpenCode's bundled
 * OpenAI-compatible provider) and our MCP server in the V1 layout (cli/connect.ts opencodeConfig:
 * the V2 layout's timeout is dropped by 1.18). OpenCode's own file, shell and web tools are off, so
 * the model works through our sandbox only; its skill tool stays (it reads the installed skill).
 * Offline: autoupdate, the models.dev fetch, default plugins, LSP downloads and its plugin install
 * (npm registry pointed at a closed port) are switched off.
 */
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { spawnSync } from "node:child_process";
import { UsageError } from "../../lib/errors.js";
import { TOKEN_ENV } from "../../server/transports/http.js";
import { serveArgv, toolTimeoutSec, type ConnectOptions } from "./mcp-entry.js";
import { defaultSkillsRoot, installSkill } from "./skills.js";
import { add, privateEnv, type EventTally, type HarnessSetup, type PreparedHarness } from "./types.js";

/** The OpenCode binary: $INFRADEV_OPENCODE_BIN, else the installed opencode-ai's. */
/**
 * OpenCode's config layout: V2 names servers under `mcp.servers` and splits the timeout into
 * `{ startup, request }`; V1 puts them directly under `mcp` with `enabled` and one `timeout`. Both
 * in milliseconds. V1 is the default: OpenCode 1.18 reads a V2 entry but drops its `timeout`
 * (`opencode debug config` shows none), and its default request timeout fails multi-rank runs.
 */
export type OpencodeLayout = "v2" | "v1";

function opencodeEntry(server: Record<string, unknown>, runTimeoutSec: number, layout: OpencodeLayout): string {
  const requestMs = toolTimeoutSec(runTimeoutSec) * 1000;
  const config =
    layout === "v2"
      ? { $schema: "https://opencode.ai/config.json", mcp: { servers: { infradev: { ...server, timeout: { startup: 60_000, request: requestMs } } } } }
      : { $schema: "https://opencode.ai/config.json", mcp: { infradev: { ...server, enabled: true, timeout: requestMs } } };
  return `${JSON.stringify(config, null, 2)}\n`;
}

/** The local (stdio) server entry for opencode.json. */
export function opencodeConfig(o: ConnectOptions, runTimeoutSec: number, layout: OpencodeLayout = "v1"): string {
  return opencodeEntry({ type: "local", command: serveArgv(o) }, runTimeoutSec, layout);
}

/** The remote server entry for opencode.json; `oauth: false` so a 401 is reported, not taken for an OAuth server. */
export function opencodeHttpConfig(url: string, runTimeoutSec: number, layout: OpencodeLayout = "v1"): string {
  return opencodeEntry({ type: "remote", url, oauth: false, headers: { Authorization: `Bearer {env:${TOKEN_ENV}}` } }, runTimeoutSec, layout);
}

/** Puts the infradev entry (V1 `mcp.infradev` or V2 `mcp.servers.infradev`) into an opencode.json. Pure. */
export function mergeOpencodeConfig(existing: string, entryJson: string): string {
  let doc: Record<string, any>;
  try {
    doc = existing.trim() ? (JSON.parse(existing) as Record<string, any>) : {};
  } catch (e) {
    throw new UsageError(`connect --write: the existing file is not plain JSON (${(e as Error).message}); merge the printed entry by hand`);
  }
  const entry = JSON.parse(entryJson) as Record<string, any>;
  doc.$schema ??= entry.$schema;
  doc.mcp ??= {};
  if (entry.mcp.servers) {
    doc.mcp.servers = { ...(doc.mcp.servers ?? {}), infradev: entry.mcp.servers.infradev };
    delete doc.mcp.infradev;
  } else {
    doc.mcp.infradev = entry.mcp.infradev;
    if (doc.mcp.servers) delete doc.mcp.servers.infradev;
  }
  return `${JSON.stringify(doc, null, 2)}\n`;
}

export function opencodeBinary(): string | null {
  if (process.env.INFRADEV_OPENCODE_BIN) return process.env.INFRADEV_OPENCODE_BIN;
  try {
    const pkg = createRequire(import.meta.url).resolve("opencode-ai/package.json");
    const bin = join(dirname(pkg), "bin", "opencode.exe");
    return existsSync(bin) ? bin : null;
  } catch {
    return null;
  }
}

/** OpenCode's built-in tools that reach past our server (files, shell, web, sub-agents). */
const TOOLS_OFF = ["bash", "edit", "write", "read", "grep", "glob", "list", "patch", "multiedit", "webfetch", "websearch", "codesearch", "task", "todowrite", "todoread"];

export const OPENCODE_PROVIDER = "infradev_run";

/** A registry URL nothing listens on (port 9, discard): package installs fail at once instead of downloading. */
const OFFLINE_REGISTRY = "http://127.0.0.1:9/";

/** opencode.json: connect's V1 server entry (its command extended by `extraArgs`), the provider, the tools off. */
export function opencodeConfigJson(setup: HarnessSetup, connect: ConnectOptions, extraArgs: string[]): string {
  const doc = JSON.parse(opencodeConfig(connect, setup.runTimeoutSec, "v1")) as Record<string, any>;
  const server = doc.mcp?.infradev;
  if (!server || !Array.isArray(server.command)) throw new Error("opencode config: connect's entry has no mcp.infradev.command (format changed?)");
  server.command = [...server.command, ...extraArgs];
  doc.provider = {
    [OPENCODE_PROVIDER]: {
      npm: "@ai-sdk/openai-compatible",
      name: "infradev run endpoint",
      options: { baseURL: setup.providerUrl, apiKey: `{env:${setup.providerKeyEnv}}` },
      models: { [setup.model]: { name: setup.model } },
    },
  };
  doc.model = `${OPENCODE_PROVIDER}/${setup.model}`;
  doc.autoupdate = false;
  doc.share = "disabled";
  doc.tools = Object.fromEntries(TOOLS_OFF.map((t) => [t, false]));
  doc.permission = { bash: "deny", edit: "deny", webfetch: "deny" };
  return `${JSON.stringify(doc, null, 2)}\n`;
}

export function prepareOpencode(setup: HarnessSetup, connect: ConnectOptions, extraArgs: string[]): PreparedHarness {
  const bin = opencodeBinary();
  if (!bin) throw new Error("opencode: OpenCode is not installed (npm install opencode-ai, or set INFRADEV_OPENCODE_BIN)");
  const cwd = join(setup.root, "scratch");
  const env = privateEnv(setup.root, {
    [setup.providerKeyEnv]: setup.providerKey,
    OPENCODE_DISABLE_AUTOUPDATE: "1",
    OPENCODE_DISABLE_MODELS_FETCH: "1",
    OPENCODE_DISABLE_DEFAULT_PLUGINS: "1",
    OPENCODE_DISABLE_LSP_DOWNLOAD: "1",
    OPENCODE_DISABLE_SHARE: "1",
    OPENCODE_DISABLE_CLAUDE_CODE: "1",
    OPENCODE_DISABLE_PROJECT_CONFIG: "1",
    // OpenCode installs @opencode-ai/plugin (~33 MB) into every fresh config dir from the npm
    // registry; a closed local port keeps that offline (refused at once) and every run the same.
    NPM_CONFIG_REGISTRY: OFFLINE_REGISTRY,
    BUN_CONFIG_REGISTRY: OFFLINE_REGISTRY,
  });
  const configDir = join(env.XDG_CONFIG_HOME!, "opencode");
  for (const d of [configDir, cwd, env.HOME!, env.TMPDIR!]) mkdirSync(d, { recursive: true });
  writeFileSync(join(configDir, "opencode.json"), opencodeConfigJson(setup, connect, extraArgs), { mode: 0o600 });
  if (setup.skill) installSkill(defaultSkillsRoot("opencode", env));
  const v = spawnSync(bin, ["--version"], { encoding: "utf8", env, cwd, timeout: 30_000 });
  const version = /(\d+\.\d+\.\d+\S*)/.exec(v.stdout ?? "")?.[1] ?? null;
  return {
    name: "opencode",
    version,
    env,
    cwd,
    argv: ({ prompt, resumeSession }) => [bin, "run", "--format", "json", "-m", `${OPENCODE_PROVIDER}/${setup.model}`, ...(resumeSession ? ["--session", resumeSession] : []), "--", prompt],
    fold: foldOpencodeEvent,
  };
}

/**
 * OpenCode's events carry `sessionID`; each `step_finish` is one model request with its tokens.
 * OpenCode reports input without the cached part and output without reasoning; they are added back
 * so both harnesses count as the Responses API does (input ⊇ cached, output ⊇ reasoning).
 */
export function foldOpencodeEvent(t: EventTally, e: Record<string, any>): void {
  if (typeof e.sessionID === "string") t.sessionId ??= e.sessionID;
  if (e.type === "error") t.lastError = String(e.error?.data?.message ?? e.error?.message ?? e.error?.name ?? JSON.stringify(e.error ?? e)).slice(0, 500);
  if (e.type !== "step_finish") return;
  t.turns = (t.turns ?? 0) + 1;
  const k = e.part?.tokens;
  if (!k || typeof k !== "object") return;
  const cached = typeof k.cache?.read === "number" ? k.cache.read : 0;
  const reasoning = typeof k.reasoning === "number" ? k.reasoning : 0;
  if (typeof k.input === "number") t.tokens.input = add(t.tokens.input, k.input + cached);
  if (k.cache && typeof k.cache === "object") t.tokens.cached_input = add(t.tokens.cached_input, cached);
  if (typeof k.output === "number") t.tokens.output = add(t.tokens.output, k.output + reasoning);
  t.tokens.reasoning = add(t.tokens.reasoning, k.reasoning);
}
