/**
 * The infradev MCP server as a harness starts it: the `serve` command line (stdio) or the URL of a
 * `serve --http` already listening, and how long one tool call may take. Every harness adapter
 * (codex.ts, opencode.ts) builds its own config from these; `infradev connect` prints them.
 */
import { join, resolve } from "node:path";
import { packageRoot } from "../../lib/paths.js";
import { DEFAULT_HTTP_PORT } from "../../server/defaults.js";
import { loopbackListenHost, MCP_PATH } from "../../server/transports/http.js";

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

export function serveArgv(o: ConnectOptions): string[] {
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

/** The port `connect --http` writes into the config: `serve --http` listens there without --port. */
export const CONNECT_HTTP_PORT = DEFAULT_HTTP_PORT;

/** The URL of `serve --http --host <host> --port <port>`. */
export function httpUrl(host: string, port: number): string {
  const h = loopbackListenHost(host);
  return `http://${h.includes(":") ? `[${h}]` : h}:${port}${MCP_PATH}`;
}

