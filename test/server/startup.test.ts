/**
 * Issue 12 items 7, 12 and 15, for `infradev serve`:
 *   - `initialize` is answered before the session (run folder, workspace, base, sandbox) is built;
 *     tool calls wait for it, and fail with the reason when the build fails (in memory, with a
 *     sandbox factory the test holds back, and through the real CLI with a broken resumed run);
 *   - the serve command loads neither the docker client nor the HTTP stack for a stdio local run;
 *   - `serve --http` without --port listens on 8741 (the port `connect --http` writes), and says
 *     to pass --port to both when it is taken, before any workspace is made;
 *   - `serve --resume <run-id>` without --task reopens the run's own task (its folder recorded).
 */
import { spawn, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer as createNetServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sandboxFactory } from "../../src/server/sandbox-factory.js";
import { silentLogger } from "../../src/lib/logger.js";
import { packageRoot } from "../../src/lib/paths.js";
import type { Sandbox } from "../../src/sandbox/types.js";
import { createServer } from "../../src/server/create-server.js";
import { DEFAULT_HTTP_PORT } from "../../src/server/defaults.js";
import { startSession, type SandboxRequest } from "../../src/server/session.js";
import { ensureBuilt } from "../helpers/backends.js";
import { TEST_FIXTURES } from "../helpers/paths.js";

const ROOT = packageRoot();
const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const tmp = mkdtempSync(join(tmpdir(), "infradev-serve-startup-"));
let cli: string;
beforeAll(() => {
  cli = ensureBuilt();
}, 300_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const text = (r: CallToolResult) => (r.content[0] as { text: string }).text;

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void; reject: (e: unknown) => void } {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => ((resolve = res), (reject = rej)));
  promise.catch(() => undefined); // rejected before anyone awaits it
  return { promise, resolve, reject };
}

/** A session whose sandbox the test hands over (or refuses) when it wants, served in memory. */
async function heldSession(runsDir: string) {
  const gate = deferred<void>();
  let asked = false;
  const started = startSession({
    taskId: "grad-bucketing",
    runsDir,
    sandboxKind: "none",
    logger: silentLogger(),
    createSandbox: async (req: SandboxRequest): Promise<Sandbox> => {
      asked = true;
      await gate.promise;
      return sandboxFactory({ ...req, kind: "none" });
    },
  });
  const server = createServer(started.deps, { sandboxKind: "none" });
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const client = new Client({ name: "startup-test", version: "0" });
  await Promise.all([server.connect(serverSide), client.connect(clientSide)]);
  return { started, client, server, gate, asked: () => asked };
}

describe("initialize before the session is built", () => {
  it("answers initialize (instructions, tools) while the sandbox is not there; a tool call waits for it", async () => {
    const runsDir = join(tmp, "held");
    mkdirSync(runsDir);
    const s = await heldSession(runsDir);
    try {
      expect(s.client.getServerVersion()?.name).toBe("infradev");
      expect(s.client.getInstructions()).toContain('"grad-bucketing"');
      expect((await s.client.listTools()).tools.map((t) => t.name)).toContain("pytest_run");
      let answered = false;
      const call = s.client.callTool({ name: "run_shell", arguments: { command: "echo built" } }).then((r) => ((answered = true), r as CallToolResult));
      await new Promise((r) => setTimeout(r, 300));
      expect(answered).toBe(false); // waiting for the session
      s.gate.resolve();
      const r = await call;
      expect(r.isError, text(r)).toBeFalsy();
      expect(text(r)).toContain("built");
      const session = await s.started.ready;
      const trace = readFileSync(session.session.tracePath, "utf8");
      expect(trace).toContain('"event":"session_start"');
      expect(trace).toContain('"tool":"run_shell"');
      await session.finish("test end");
    } finally {
      s.gate.resolve();
      await s.client.close();
      await s.server.close();
    }
  }, 60_000);

  it("a build that fails: every tool call says the session could not start, and why", async () => {
    const runsDir = join(tmp, "failed");
    mkdirSync(runsDir);
    const s = await heldSession(runsDir);
    try {
      s.gate.reject(new Error("bwrap: no permission to create a user namespace"));
      await expect(s.started.ready).rejects.toThrow(/user namespace/);
      for (const name of ["get_task", "run_shell"]) {
        const r = (await s.client.callTool({ name, arguments: name === "run_shell" ? { command: "true" } : {} })) as CallToolResult;
        expect(r.isError).toBe(true);
        expect(text(r)).toMatch(new RegExp(`^${name} failed: the session could not start.*bwrap: no permission to create a user namespace`));
      }
      expect(s.asked()).toBe(true);
    } finally {
      await s.client.close();
      await s.server.close();
    }
  }, 60_000);

  it("through the CLI: a resumed run whose workspace is gone answers initialize, then fails its calls with the reason, and exits 2", async () => {
    const runsDir = join(tmp, "broken-runs");
    const runId = "grad-bucketing-20260101-000000-abcdef";
    mkdirSync(join(runsDir, runId), { recursive: true });
    writeFileSync(
      join(runsDir, runId, "session.json"),
      JSON.stringify({ schema_version: 1, run_id: runId, task_id: "grad-bucketing", base_commit: "0".repeat(40), created_at: "x", resumed_at: [], submitted_at: null, note: null, patch_written_at: null }),
    );
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [cli, "serve", "--resume", runId, "--sandbox", "none", "--runs-dir", runsDir],
      env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
      stderr: "pipe",
      cwd: ROOT,
    });
    let stderr = "";
    transport.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
    const client = new Client({ name: "startup-test", version: "0" });
    await client.connect(transport);
    const pid = transport.pid!;
    const exited = new Promise<number | null>((res) => {
      const child = (transport as unknown as { _process?: import("node:child_process").ChildProcess })._process;
      child?.on("exit", (code) => res(code));
    });
    const r = (await client.callTool({ name: "get_task", arguments: {} })) as CallToolResult;
    expect(r.isError).toBe(true);
    expect(text(r)).toMatch(/the session could not start.*workspace .* is missing or not a git repo/);
    expect(stderr).toMatch(/infradev serve: the session could not start: --resume .*: the workspace/);
    await client.close();
    expect(pid).toBeGreaterThan(0);
    expect(await exited).toBe(2);
  }, 60_000);

  it("an unknown run id with no --task fails before anything is served (exit 2, one line)", () => {
    const r = spawnSync(process.execPath, [cli, "serve", "--resume", "no-such-run", "--runs-dir", join(tmp, "empty-runs")], { encoding: "utf8", timeout: 30_000, input: "" });
    expect(r.status).toBe(2);
    expect(r.stderr.trim()).toMatch(/^infradev serve: --resume no-such-run: no run there/);
    expect(r.stdout).toBe("");
  });
});

describe("what serve loads", () => {
  it("a stdio session on the local backend loads neither the docker client nor the HTTP stack", async () => {
    const log = join(tmp, "loaded.txt");
    const hooks = join(tmp, "hooks.mjs");
    writeFileSync(
      hooks,
      `import { appendFileSync } from "node:fs";\nexport async function resolve(spec, ctx, next) { const r = await next(spec, ctx); appendFileSync(${JSON.stringify(log)}, r.url + "\\n"); return r; }\n`,
    );
    const register = join(tmp, "register.mjs");
    writeFileSync(register, `import { register } from "node:module";\nregister(${JSON.stringify(pathToFileURL(hooks).href)});\n`);
    // The serve command alone (what cli/program.ts runs for `serve`), so the test is about serve's own imports.
    const entry = join(tmp, "serve-entry.mjs");
    writeFileSync(
      entry,
      `import { Command } from ${JSON.stringify(pathToFileURL(join(ROOT, "node_modules", "commander", "index.js")).href)};\nimport { registerServeCommands } from ${JSON.stringify(pathToFileURL(join(ROOT, "dist", "cli", "serve.js")).href)};\nconst p = new Command().name("infradev"); registerServeCommands(p); await p.parseAsync(process.argv);\n`,
    );
    const runsDir = join(tmp, "loaded-runs");
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: ["--import", pathToFileURL(register).href, entry, "serve", "--task", "grad-bucketing", "--sandbox", "local", "--runs-dir", runsDir],
      env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
      stderr: "pipe",
      cwd: ROOT,
    });
    const client = new Client({ name: "startup-test", version: "0" });
    await client.connect(transport);
    const r = (await client.callTool({ name: "run_shell", arguments: { command: "true" } })) as CallToolResult;
    expect(r.isError, text(r)).toBeFalsy();
    await client.close();
    const loaded = readFileSync(log, "utf8").split("\n");
    expect(loaded.some((u) => u.endsWith("/dist/sandbox/local/sandbox.js"))).toBe(true); // the hook saw the imports
    expect(loaded.filter((u) => /\/node_modules\/(dockerode|docker-modem|ssh2)\//.test(u))).toEqual([]);
    // docker-spec.js is the --gpus parser of the flags (no engine client); the rest is the docker backend.
    expect(loaded.filter((u) => /\/dist\/sandbox\/docker[^/]*\.js$/.test(u) && !u.endsWith("/docker-spec.js"))).toEqual([]);
    expect(loaded.filter((u) => /\/dist\/server\/http\.js$|streamableHttp/.test(u))).toEqual([]);
  }, 60_000);
});

function listen(port: number): Promise<Server | null> {
  return new Promise((res) => {
    const srv = createNetServer();
    srv.once("error", () => res(null)); // taken already (by someone else): taken is what the test needs
    srv.listen({ host: "127.0.0.1", port, exclusive: true }, () => res(srv));
  });
}

describe("serve --http's default port", () => {
  it(`is ${DEFAULT_HTTP_PORT}, the one connect --http writes; taken, it says so before making a workspace (exit 2)`, async () => {
    const holder = await listen(DEFAULT_HTTP_PORT);
    try {
      const runsDir = join(tmp, "port-runs");
      const r = spawnSync(process.execPath, [cli, "serve", "--task", "grad-bucketing", "--sandbox", "none", "--runs-dir", runsDir, "--http"], {
        encoding: "utf8",
        timeout: 30_000,
        env: { ...process.env, INFRADEV_LOG_LEVEL: "warn", INFRADEV_HTTP_TOKEN: "" },
      });
      expect(r.status).toBe(2);
      expect(r.stderr).toContain(`infradev serve: port ${DEFAULT_HTTP_PORT} is in use: pass --port N to both serve and connect`);
      expect(existsSync(runsDir) ? readdirSync(runsDir) : []).toEqual([]);
    } finally {
      holder?.close();
    }
    // Free again: serve listens there.
    const runsDir = join(tmp, "port-runs-free");
    const child = spawn(process.execPath, [cli, "serve", "--task", "grad-bucketing", "--sandbox", "none", "--runs-dir", runsDir, "--http"], {
      env: { ...process.env, INFRADEV_LOG_LEVEL: "warn", INFRADEV_HTTP_TOKEN: "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    try {
      const line = await new Promise<string>((res, rej) => {
        let err = "";
        const timer = setTimeout(() => rej(new Error(`no start-up line:\n${err}`)), 30_000);
        child.stderr!.on("data", (d: Buffer) => {
          err += d.toString();
          const m = /^infradev serve: MCP on (\S+)/m.exec(err);
          if (m) {
            clearTimeout(timer);
            res(m[1]!);
          }
        });
        child.on("exit", (code) => rej(new Error(`serve exited (${code}):\n${err}`)));
      });
      expect(line).toBe(`http://127.0.0.1:${DEFAULT_HTTP_PORT}/mcp`);
    } finally {
      const gone = new Promise((res) => child.on("exit", res));
      child.kill("SIGTERM");
      await gone;
    }
  }, 60_000);
});

describe("a task this machine cannot run", () => {
  it("is refused before a run is made (exit 2, the reason); with --python naming one that exists it is served", async () => {
    const tasksDir = join(tmp, "unrunnable-tasks");
    cpSync(join(FIXTURES, "tiny-mean"), join(tasksDir, "tiny-mean"), { recursive: true });
    const yaml = join(tasksDir, "tiny-mean", "task.yaml");
    writeFileSync(yaml, `${readFileSync(yaml, "utf8")}env: { python: /nonexistent/bin/python3 }\n`);
    const runsDir = join(tmp, "unrunnable-runs");
    const env = { ...process.env, INFRADEV_LOG_LEVEL: "warn" };
    delete env.INFRADEV_PYTHON; // the interpreter rule would take it over task.yaml's
    const r = spawnSync(process.execPath, [cli, "serve", "--task", "tiny-mean", "--tasks-dir", tasksDir, "--sandbox", "none", "--runs-dir", runsDir], { encoding: "utf8", timeout: 30_000, input: "", env });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^infradev serve: task tiny-mean cannot run on this machine: needs the Python interpreter \/nonexistent\/bin\/python3, which is missing here.*--skip-runnable-check/m);
    expect(r.stdout).toBe("");
    expect(existsSync(runsDir) ? readdirSync(runsDir) : []).toEqual([]);
    // --python names one that exists: runnable, served.
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [cli, "serve", "--task", "tiny-mean", "--tasks-dir", tasksDir, "--sandbox", "none", "--runs-dir", runsDir, "--python", "/usr/bin/python3"],
      env: env as Record<string, string>,
      stderr: "pipe",
    });
    const client = new Client({ name: "startup-test", version: "0" });
    await client.connect(transport);
    const shell = (await client.callTool({ name: "run_shell", arguments: { command: "true" } })) as CallToolResult;
    expect(shell.isError, text(shell)).toBeFalsy();
    await client.close();
  }, 60_000);
});

describe("serve --resume without --task", () => {
  it("reopens the run's own task, from the folder recorded at creation (a --tasks-dir task too)", async () => {
    const runsDir = join(tmp, "resume-runs");
    const open = async (args: string[]) => {
      const transport = new StdioClientTransport({
        command: process.execPath,
        args: [cli, "serve", "--sandbox", "none", "--runs-dir", runsDir, ...args],
        env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
        stderr: "pipe",
        cwd: ROOT,
      });
      const client = new Client({ name: "startup-test", version: "0" });
      await client.connect(transport);
      return client;
    };
    const first = await open(["--task", "tiny-mean", "--tasks-dir", FIXTURES]);
    const task1 = (await first.callTool({ name: "get_task", arguments: {} })) as CallToolResult & { structuredContent?: Record<string, any> };
    await first.callTool({ name: "run_shell", arguments: { command: "echo resumed-marker > marker.txt" } });
    await first.close();
    await new Promise((r) => setTimeout(r, 500));
    const [runId] = readdirSync(runsDir);
    expect(JSON.parse(readFileSync(join(runsDir, runId!, "session.json"), "utf8")).task_dir).toBe(join(FIXTURES, "tiny-mean"));

    const again = await open(["--resume", runId!]); // neither --task nor --tasks-dir
    const task2 = (await again.callTool({ name: "get_task", arguments: {} })) as CallToolResult & { structuredContent?: Record<string, any> };
    expect(task2.isError, text(task2)).toBeFalsy();
    expect(task2.structuredContent?.id ?? text(task2)).toEqual(task1.structuredContent?.id ?? text(task1));
    const cat = (await again.callTool({ name: "run_shell", arguments: { command: "cat marker.txt" } })) as CallToolResult;
    expect(text(cat)).toContain("resumed-marker");
    await again.close();
    await new Promise((r) => setTimeout(r, 500));
    const trace = readFileSync(join(runsDir, runId!, "trace.jsonl"), "utf8");
    expect(trace).toContain('"event":"session_resume"');
  }, 90_000);

  it("neither --task nor --resume: one clear line, exit 2", () => {
    const r = spawnSync(process.execPath, [cli, "serve", "--runs-dir", join(tmp, "x")], { encoding: "utf8", timeout: 30_000, input: "" });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--task <id> is required \(or --resume <run-id>/);
  });
});
