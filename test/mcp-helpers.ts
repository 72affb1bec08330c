/**
 * Helpers for the MCP suites: a plain-process stand-in sandbox for fast in-memory tool tests (the
 * real backends are exercised by the e2e suite through the CLI), and a linked in-memory client.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { silentLogger } from "../lib/logger.js";
import { pythonHelpersDir } from "../lib/paths.js";
import type { ExecOptions, ExecResult, Sandbox } from "../sandbox/types.js";
import { createServer } from "../server/create-server.js";
import { openSession, type Session, type SandboxRequest } from "../server/session.js";

export const PYTHON = process.env.INFRADEV_PYTHON ?? "/usr/bin/python3";

function cap(text: string, max: number): { text: string; cut: boolean } {
  if (Buffer.byteLength(text) <= max) return { text, cut: false };
  const half = Math.floor(max / 2);
  return { text: `${text.slice(0, half)}\n[... cut ...]\n${text.slice(-half)}`, cut: true };
}

/** Runs commands as plain host processes (kind "none"): enough to test the tools' logic. */
export class PlainSandbox implements Sandbox {
  readonly kind = "none" as const;
  readonly pythonHelpersDir = pythonHelpersDir();
  readonly python = PYTHON;
  private readonly live = new Set<number>();

  constructor(
    readonly hostRepoDir: string,
    private readonly extraEnv: Record<string, string> = {},
  ) {}

  get repoDir(): string {
    return this.hostRepoDir;
  }

  toHostPath(sandboxPath: string): string {
    const rel = posix.relative(this.repoDir, posix.resolve(this.repoDir, sandboxPath));
    if (rel.startsWith("..")) throw new Error(`${sandboxPath} is outside ${this.repoDir}`);
    return posix.join(this.hostRepoDir, rel);
  }

  exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    const started = Date.now();
    return new Promise((resolvePromise) => {
      const child = spawn(argv[0]!, argv.slice(1), {
        cwd: opts.cwd ? posix.resolve(this.repoDir, opts.cwd) : this.repoDir,
        env: { ...process.env, ...this.extraEnv, ...(opts.env ?? {}) },
        detached: true,
        stdio: ["ignore", "pipe", "pipe"],
      });
      if (child.pid) this.live.add(child.pid);
      let stdout = "";
      let stderr = "";
      let timedOut = false;
      let cancelled = false;
      const killTree = () => {
        try {
          if (child.pid) process.kill(-child.pid, "SIGKILL");
        } catch {
          // already gone
        }
      };
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const timer = opts.timeoutSec ? setTimeout(() => ((timedOut = true), killTree()), opts.timeoutSec * 1000) : undefined;
      const onAbort = () => ((cancelled = true), killTree());
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      child.on("error", (e) => {
        clearTimeout(timer);
        resolvePromise({ exitCode: null, signal: null, timedOut, cancelled, stdout, stderr, truncated: false, durationMs: Date.now() - started, isolated: false, harnessError: e.message });
      });
      child.on("close", (code, signal) => {
        clearTimeout(timer);
        opts.signal?.removeEventListener("abort", onAbort);
        if (child.pid) this.live.delete(child.pid);
        killTree();
        const max = opts.maxOutputBytes ?? 1024 * 1024;
        const o = cap(stdout, max);
        const e = cap(stderr, max);
        resolvePromise({ exitCode: code, signal, timedOut, cancelled, stdout: o.text, stderr: e.text, truncated: o.cut || e.cut, durationMs: Date.now() - started, isolated: false });
      });
    });
  }

  async close(): Promise<void> {
    for (const pid of this.live) {
      try {
        process.kill(-pid, "SIGKILL");
      } catch {
        // gone
      }
    }
  }
}

export const plainSandboxFactory = async (req: SandboxRequest): Promise<Sandbox> => new PlainSandbox(req.hostRepoDir);

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
    createSandbox: plainSandboxFactory,
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
        rmSync(`${runsDir}-base`, { recursive: true, force: true });
      }
    },
  };
}
