/** `infradev connect`: prints (or merges) the config that makes a harness start or reach infradev's MCP server; the configs themselves are the harness adapters' (campaign/harness/). */
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { Command } from "commander";
import { TOKEN_ENV } from "../server/transports/http.js";
import { codexConfig, codexHttpConfig, mergeCodexConfig } from "../campaign/harness/codex.js";
import { CONNECT_HTTP_PORT, httpUrl, serveArgv, type ConnectOptions } from "../campaign/harness/mcp-entry.js";
import { mergeOpencodeConfig, opencodeConfig, opencodeHttpConfig, type OpencodeLayout } from "../campaign/harness/opencode.js";
import type { Harness } from "../campaign/harness/skills.js";
import { loadPublicTask } from "../task/public/loader.js";
import { UsageError } from "../lib/errors.js";

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
