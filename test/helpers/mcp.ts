/**
 * Helpers for the MCP suites: a real session served to an SDK Client over a linked in-memory
 * transport, on the `none` backend (the isolating backends are exercised by the e2e suite through
 * the CLI).
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { sandboxFactory } from "../../src/server/sandbox-factory.js";
import { silentLogger } from "../../src/lib/logger.js";
import { createServer } from "../../src/server/create-server.js";
import { openSession, type Session, type SandboxRequest } from "../../src/server/session.js";

export const PYTHON = process.env.INFRADEV_PYTHON ?? "/usr/bin/python3";

/** The real `none` backend (plain host processes): enough to test the tools' logic fast. */
export const noneSandboxFactory = (req: SandboxRequest) => sandboxFactory({ ...req, kind: "none" });

export interface InMemorySession {
  client: Client;
  session: Session;
  runsDir: string;
  close(): Promise<void>;
}

/** A real session (run folder, workspace, base checkout) served to an SDK Client in memory. */
export async function openInMemorySession(opts: { taskId: string; tasksRoot?: string; runsDir?: string; resume?: string }): Promise<InMemorySession> {
  const runsDir = opts.runsDir ?? mkdtempSync(join(tmpdir(), "infradev-mcp-runs-"));
  mkdirSync(runsDir, { recursive: true });
  const session = await openSession({
    taskId: opts.taskId,
    tasksRoot: opts.tasksRoot,
    runsDir,
    resume: opts.resume,
    sandboxKind: "none",
    logger: silentLogger(),
    createSandbox: noneSandboxFactory,
  });
  const server = createServer(session.deps);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: "infradev-test", version: "0" });
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  return {
    client,
    session,
    runsDir,
    async close() {
      await client.close();
      await session.finish("test end");
      await server.close();
      if (!opts.runsDir) {
        rmSync(runsDir, { recursive: true, force: true });
      }
    },
  };
}
