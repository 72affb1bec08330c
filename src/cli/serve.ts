import { resolve } from "node:path";
import type { Command } from "commander";
import { createLogger } from "../lib/logger.js";
import type { SandboxKind } from "../sandbox/types.js";
import type { PublicTask } from "../task/public/loader.js";
import { DEFAULT_HTTP_PORT } from "../server/defaults.js";
import { SKIP_RUNNABLE_FLAG, requireRunnableHere, taskPython } from "../task/public/runnable.js";
import { addDockerOptions, dockerOptionsFromFlags, localOptionsFromFlags, type DockerFlags } from "./sandbox-options.js";
import { makeSandboxFactory } from "../server/sandbox-factory.js";
import { UsageError } from "../lib/errors.js";

const KINDS: SandboxKind[] = ["local", "none", "docker"];

interface HttpFlags {
  http?: boolean;
  port?: string;
  host?: string;
  tokenFile?: string;
  printToken?: boolean;
}

/**
 * The --port number; the HTTP-only flags are refused without --http rather than silently ignored.
 * Without --port: DEFAULT_HTTP_PORT, the port `connect --http` writes into the harness config.
 */
function httpPort(opts: HttpFlags): number {
  if (!opts.http) {
    const flags = { port: "--port", host: "--host", tokenFile: "--token-file", printToken: "--print-token" } as const;
    const stray = (Object.keys(flags) as Array<keyof typeof flags>).filter((k) => opts[k] !== undefined).map((k) => flags[k]);
    if (stray.length > 0) throw new UsageError(`${stray.join(", ")} ${stray.length > 1 ? "only apply" : "only applies"} with --http`);
    return 0;
  }
  if (opts.port === undefined) return DEFAULT_HTTP_PORT;
  const port = /^\d{1,5}$/.test(opts.port) ? Number(opts.port) : NaN;
  if (!(port >= 0 && port <= 65535)) throw new UsageError(`--port must be a number from 0 to 65535 (got "${opts.port}")`);
  return port;
}

export function registerServeCommands(program: Command): void {
  const cmd = program
    .command("serve")
    .description("serve one task to an MCP client over stdio, or over Streamable HTTP on loopback with --http (workspace in runs/<run-id>/workspace, tools run in the sandbox)")
    .option("--task <id>", "task id (or path to a task folder); with --resume, the run's own task by default")
    .option("--sandbox <kind>", "local (bubblewrap) | docker | none (no isolation at all)", "local")
    .option("--runs-dir <dir>", "where runs/<run-id>/ folders go", process.env.INFRADEV_RUNS_DIR ?? "runs")
    .option("--resume <run-id>", "reopen an existing run (same workspace, trace appended)")
    .option("--python <path>", "Python interpreter inside the sandbox (default: $INFRADEV_PYTHON, else the task's env.python)")
    .option(SKIP_RUNNABLE_FLAG, "serve a task this machine cannot run (no GPU, interpreter missing): for experts")
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .option("--http", "serve Streamable HTTP at http://<host>:<port>/mcp instead of stdio (bearer token required)")
    .option("--port <n>", `with --http: TCP port (default ${DEFAULT_HTTP_PORT}, the one \`connect --http\` assumes; 0: a free one, printed at start)`)
    .option("--host <host>", "with --http: 127.0.0.1 (default), ::1 or localhost; anything else is refused")
    .option("--token-file <file>", `with --http: read the token from this file (default: $INFRADEV_HTTP_TOKEN, else a random one in runs/<run-id>/http-token)`)
    .option("--print-token", "with --http: put the token itself in the start-up line");
  addDockerOptions(cmd, { localPidsLimit: true }).action(
    async (opts: DockerFlags & { task?: string; sandbox: string; runsDir: string; resume?: string; python?: string; tasksDir?: string; skipRunnableCheck?: boolean } & HttpFlags) => {
      if (!KINDS.includes(opts.sandbox as SandboxKind)) throw new UsageError(`serve: --sandbox must be one of ${KINDS.join(", ")} (got "${opts.sandbox}")`);
      const logger = createLogger("infradev-serve");
      if (opts.sandbox === "none") logger.warn("--sandbox none: commands run as plain processes on this host; NOTHING is isolated");
      try {
        if (opts.task === undefined && opts.resume === undefined) throw new UsageError("serve: --task <id> is required (or --resume <run-id>: the run knows its task)");
        const port = httpPort(opts);
        const session = {
          taskId: opts.task,
          tasksRoot: opts.tasksDir ? resolve(opts.tasksDir) : undefined,
          runsDir: resolve(opts.runsDir),
          resume: opts.resume,
          sandboxKind: opts.sandbox as SandboxKind,
          python: opts.python,
          logger,
          createSandbox: makeSandboxFactory(dockerOptionsFromFlags(opts), localOptionsFromFlags(opts)),
          // A task this machine cannot run is refused before a run is made (exit 2), as grade does.
          checkTask: (task: PublicTask) =>
            requireRunnableHere(task, { command: "", skipCheck: opts.skipRunnableCheck, python: taskPython(task.spec, opts.python).python, sandbox: opts.sandbox }),
        };
        // The transports are imported here: stdio never loads the HTTP stack.
        if (opts.http) {
          const { serveHttp } = await import("../server/transports/http.js");
          await serveHttp({ ...session, host: opts.host ?? "127.0.0.1", port, defaultPort: opts.port === undefined, tokenFile: opts.tokenFile && resolve(opts.tokenFile), printToken: opts.printToken });
        } else {
          const { serveStdio } = await import("../server/transports/stdio.js");
          await serveStdio(session);
        }
      } catch (e) {
        // Start-up failures (unknown run, bwrap missing, task invalid) are the user's to fix: one
        // clear line on stderr, the stack only in the debug log; stdout stays clean for the client.
        logger.debug({ err: (e as Error).stack }, "serve failed to start");
        process.stderr.write(`infradev serve: ${(e as Error).message}\n`);
        process.exit(2);
      }
    },
  );
}
