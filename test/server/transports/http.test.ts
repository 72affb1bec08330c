/**
 * `infradev serve --http`: the real CLI spawned as a process, driven by the SDK's Client over
 * StreamableHTTPClientTransport, on the `local` (bubblewrap) sandbox. What the security standard
 * asks: loopback only, a bearer token on every request, Host / Origin checked; and the same session
 * semantics as stdio (tools, progress, patch.diff on SIGTERM).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult, Progress } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledTasksDir, packageRoot } from "../../../src/lib/paths.js";
import { TOOL_NAMES } from "../../../src/tools/index.js";
import { ensureBuilt } from "../../helpers/backends.js";
import { captureLateProgress } from "../../helpers/late-progress.js";

const ROOT = packageRoot();
const CLI = join(ROOT, "dist", "cli", "main.js");
const TASK = "grad-bucketing";
const START_LINE = /^infradev serve: MCP on (http:\/\/\S+) \(task \S+, run (\S+)\); bearer token (?:in (\S+)|: (\S+))$/m;

type Result = CallToolResult & { structuredContent?: Record<string, any> };

interface Served {
  child: ChildProcess;
  stderr: () => string;
  url: string;
  runDir: string;
  tokenWhere: string;
}

/** Spawns `serve --http` and waits for its start-up line. */
async function serveHttp(runsDir: string, extra: string[], env: Record<string, string> = {}): Promise<Served> {
  const child = spawn(process.execPath, [CLI, "serve", "--task", TASK, "--runs-dir", runsDir, "--http", ...extra], {
    cwd: ROOT,
    env: { ...process.env, INFRADEV_LOG_LEVEL: "info", INFRADEV_HTTP_TOKEN: "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
  const m = await new Promise<RegExpExecArray>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no start-up line in 60 s:\n${err}`)), 60_000);
    const check = () => {
      const hit = START_LINE.exec(err);
      if (hit) {
        clearTimeout(timer);
        resolve(hit);
      }
    };
    child.stderr!.on("data", check);
    child.on("exit", (code) => reject(new Error(`serve exited (${code}) before it was ready:\n${err}`)));
  });
  return { child, stderr: () => err, url: m[1]!, runDir: join(runsDir, m[2]!), tokenWhere: m[3] ?? m[4]! };
}

async function connectClient(url: string, token: string | null, sessionId?: string): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    sessionId,
    requestInit: token === null ? {} : { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: "infradev-http-test", version: "0" });
  await client.connect(transport);
  return { client, transport };
}

/** A raw request through node:http, so Host and Origin can be set (fetch forbids Host). */
function rawPost(url: string, headers: Record<string, string>, body: unknown): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: "POST", headers: { "content-type": "application/json", accept: "application/json, text/event-stream", ...headers } }, (res) => {
      let text = "";
      res.on("data", (d: Buffer) => (text += d.toString()));
      res.on("end", () => resolve({ status: res.statusCode!, body: text }));
    });
    req.on("error", reject);
    req.end(JSON.stringify(body));
  });
}

const INITIALIZE = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } } };

/** Every TCP socket listening on `port` here (both families), as "address" strings. */
function listenersOn(port: number): string[] {
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  const out: string[] = [];
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(file)) continue;
    for (const line of readFileSync(file, "utf8").trim().split("\n").slice(1)) {
      const [, local, , state] = line.trim().split(/\s+/);
      const [addr, p] = local!.split(":");
      if (p !== hexPort || state !== "0A") continue;
      // /proc prints each 32-bit word little-endian.
      const words = addr!.match(/.{8}/g)!.map((w) => w.match(/../g)!.reverse().join(""));
      out.push(words.length === 1 ? words[0]!.match(/../g)!.map((b) => parseInt(b, 16)).join(".") : words.join(":").toLowerCase());
    }
  }
  return out;
}

const isLoopback = (a: string) => a.startsWith("127.") || a === "00000000:00000000:00000000:00000001" || /^00000000:00000000:0000ffff:7f/.test(a);

function waitExit(child: ChildProcess, ms: number): Promise<number | null> {
  return new Promise((resolve, reject) => {
    if (child.exitCode !== null) return resolve(child.exitCode);
    const timer = setTimeout(() => reject(new Error(`serve did not exit within ${ms} ms`)), ms);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

beforeAll(() => {
  ensureBuilt();
}, 300_000);

describe("infradev serve --http --sandbox local", () => {
  let runsDir: string;
  let s: Served;
  let token: string;
  let client: Client;
  let transport: StreamableHTTPClientTransport;

  beforeAll(async () => {
    runsDir = mkdtempSync(join(tmpdir(), "infradev-http-"));
    s = await serveHttp(runsDir, ["--sandbox", "local", "--port", "0"]);
    token = readFileSync(s.tokenWhere, "utf8").trim();
    ({ client, transport } = await connectClient(s.url, token));
  }, 120_000);
  afterAll(async () => {
    await client?.close().catch(() => undefined);
    if (s?.child.exitCode === null) s.child.kill("SIGKILL");
    rmSync(runsDir, { recursive: true, force: true });
  });

  it("prints one start-up line: the loopback URL and the token file (0600), never the token", () => {
    expect(s.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/mcp$/);
    expect(s.tokenWhere).toBe(join(s.runDir, "http-token"));
    expect(statSync(s.tokenWhere).mode & 0o777).toBe(0o600);
    expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/); // 32 random bytes, base64url
    expect(s.stderr()).not.toContain(token);
    expect(s.stderr().split("\n").filter((l) => l.startsWith("infradev serve:"))).toHaveLength(1);
  });

  it("listens on loopback only", async () => {
    const port = Number(new URL(s.url).port);
    const listeners = listenersOn(port);
    expect(listeners.length).toBeGreaterThan(0);
    for (const a of listeners) expect(isLoopback(a), a).toBe(true);
    const external = Object.values(networkInterfaces())
      .flat()
      .find((i) => i && i.family === "IPv4" && !i.internal);
    if (external) {
      const reached = await new Promise<boolean>((resolve) => {
        const sock = connect({ host: external.address, port, timeout: 3000 }, () => (sock.destroy(), resolve(true)));
        sock.on("error", () => resolve(false));
        sock.on("timeout", () => (sock.destroy(), resolve(false)));
      });
      expect(reached, `${external.address}:${port}`).toBe(false);
    }
  });

  it("lists the tools and calls get_task and run_shell with the token", async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
    const task = (await client.callTool({ name: "get_task", arguments: {} })) as Result;
    expect(task.structuredContent!.prompt).toBe(readFileSync(join(bundledTasksDir(), TASK, "prompt.md"), "utf8"));
    expect(task.structuredContent!.sandbox).toBe("local");
    const sh = (await client.callTool({ name: "run_shell", arguments: { command: "echo http-ok && echo '# edited over http' >> nanoinfra/__init__.py" } })) as Result;
    expect(sh.structuredContent).toMatchObject({ exit_code: 0 });
    expect(sh.structuredContent!.stdout).toContain("http-ok");
  });

  it("pytest_run's progress notifications reach the client", async () => {
    const progress: Progress[] = [];
    const lateProgress = captureLateProgress(client);
    const r = (await client.callTool(
      { name: "pytest_run", arguments: { paths: ["tests/test_config.py"], ranks: 1 } },
      undefined,
      { timeout: 120_000, onprogress: (p) => progress.push(p) },
    )) as Result;
    progress.push(...lateProgress.splice(0));
    expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
    const { total, passed } = r.structuredContent!.summary;
    expect(total).toBeGreaterThan(0);
    expect(passed).toBe(total);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)).toMatchObject({ progress: total, total });
  });

  it("a client reconnects with its session id; DELETE ends the session", async () => {
    const again = await connectClient(s.url, token, transport.sessionId);
    const r = (await again.client.callTool({ name: "get_task", arguments: {} })) as Result;
    expect(r.structuredContent!.task_id).toBe(TASK);
    const other = await connectClient(s.url, token);
    expect(other.transport.sessionId).not.toBe(transport.sessionId);
    await other.transport.terminateSession();
    const gone = await rawPost(s.url, { authorization: `Bearer ${token}`, "mcp-session-id": other.transport.sessionId ?? "x" }, { jsonrpc: "2.0", id: 2, method: "tools/list" });
    expect(gone.status).toBe(404);
    await again.client.close();
  });

  it("a call whose connection drops midway still gets its result: the client resumes with Last-Event-ID", async () => {
    // A real TCP proxy between client and server that the test severs while run_shell sleeps.
    const target = new URL(s.url);
    const live = new Set<Socket>();
    const proxy = createNetServer((inbound) => {
      const outbound = connect({ host: target.hostname, port: Number(target.port) });
      for (const sock of [inbound, outbound]) {
        live.add(sock);
        sock.on("close", () => live.delete(sock));
        sock.on("error", () => undefined);
      }
      inbound.pipe(outbound).pipe(inbound);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    const port = (proxy.address() as AddressInfo).port;
    const via = await connectClient(`http://127.0.0.1:${port}${target.pathname}`, token);
    const errors: string[] = [];
    via.client.onerror = (e) => errors.push(e.message);
    try {
      const call = via.client.callTool(
        { name: "run_shell", arguments: { command: "sleep 3; echo after-the-drop" } },
        undefined,
        { timeout: 60_000 },
      ) as Promise<Result>;
      await new Promise((r) => setTimeout(r, 1000));
      const severed = live.size;
      for (const sock of live) sock.destroy();
      const r = await call;
      expect(severed).toBeGreaterThan(0);
      expect(errors.join("\n")).toMatch(/SSE stream disconnected/);
      expect(r.isError, JSON.stringify(r.content)).toBeFalsy();
      expect(r.structuredContent).toMatchObject({ exit_code: 0 });
      expect(r.structuredContent!.stdout).toContain("after-the-drop");
    } finally {
      await via.client.close().catch(() => undefined);
      for (const sock of live) sock.destroy();
      await new Promise((r) => proxy.close(r));
    }
  });

  it("without a token, or with a wrong one: 401, a JSON-RPC error, and no tool runs", async () => {
    const marker = "unauthorized-marker";
    const call = { jsonrpc: "2.0", id: 7, method: "tools/call", params: { name: "run_shell", arguments: { command: `touch ${marker}` } } };
    const sid = { "mcp-session-id": transport.sessionId!, "mcp-protocol-version": "2025-06-18" };
    for (const auth of [{}, { authorization: "Bearer wrong-token-wrong-token-wrong" }, { authorization: `Bearer ${token}x` }, { authorization: token }]) {
      const r = await rawPost(s.url, { ...sid, ...auth }, call);
      expect(r.status, JSON.stringify(auth)).toBe(401);
      expect(JSON.parse(r.body)).toMatchObject({ jsonrpc: "2.0", error: { code: -32001 }, id: null });
    }
    expect((await rawPost(s.url, {}, INITIALIZE)).status).toBe(401);
    await expect(connectClient(s.url, "not-the-token-not-the-token")).rejects.toThrow(/401|Unauthorized/i);
    expect(existsSync(join(s.runDir, "workspace", marker))).toBe(false);
    expect(readFileSync(join(s.runDir, "trace.jsonl"), "utf8")).not.toContain(marker);
  });

  it("rejects a foreign Host (DNS rebinding) and a foreign Origin, even with the token", async () => {
    const port = new URL(s.url).port;
    const auth = { authorization: `Bearer ${token}` };
    for (const host of [`evil.example:${port}`, `127.0.0.1.evil.example:${port}`, `evil.example@127.0.0.1:${port}`]) {
      const r = await rawPost(s.url, { ...auth, host }, INITIALIZE);
      expect(r.status, host).toBe(403);
    }
    expect((await rawPost(s.url, { ...auth, origin: "https://evil.example" }, INITIALIZE)).status).toBe(403);
    expect((await rawPost(s.url, { ...auth, origin: `http://localhost:${Number(port) + 1}` }, INITIALIZE)).status).toBe(403);
    // This server's own names pass.
    expect((await rawPost(s.url, { ...auth, host: `localhost:${port}`, origin: `http://localhost:${port}` }, INITIALIZE)).status).toBe(200);
  });

  it("SIGTERM writes patch.diff and ends the trace with session_end", async () => {
    s.child.kill("SIGTERM");
    expect(await waitExit(s.child, 30_000)).toBe(0);
    expect(readFileSync(join(s.runDir, "patch.diff"), "utf8")).toContain("+# edited over http");
    const last = JSON.parse(readFileSync(join(s.runDir, "trace.jsonl"), "utf8").trim().split("\n").at(-1)!);
    expect(last).toMatchObject({ event: "session_end", reason: "SIGTERM" });
  });
});

describe("serve --http start-up checks", () => {
  it("refuses a non-loopback --host with a clear error, before creating a run", () => {
    const runsDir = mkdtempSync(join(tmpdir(), "infradev-http-host-"));
    try {
      for (const host of ["0.0.0.0", "::", "192.168.1.10", "example.com"]) {
        const r = spawnSync(process.execPath, [CLI, "serve", "--task", TASK, "--sandbox", "none", "--runs-dir", runsDir, "--http", "--host", host], {
          encoding: "utf8",
          env: { ...process.env, INFRADEV_LOG_LEVEL: "error" },
          timeout: 30_000,
        });
        expect(r.status, host).toBe(2);
        expect(r.stderr).toContain(`infradev serve: --host ${host}: the HTTP transport binds to loopback only`);
      }
      expect(readdirSync(runsDir)).toEqual([]);
    } finally {
      rmSync(runsDir, { recursive: true, force: true });
    }
  });

  it("--token-file: that token and no other; no token file is written in the run", async () => {
    const runsDir = mkdtempSync(join(tmpdir(), "infradev-http-tokfile-"));
    const file = join(runsDir, "..", `${runsDir.split("/").at(-1)}.token`);
    writeFileSync(file, "my-own-token-0123456789-abcdef\n", { mode: 0o600 });
    const s = await serveHttp(runsDir, ["--sandbox", "none", "--port", "0", "--token-file", file], { INFRADEV_HTTP_TOKEN: "the-env-token-is-not-used-here" });
    try {
      expect(s.tokenWhere).toBe(file);
      expect(existsSync(join(s.runDir, "http-token"))).toBe(false);
      const ok = await connectClient(s.url, "my-own-token-0123456789-abcdef");
      expect((await ok.client.listTools()).tools.length).toBe(TOOL_NAMES.length);
      await ok.client.close();
      expect((await rawPost(s.url, { authorization: "Bearer the-env-token-is-not-used-here" }, INITIALIZE)).status).toBe(401);
    } finally {
      s.child.kill("SIGTERM");
      await waitExit(s.child, 30_000).catch(() => s.child.kill("SIGKILL"));
      rmSync(runsDir, { recursive: true, force: true });
      rmSync(file, { force: true });
    }
  }, 60_000);
});
