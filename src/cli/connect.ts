import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { Command } from "commander";
import { parse as parseToml } from "smol-toml";
import { packageRoot } from "../lib/paths.js";
import { DEFAULT_HTTP_PORT } from "../server/defaults.js";
import { loopbackListenHost, MCP_PATH, TOKEN_ENV } from "../server/transports/http.js";
import { loadPublicTask } from "../task/public/loader.js";
import type { Harness } from "./skill.js";
import { UsageError } from "../lib/errors.js";

export interface ConnectOptions {
  task: string;
  sandbox: string;
  runsDir: string;
  tasksDir?: string;
  /** Node and the CLI entry point; default: this very installation. */
  node?: string;
  cli?: string;
}

/** How long one tool call may take: measure with compare_with_base runs the suite twice. */
export function toolTimeoutSec(runTimeoutSec: number): number {
  return Math.ceil(2 * runTimeoutSec + 300);
}

function serveArgv(o: ConnectOptions): string[] {
  return [
    o.node ?? process.execPath,
    o.cli ?? join(packageRoot(), "dist", "cli", "main.js"),
    "serve",
    "--task",
    o.task,
    "--sandbox",
    o.sandbox,
    "--runs-dir",
    resolve(o.runsDir),
    ...(o.tasksDir ? ["--tasks-dir", resolve(o.tasksDir)] : []),
  ];
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

/** The port `connect --http` writes into the config: `serve --http` listens there without --port. */
export const CONNECT_HTTP_PORT = DEFAULT_HTTP_PORT;

/** The URL of `serve --http --host <host> --port <port>`. */
export function httpUrl(host: string, port: number): string {
  const h = loopbackListenHost(host);
  return `http://${h.includes(":") ? `[${h}]` : h}:${port}${MCP_PATH}`;
}

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

/** The remote server entry for opencode.json; `oauth: false` so a 401 is reported, not taken for an OAuth server. */
export function opencodeHttpConfig(url: string, runTimeoutSec: number, layout: OpencodeLayout = "v1"): string {
  return opencodeEntry({ type: "remote", url, oauth: false, headers: { Authorization: `Bearer {env:${TOKEN_ENV}}` } }, runTimeoutSec, layout);
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

/** Writes `text` to `file` through a temporary file and a rename; the old file is kept as `<file>.bak`. */
function writeConfig(file: string, text: string): void {
  mkdirSync(dirname(file), { recursive: true });
  if (existsSync(file)) writeFileSync(`${file}.bak`, readFileSync(file));
  const tmp = `${file}.infradev-${process.pid}.tmp`;
  writeFileSync(tmp, text, { mode: 0o600 });
  renameSync(tmp, file);
}

const shellQuote = (a: string) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, "'\\''")}'`);

/** What to run first, as comment lines: with HTTP the harness does not start the server. */
function httpSteps(o: ConnectOptions, host: string, port: number, harness: Harness): string {
  const serve = [...serveArgv(o), "--http", "--host", host, "--port", String(port)].map(shellQuote).join(" ");
  const runs = resolve(o.runsDir);
  return [
    "# 1. start the server (it keeps running; Ctrl-C or SIGTERM writes runs/<run-id>/patch.diff):",
    `#      ${serve}`,
    `#    it prints the URL and the token file, ${runs}/<run-id>/http-token (or export ${TOKEN_ENV} first to choose the token)`,
    `# 2. in the shell that starts ${harness}: export ${TOKEN_ENV}="$(cat ${runs}/<run-id>/http-token)"`,
    harness === "codex"
      ? "# 3. add to ~/.codex/config.toml (or .codex/config.toml in a trusted project); skill: infradev skill install --codex"
      : "# 3. merge into opencode.json (project) or ~/.config/opencode/opencode.json (or use --write FILE); timeouts are in ms; skill: infradev skill install --opencode",
    "",
  ].join("\n");
}

export function registerConnectCommands(program: Command): void {
  program
    .command("connect <harness>")
    .description("print the MCP configuration that makes Codex (codex) or OpenCode (opencode) start `infradev serve` for a task")
    .requiredOption("--task <id>", "task id (or path to a task folder)")
    .option("--sandbox <kind>", "sandbox backend the server will use: local | docker | none", "local")
    .option("--runs-dir <dir>", "where runs/<run-id>/ folders go", process.env.INFRADEV_RUNS_DIR ?? "runs")
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .option("--http", "connect to `serve --http` (Streamable HTTP on loopback, bearer token from $INFRADEV_HTTP_TOKEN) instead of starting it over stdio")
    .option("--host <host>", "with --http: the server's loopback host", "127.0.0.1")
    .option("--port <n>", "with --http: the server's port", String(CONNECT_HTTP_PORT))
    .option("--opencode-v1", "opencode: the V1 config layout (servers directly under `mcp`, `enabled`, one `timeout`; the default: OpenCode 1.18 drops V2's timeouts)")
    .option("--opencode-v2", "opencode: the V2 layout (`mcp.servers`, timeout {startup, request})")
    .option("--write [file]", "merge the entry into a config file instead of printing it (default: ~/.codex/config.toml or ./opencode.json); the old file is kept as <file>.bak")
    .action((harness: string, opts: { task: string; sandbox: string; runsDir: string; tasksDir?: string; http?: boolean; host: string; port: string; opencodeV1?: boolean; opencodeV2?: boolean; write?: string | boolean }) => {
      if (harness !== "codex" && harness !== "opencode") throw new UsageError(`connect: harness must be codex or opencode (got "${harness}")`);
      if (!["local", "docker", "none"].includes(opts.sandbox)) throw new UsageError(`connect: --sandbox must be local, docker or none (got "${opts.sandbox}")`);
      const task = loadPublicTask(opts.task, opts.tasksDir);
      const o: ConnectOptions = { task: opts.task, sandbox: opts.sandbox, runsDir: opts.runsDir, tasksDir: opts.tasksDir };
      const h = harness as Harness;
      if ((opts.opencodeV1 || opts.opencodeV2) && h !== "opencode") throw new UsageError(`connect: ${opts.opencodeV1 ? "--opencode-v1" : "--opencode-v2"} applies to opencode only`);
      if (opts.opencodeV1 && opts.opencodeV2) throw new UsageError("connect: choose one of --opencode-v1 and --opencode-v2");
      const layout: OpencodeLayout = opts.opencodeV2 ? "v2" : "v1";
      const emit = (config: string) => {
        if (!opts.write) return void process.stdout.write(config);
        const file = resolve(typeof opts.write === "string" ? opts.write : h === "codex" ? join(process.env.CODEX_HOME ?? join(homedir(), ".codex"), "config.toml") : "opencode.json");
        const before = existsSync(file) ? readFileSync(file, "utf8") : "";
        writeConfig(file, h === "codex" ? mergeCodexConfig(before, config) : mergeOpencodeConfig(before, config));
        process.stderr.write(`# wrote the infradev entry into ${file}${before ? ` (previous file kept as ${file}.bak)` : ""}\n`);
      };
      if (opts.http) {
        const port = /^\d{1,5}$/.test(opts.port) ? Number(opts.port) : NaN;
        if (!(port >= 1 && port <= 65535)) throw new UsageError(`connect: --port must be a fixed port from 1 to 65535 (got "${opts.port}"); the config names it`);
        const url = httpUrl(opts.host, port);
        process.stderr.write(httpSteps(o, opts.host, port, h));
        emit(h === "codex" ? codexHttpConfig(url, task.spec.run_timeout_sec) : opencodeHttpConfig(url, task.spec.run_timeout_sec, layout));
        return;
      }
      if (h === "codex") {
        if (!opts.write) process.stderr.write("# add to ~/.codex/config.toml (or .codex/config.toml in a trusted project), or run with --write; skill: infradev skill install --codex\n");
        emit(codexConfig(o, task.spec.run_timeout_sec));
      } else {
        if (!opts.write) process.stderr.write("# merge into opencode.json (project) or ~/.config/opencode/opencode.json, or run with --write; timeouts are in ms; skill: infradev skill install --opencode\n");
        emit(opencodeConfig(o, task.spec.run_timeout_sec, layout));
      }
    });
}
