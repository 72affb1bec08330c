import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { createServer } from "../create-server.js";
import { InFlightToolCalls } from "../in-flight.js";
import { startSession, type Session, type SessionOptions } from "../session.js";

/** How long shutdown waits for tool calls whose commands it cancelled to answer. */
const SETTLE_MS = 3_000;

/**
 * `infradev serve` on stdio. stdout carries JSON-RPC and nothing else (logs go to stderr). When the
 * client goes away (stdin closed) or the process is told to stop (SIGTERM, SIGINT, SIGHUP), the
 * current patch is written to runs/<run-id>/patch.diff before the sandbox is torn down, so no work is
 * lost even without submit.
 *
 * The transport is connected first and the session (run folder, workspace, base checkout, sandbox)
 * built behind it: `initialize` is answered at once, tool calls wait for the session. A task or run
 * id that does not load throws before anything is served; a build that fails later is reported on
 * stderr, every tool call answers with its reason, and the process exits 2 when the client leaves.
 */
export async function serveStdio(opts: SessionOptions & { onReady?: (info: { runId: string; runDir: string; workspace: string }) => void }): Promise<void> {
  const log = opts.logger;
  const started = startSession(opts);
  const server = createServer(started.deps, { sandboxKind: opts.sandboxKind });
  const transport = new StdioServerTransport();

  const calls = new InFlightToolCalls();
  let session: Session | null = null;
  let failed: Error | null = null;
  let stopping = false;
  const stop = async (reason: string, exitCode: number) => {
    if (stopping) return;
    stopping = true;
    const watchdog = setTimeout(() => {
      log.error("shutdown took longer than 30 s; exiting anyway");
      process.exit(exitCode || 1);
    }, 30_000);
    watchdog.unref();
    // A session still being built is waited for, so its workspace gets its patch.diff and its sandbox is closed.
    const s = session ?? (await started.ready.catch(() => null));
    if (s) {
      log.info({ reason, run: s.session.runId }, "shutting down: writing patch.diff");
      await s.finish(reason, { settled: () => calls.settled(SETTLE_MS) });
    }
    await server.close().catch(() => undefined);
    if (s) log.info({ patch: s.session.patchPath }, "session ended");
    process.exit(failed ? 2 : exitCode);
  };

  process.stdin.on("end", () => void stop("stdin closed", 0));
  process.stdin.on("close", () => void stop("stdin closed", 0));
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(sig, () => void stop(sig, 0));
  // A closed stdout (the client died) must not crash the server before the patch is saved.
  process.stdout.on("error", () => void stop("stdout closed", 0));

  await server.connect(transport);
  calls.track(transport);
  started.ready.then(
    (s) => {
      session = s;
      log.info(
        { run: s.session.runId, workspace: s.session.paths.workspaceDir, sandbox: s.deps.sandbox.kind, resumed: s.resumed },
        `serving task ${s.deps.task.id} on stdio (run ${s.session.runId})`,
      );
      opts.onReady?.({ runId: s.session.runId, runDir: s.session.runDir, workspace: s.session.paths.workspaceDir });
    },
    (e: unknown) => {
      failed = e instanceof Error ? e : new Error(String(e));
      log.debug({ err: failed.stack }, "the session could not start");
      process.stderr.write(`infradev serve: the session could not start: ${failed.message}\n`);
    },
  );
}
