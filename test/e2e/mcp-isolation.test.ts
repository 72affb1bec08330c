/**
 * End to end: the real CLI (`node dist/cli/main.js serve --task grad-bucketing --sandbox <backend>`)
 * spawned over stdio and driven by the SDK's Client, on real ranks. Parameterised over sandbox
 * backends (test/helpers/backends.ts): INFRADEV_E2E_SANDBOXES=local,docker; by default local, plus
 * docker when an engine answers or INFRADEV_REQUIRE_DOCKER=1 (docker runs the local test image).
 *
 * The golden patch is read here, by the test, straight from the task folder on the host; the
 * server never opens hidden/ (and the sandbox cannot: that is tested below through the tools).
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult, Progress } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bundledTasksDir, packageRoot } from "../../src/lib/paths.js";
import { TOOL_NAMES } from "../../src/tools/index.js";
import { captureLateProgress } from "../helpers/late-progress.js";
import { SANDBOX_BACKENDS, backendCliFlags, ensureBuilt, prepareBackend, type Backend } from "../helpers/backends.js";

const ROOT = packageRoot();
const CLI = join(ROOT, "dist", "cli", "main.js");
const TASK = "grad-bucketing";
const TASK_DIR = join(bundledTasksDir(), TASK);
const GOLDEN = join(TASK_DIR, "hidden", "golden.patch");
const BACKENDS = SANDBOX_BACKENDS;
const LONG = { timeout: 600_000 };

type Result = CallToolResult & { structuredContent?: Record<string, any> };
const text = (r: CallToolResult) => (r.content[0] as { text: string }).text;

beforeAll(() => {
  // The e2e drives the built CLI: build if dist/ is missing or older than the sources we test.
  ensureBuilt();
}, 300_000);

interface Served {
  client: Client;
  transport: StdioClientTransport;
  stderr: string[];
  /** Progress the SDK client read together with its response and did not deliver (see the helper). */
  lateProgress: Progress[];
  call(name: string, args?: Record<string, unknown>, onprogress?: (p: Progress) => void): Promise<Result>;
}

async function serve(backend: Backend, runsDir: string, extra: string[] = []): Promise<Served> {
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, "serve", "--task", TASK, "--sandbox", backend, ...backendCliFlags(backend), "--runs-dir", runsDir, ...extra],
    env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "info" },
    stderr: "pipe",
    cwd: ROOT,
  });
  const stderr: string[] = [];
  transport.stderr?.on("data", (d: Buffer) => stderr.push(d.toString()));
  const client = new Client({ name: "infradev-e2e", version: "0" });
  const lateProgress = captureLateProgress(client);
  await client.connect(transport);
  return {
    client,
    transport,
    stderr,
    lateProgress,
    call: async (name, args = {}, onprogress) => (await client.callTool({ name, arguments: args }, undefined, { ...LONG, ...(onprogress ? { onprogress } : {}) })) as Result,
  };
}

function onlyRun(runsDir: string): string {
  const runs = readdirSync(runsDir);
  expect(runs).toHaveLength(1);
  return join(runsDir, runs[0]!);
}

function waitExit(pid: number, ms: number): Promise<boolean> {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const tick = () => {
      try {
        process.kill(pid, 0);
      } catch {
        return resolve(true);
      }
      if (Date.now() - t0 > ms) return resolve(false);
      setTimeout(tick, 100);
    };
    tick();
  });
}

describe.each(BACKENDS)("infradev serve --sandbox %s (grad-bucketing)", (backend) => {
  let runsDir: string;
  let s: Served;
  let workspace: string; // as the sandbox sees it

  beforeAll(async () => {
    await prepareBackend(backend);
    runsDir = mkdtempSync(join(tmpdir(), `infradev-e2e-${backend}-`));
    s = await serve(backend, runsDir);
  }, 120_000);
  afterAll(async () => {
    await s?.client.close();
    if (runsDir) rmSync(runsDir, { recursive: true, force: true });
  });

  it("lists every tool with annotations and an output schema", async () => {
    const { tools } = await s.client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual([...TOOL_NAMES].sort());
    for (const t of tools) {
      expect(t.annotations).toBeDefined();
      expect(t.outputSchema?.type).toBe("object");
    }
  });

  it("get_task returns the prompt", async () => {
    const r = await s.call("get_task");
    expect(r.structuredContent!.prompt).toBe(readFileSync(join(TASK_DIR, "prompt.md"), "utf8"));
    expect(r.structuredContent!.sandbox).toBe(backend);
    workspace = r.structuredContent!.workspace;
  });

  it("pytest_collect on base reports the collected count", async () => {
    const r = await s.call("pytest_collect");
    expect(r.isError, text(r)).toBeFalsy();
    expect(r.structuredContent).toMatchObject({ ok: true, collected: 12, errors: [] });
  });

  it("pytest_run runs 2 real ranks, with per-rank resources and progress", async () => {
    const progress: Progress[] = [];
    const r = await s.call("pytest_run", { ranks: 2 }, (p) => progress.push(p));
    progress.push(...s.lateProgress.splice(0));
    expect(r.isError, text(r)).toBeFalsy();
    const out = r.structuredContent!;
    expect(out).toMatchObject({ status: "ok", ranks: 2, summary: { total: 12, passed: 12, failed: 0, error: 0 } });
    const sync = out.tests.find((t: { id: string }) => t.id === "tests/test_parallel.py::test_sync_gradients_makes_grads_identical");
    expect(sync.resources.map((x: { rank: number }) => x.rank)).toEqual([0, 1]);
    expect(sync.resources[1].calls.all_reduce).toBeGreaterThan(0);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)).toMatchObject({ progress: 12, total: 12 });
  });

  it("measure reports non-zero all_reduce bytes on every rank", async () => {
    const r = await s.call("measure", { tests: ["tests/test_trainer.py"] });
    expect(r.isError, text(r)).toBeFalsy();
    const after = r.structuredContent!.after;
    expect(after.ok).toBe(true);
    expect(after.per_rank).toHaveLength(2);
    for (const rank of after.per_rank) expect(rank.bytes.all_reduce).toBeGreaterThan(0);
  });

  it("find_callers finds the call sites of the gradient-sync method", async () => {
    const r = await s.call("find_callers", { symbol: "nanoinfra.parallel.DataParallel.sync_gradients" });
    const sites = r.structuredContent!.callers.map((c: { file: string; line: number; text: string }) => `${c.file}: ${c.text}`);
    expect(sites).toContain("nanoinfra/trainer.py: self.model.sync_gradients()");
    expect(sites).toContain("tests/test_parallel.py: model.sync_gradients()");
  });

  describe("isolation, through run_shell", () => {
    const hiddenFiles = () => {
      const files = execFileSync("find", [join(TASK_DIR, "hidden"), "-type", "f"], { encoding: "utf8" }).trim().split("\n");
      return [...new Set([...files, ...files.map((f) => realpathSync(f))])];
    };

    it("cannot read any file of the task's hidden/ folder, by absolute path or relative escape", async () => {
      const golden = readFileSync(GOLDEN, "utf8");
      const marker = golden.split("\n").find((l) => l.startsWith("+") && l.length > 20 && !l.startsWith("+++"))!;
      const rel = GOLDEN.replace(/^\//, "");
      const targets = [
        ...hiddenFiles(),
        `../${rel}`,
        `../../../../../../../../${rel}`,
        `/opt/infradev/python/../../../${rel}`,
        "../tasks/grad-bucketing/hidden/golden.patch",
        "/workspace/../tasks/grad-bucketing/hidden/golden.patch",
      ];
      // One call tries them all: READ marks a path the sandbox could open.
      const loop = `for f in ${targets.map((t) => JSON.stringify(t)).join(" ")}; do cat -- "$f" >/dev/null 2>&1 && echo "READ $f"; cat -- "$f" 2>/dev/null; done; exit 0`;
      const r = await s.call("run_shell", { command: loop, timeout_sec: 120 });
      expect(r.structuredContent!.exit_code).toBe(0);
      expect(r.structuredContent!.stdout).not.toContain("READ ");
      expect(r.structuredContent!.stdout).not.toContain(marker);
      const listings = await s.call("run_shell", {
        command:
          `ls -la ${JSON.stringify(TASK_DIR)} ${JSON.stringify(bundledTasksDir())} ${JSON.stringify(join(ROOT, "tasks"))} ${JSON.stringify(runsDir)} 2>/dev/null; ` +
          "find / \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o -name golden.patch -print 2>/dev/null | head; exit 0",
        timeout_sec: 120,
      });
      expect(listings.structuredContent!.stdout).not.toMatch(/golden\.patch|prompt\.md|session\.json|task\.yaml/);
    });

    it("cannot write outside the workspace; the base checkout is read-only", async () => {
      const base = (await s.call("get_task")).structuredContent!.base_checkout as string;
      const outside = [join(ROOT, "escape-probe"), "/etc/escape-probe", `${base}/escape-probe`, join(runsDir, "escape-probe")];
      for (const p of outside) {
        const r = await s.call("run_shell", { command: `echo x > ${JSON.stringify(p)}` });
        expect(r.structuredContent!.exit_code, p).not.toBe(0);
      }
      const tmp = await s.call("run_shell", { command: "echo x > /tmp/escape-probe && cat /tmp/escape-probe" });
      expect(tmp.structuredContent!.exit_code).toBe(0);
      for (const p of [...outside, "/tmp/escape-probe"]) {
        if (p.startsWith(base)) continue; // checked through the link below
        expect(existsSync(p), p).toBe(false);
      }
      expect(existsSync(join(onlyRun(runsDir), "base", "escape-probe"))).toBe(false);
      const inside = await s.call("run_shell", { command: "echo ok > inside-probe && cat inside-probe && rm inside-probe" });
      expect(inside.structuredContent!.stdout).toBe("ok\n");
    });

    it("has no network but loopback", async () => {
      const net = await s.call("run_shell", {
        command: "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\"",
        timeout_sec: 30,
      });
      expect(net.structuredContent!.exit_code).not.toBe(0);
      const lo = await s.call("run_shell", {
        command:
          "python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); c=socket.create_connection(s.getsockname()); a,_=s.accept(); c.sendall(b'hi'); print(a.recv(2).decode())\"",
        timeout_sec: 30,
      });
      expect(lo.structuredContent!.stdout.trim()).toBe("hi");
    });

    it("sleep 1000 with timeout_sec 2 times out and leaves no process", async () => {
      const t0 = Date.now();
      const r = await s.call("run_shell", { command: "sleep 1017.25 & sleep 1017.5; wait", timeout_sec: 2 });
      expect(r.isError).toBe(true);
      expect(r.structuredContent).toMatchObject({ timed_out: true });
      expect(Date.now() - t0).toBeLessThan(15_000);
      await new Promise((res) => setTimeout(res, 500));
      expect(spawnSync("pgrep", ["-f", "sleep 1017"]).status, "a sleep survived").toBe(1);
    });
  });

  it("after the golden patch, measure with compare_with_base shows fewer all_reduce calls than base", async () => {
    const ws = join(onlyRun(runsDir), "workspace");
    execFileSync("git", ["apply", GOLDEN], { cwd: ws });
    const collect = await s.call("pytest_collect");
    expect(collect.structuredContent!.ok).toBe(true);
    const r = await s.call("measure", { tests: ["tests/test_trainer.py"], compare_with_base: true });
    expect(r.isError, text(r)).toBeFalsy();
    const { after, before, ratios } = r.structuredContent!;
    expect(after.ok && before.ok, text(r)).toBe(true);
    expect(after.max_over_ranks.calls.all_reduce).toBeLessThan(before.max_over_ranks.calls.all_reduce);
    const row = ratios.find((x: { metric: string }) => x.metric === "calls.all_reduce");
    expect(row.ratio).toBeLessThan(1);
    const diff = await s.call("get_diff");
    expect(diff.structuredContent!.files.map((f: { path: string }) => f.path)).toContain("nanoinfra/bucketing.py");
  });

  it("SIGTERM mid-session leaves patch.diff and trace.jsonl; --resume continues in the same workspace", async () => {
    const dir = mkdtempSync(join(tmpdir(), `infradev-e2e-term-${backend}-`));
    try {
      const first = await serve(backend, dir);
      await first.call("run_shell", { command: "echo '# resumed-edit' >> nanoinfra/config.py" });
      const pending = first.call("run_shell", { command: "sleep 60", timeout_sec: 120 }).catch((e: unknown) => e);
      await new Promise((res) => setTimeout(res, 500));
      const pid = first.transport.pid!;
      process.kill(pid, "SIGTERM");
      expect(await waitExit(pid, 30_000), "server did not exit after SIGTERM").toBe(true);
      await pending;
      const run = onlyRun(dir);
      expect(readFileSync(join(run, "patch.diff"), "utf8")).toContain("+# resumed-edit");
      const trace = readFileSync(join(run, "trace.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
      expect(trace.at(-1)).toMatchObject({ event: "session_end", reason: "SIGTERM", patch: { files_changed: 1 } });
      expect(trace.some((l) => l.tool === "run_shell")).toBe(true);
      await first.client.close().catch(() => undefined);

      const runId = run.split("/").pop()!;
      const second = await serve(backend, dir, ["--resume", runId]);
      const cat = await second.call("run_shell", { command: "tail -n 1 nanoinfra/config.py" });
      expect(cat.structuredContent!.stdout).toBe("# resumed-edit\n");
      const diff = await second.call("get_diff");
      expect(diff.structuredContent!.files).toEqual([{ path: "nanoinfra/config.py", added: 1, removed: 0 }]);
      await second.client.close();
      expect(readdirSync(dir)).toEqual([runId]);
      const trace2 = readFileSync(join(run, "trace.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
      expect(trace2.some((l) => l.event === "session_resume")).toBe(true);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("stdio hygiene", () => {
  it("writes only JSON-RPC to stdout, and saves patch.diff when stdin closes", async () => {
    const dir = mkdtempSync(join(tmpdir(), "infradev-e2e-stdout-"));
    try {
      const child = spawn(process.execPath, [CLI, "serve", "--task", TASK, "--sandbox", BACKENDS[0]!, ...backendCliFlags(BACKENDS[0]!), "--runs-dir", dir], {
        stdio: ["pipe", "pipe", "pipe"],
        env: { ...process.env, INFRADEV_LOG_LEVEL: "debug" },
      });
      let stdout = "";
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      const send = (msg: object) => child.stdin.write(`${JSON.stringify(msg)}\n`);
      const waitFor = async (id: number) => {
        for (let i = 0; i < 1200 && !stdout.split("\n").some((l) => l.includes(`"id":${id}`)); i++) await new Promise((r) => setTimeout(r, 50));
      };
      send({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "raw", version: "0" } } });
      await waitFor(1);
      send({ jsonrpc: "2.0", method: "notifications/initialized" });
      send({ jsonrpc: "2.0", id: 2, method: "tools/list" });
      send({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "run_shell", arguments: { command: "echo printed-by-the-sandbox; echo edit >> README.md; echo to-stderr >&2" } } });
      send({ jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: "get_diff", arguments: {} } });
      await waitFor(4);
      child.stdin.end();
      const code = await new Promise<number | null>((res) => child.on("exit", res));
      expect(code).toBe(0);
      const lines = stdout.split("\n").filter((l) => l.length > 0);
      expect(lines.length).toBeGreaterThanOrEqual(4);
      for (const line of lines) expect(JSON.parse(line), line).toMatchObject({ jsonrpc: "2.0" });
      expect(lines.some((l) => l.includes("printed-by-the-sandbox"))).toBe(true); // inside a JSON result, not raw
      expect(readFileSync(join(onlyRun(dir), "patch.diff"), "utf8")).toContain("+edit");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
