import { resolve } from "node:path";
import { join } from "node:path";
import type { Command } from "commander";
import { packageRoot } from "../lib/paths.js";
import { loopbackListenHost, MCP_PATH, TOKEN_ENV } from "../server/http.js";
import { loadPublicTask } from "../tasks/loader.js";
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
    "",
  ].join("\n");
}

/**
 * OpenCode's config layout: V2 (current) names servers under `mcp.servers` and splits the timeout
 * into `{ startup, request }`; V1 put them directly under `mcp` with `enabled` and one `timeout`.
 * Both in milliseconds.
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
export function opencodeConfig(o: ConnectOptions, runTimeoutSec: number, layout: OpencodeLayout = "v2"): string {
  return opencodeEntry({ type: "local", command: serveArgv(o) }, runTimeoutSec, layout);
}

/** The port `connect --http` writes into the config (the server must be started with it). */
export const CONNECT_HTTP_PORT = 8741;

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
    "",
  ].join("\n");
}

/** The remote server entry for opencode.json; `oauth: false` so a 401 is reported, not taken for an OAuth server. */
export function opencodeHttpConfig(url: string, runTimeoutSec: number, layout: OpencodeLayout = "v2"): string {
  return opencodeEntry({ type: "remote", url, oauth: false, headers: { Authorization: `Bearer {env:${TOKEN_ENV}}` } }, runTimeoutSec, layout);
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
      : "# 3. merge into opencode.json (project) or ~/.config/opencode/opencode.json; timeouts are in ms (V2 layout; --opencode-v1 for the old one); skill: infradev skill install --opencode",
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
    .option("--opencode-v1", "opencode: the V1 config layout (servers directly under `mcp`, `enabled`, one `timeout`) instead of V2's `mcp.servers`")
    .action((harness: string, opts: { task: string; sandbox: string; runsDir: string; tasksDir?: string; http?: boolean; host: string; port: string; opencodeV1?: boolean }) => {
      if (harness !== "codex" && harness !== "opencode") throw new UsageError(`connect: harness must be codex or opencode (got "${harness}")`);
      if (!["local", "docker", "none"].includes(opts.sandbox)) throw new UsageError(`connect: --sandbox must be local, docker or none (got "${opts.sandbox}")`);
      const task = loadPublicTask(opts.task, opts.tasksDir);
      const o: ConnectOptions = { task: opts.task, sandbox: opts.sandbox, runsDir: opts.runsDir, tasksDir: opts.tasksDir };
      const h = harness as Harness;
      if (opts.opencodeV1 && h !== "opencode") throw new UsageError("connect: --opencode-v1 applies to opencode only");
      const layout: OpencodeLayout = opts.opencodeV1 ? "v1" : "v2";
      if (opts.http) {
        const port = /^\d{1,5}$/.test(opts.port) ? Number(opts.port) : NaN;
        if (!(port >= 1 && port <= 65535)) throw new UsageError(`connect: --port must be a fixed port from 1 to 65535 (got "${opts.port}"); the config names it`);
        const url = httpUrl(opts.host, port);
        process.stderr.write(httpSteps(o, opts.host, port, h));
        process.stdout.write(h === "codex" ? codexHttpConfig(url, task.spec.run_timeout_sec) : opencodeHttpConfig(url, task.spec.run_timeout_sec, layout));
        return;
      }
      if (h === "codex") {
        process.stderr.write("# add to ~/.codex/config.toml (or .codex/config.toml in a trusted project); skill: infradev skill install --codex\n");
        process.stdout.write(codexConfig(o, task.spec.run_timeout_sec));
      } else {
        process.stderr.write("# merge into opencode.json (project) or ~/.config/opencode/opencode.json; timeouts are in ms (V2 layout; --opencode-v1 for the old one); skill: infradev skill install --opencode\n");
        process.stdout.write(opencodeConfig(o, task.spec.run_timeout_sec, layout));
      }
    });
}
