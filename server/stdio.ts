import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { createServer } from "./create-server.js";
import { openSession, type SessionOptions } from "./session.js";

/** How long shutdown waits for tool calls whose commands it cancelled to answer. */
const SETTLE_MS = 3_000;

/**
 * Tracks the tool calls received and not yet answered (or cancelled by the client), through the
 * transport's public hooks (set by `connect()`). Shutdown cancels their commands by closing the
 * sandbox, then waits for them, so their trace lines come before session_end.
 */
function trackToolCalls(transport: StdioServerTransport): { settled(maxMs: number): Promise<void> } {
  const open = new Set<string | number>();
  let wake: (() => void) | null = null;
  const done = (id: unknown) => {
    if (open.delete(id as string | number) && open.size === 0) wake?.();
  };
  const deliver = transport.onmessage;
  transport.onmessage = (msg: JSONRPCMessage) => {
    if ("method" in msg && msg.method === "tools/call" && "id" in msg) open.add(msg.id);
    else if ("method" in msg && msg.method === "notifications/cancelled") done((msg.params as { requestId?: unknown } | undefined)?.requestId);
    deliver?.(msg);
  };
  const send = transport.send.bind(transport);
  transport.send = (msg: JSONRPCMessage) => {
    if ("id" in msg && !("method" in msg)) done(msg.id);
    return send(msg);
  };
  return {
    settled: (maxMs) =>
      open.size === 0
        ? Promise.resolve()
        : new Promise<void>((res) => {
            const timer = setTimeout(res, maxMs);
            wake = () => {
              clearTimeout(timer);
              res();
            };
          }),
  };
}

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

  let calls: ReturnType<typeof trackToolCalls> | null = null;
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
    await session.finish(reason, { settled: async () => calls?.settled(SETTLE_MS) });
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
  calls = trackToolCalls(transport);
  log.info(
    { run: session.session.runId, workspace: session.session.paths.workspaceDir, sandbox: session.deps.sandbox.kind, resumed: session.resumed },
    `serving task ${session.deps.task.id} on stdio (run ${session.session.runId})`,
  );
  opts.onReady?.({ runId: session.session.runId, runDir: session.session.runDir, workspace: session.session.paths.workspaceDir });
}
