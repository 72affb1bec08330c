import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { createServer } from "./create-server.js";
import { InFlightToolCalls } from "./in-flight.js";
import { openSession, type SessionOptions } from "./session.js";

/** How long shutdown waits for tool calls whose commands it cancelled to answer. */
const SETTLE_MS = 3_000;

/**
 * `infradev serve` on stdio. stdout carries JSON-RPC and nothing else (logs go to stderr). When the
 * client goes away (stdin closed) or the process is told to stop (SIGTERM, SIGINT, SIGHUP), the
 * current patch is written to runs/<run-id>/patch.diff before the sandbox is torn down, so no work is
 * lost even without submit.
 */
export async function serveStdio(opts: SessionOptions & { onReady?: (info: { runId: string; runDir: string; workspace: string }) => void }): Promise<void> {
  const log = opts.logger;
  const session = await openSession(opts);
  const server = createServer(session.deps);
  const transport = new StdioServerTransport();

  const calls = new InFlightToolCalls();
  let stopping = false;
  const stop = async (reason: string, exitCode: number) => {
    if (stopping) return;
    stopping = true;
    log.info({ reason, run: session.session.runId }, "shutting down: writing patch.diff");
    const watchdog = setTimeout(() => {
      log.error("shutdown took longer than 30 s; exiting anyway");
      process.exit(exitCode || 1);
    }, 30_000);
    watchdog.unref();
    await session.finish(reason, { settled: () => calls.settled(SETTLE_MS) });
    await server.close().catch(() => undefined);
    log.info({ patch: session.session.patchPath }, "session ended");
    process.exit(exitCode);
  };

  process.stdin.on("end", () => void stop("stdin closed", 0));
  process.stdin.on("close", () => void stop("stdin closed", 0));
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(sig, () => void stop(sig, 0));
  // A closed stdout (the client died) must not crash the server before the patch is saved.
  process.stdout.on("error", () => void stop("stdout closed", 0));

  await server.connect(transport);
  calls.track(transport);
  log.info(
    { run: session.session.runId, workspace: session.session.paths.workspaceDir, sandbox: session.deps.sandbox.kind, resumed: session.resumed },
    `serving task ${session.deps.task.id} on stdio (run ${session.session.runId})`,
  );
  opts.onReady?.({ runId: session.session.runId, runDir: session.session.runDir, workspace: session.session.paths.workspaceDir });
}
