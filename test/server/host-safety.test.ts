/**
 * Item 1 of issue 10 through the real CLI (`node dist/cli/main.js serve`) driven by the SDK Client
 * over stdio, on every backend of test/helpers/backends.ts: the agent plants symlinks and FIFOs
 * where the server used to read or write (the old `.infradev/logs`, result folders, files the tools
 * look at), then uses the tools. The host side is checked: nothing is written in a decoy folder
 * outside the allowed ones, and the decoy's random secret appears in no tool result, log or patch.
 * Also: the exec logs live in runs/<run-id>/logs, and the agent can read them (only read them) at
 * the path run_shell returns; /proc inside shows no host path of the run.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../../src/lib/paths.js";
import { SANDBOX_BACKENDS, backendCliFlags, ensureBuilt, prepareBackend } from "../helpers/backends.js";
import { treeSnapshot } from "../helpers/tree-snapshot.js";

const ROOT = packageRoot();
const CLI = join(ROOT, "dist", "cli", "main.js");
type Result = CallToolResult & { structuredContent?: Record<string, any> };

beforeAll(() => {
  ensureBuilt();
}, 300_000);

const snapshot = treeSnapshot;

describe.each(SANDBOX_BACKENDS.filter((b) => b !== "none"))("host safety through `serve --sandbox %s`", (backend) => {
  let base: string;
  let runsDir: string;
  let decoy: string;
  let decoyBefore: string[];
  let client: Client;
  const SECRET = `host-secret-${randomBytes(12).toString("hex")}`;
  const results: Result[] = [];
  const call = async (name: string, args: Record<string, unknown> = {}): Promise<Result> => {
    const r = (await client.callTool({ name, arguments: args }, undefined, { timeout: 300_000 })) as Result;
    results.push(r);
    return r;
  };

  beforeAll(async () => {
    await prepareBackend(backend);
    base = realpathSync(mkdtempSync(join(tmpdir(), `infradev-hostsafety-${backend}-`)));
    runsDir = join(base, "runs");
    decoy = join(base, "decoy");
    mkdirSync(runsDir);
    mkdirSync(join(decoy, "logs"), { recursive: true });
    writeFileSync(join(decoy, "secret.txt"), `${SECRET}\n`);
    writeFileSync(join(decoy, "logs", "keep.log"), `${SECRET}\n`);
    decoyBefore = snapshot(decoy);
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, "serve", "--task", "grad-bucketing", "--sandbox", backend, ...backendCliFlags(backend), "--runs-dir", runsDir],
      env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
      stderr: "pipe",
      cwd: ROOT,
    });
    client = new Client({ name: "infradev-host-safety", version: "0" });
    await client.connect(transport);
  }, 180_000);

  afterAll(async () => {
    await client?.close();
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it("planted links and FIFOs are never followed or opened by the host; the secret appears nowhere", async () => {
    // Links to the decoy by its host path (dangling inside the sandbox, live on the host), and FIFOs.
    const plant = [
      "set -e",
      "mkdir -p .infradev",
      `ln -sfn ${JSON.stringify(join(decoy, "logs"))} .infradev/logs`,
      `ln -sfn ${JSON.stringify(decoy)} .infradev/results`,
      `ln -sfn ${JSON.stringify(join(decoy, "secret.txt"))} leak.txt`,
      `ln -sfn ${JSON.stringify(join(decoy, "secret.txt"))} nanoinfra/leak_module.py`,
      // (A FIFO named *.py would only stall the agent's own find_callers / get_diff analysis inside the sandbox.)
      "mkfifo fifo.txt .infradev/fifo.log",
      "ls -la .infradev",
    ].join("\n");
    const p = await call("run_shell", { command: plant });
    expect(p.structuredContent!.exit_code, JSON.stringify(p.content)).toBe(0);

    // Output large enough to be capped, and a few tools that read the workspace.
    const big = await call("run_shell", { command: "seq 1 200000; cat leak.txt; cat nanoinfra/leak_module.py; true", timeout_sec: 120 });
    expect(big.structuredContent!.truncated).toBe(true);
    expect(big.structuredContent!.log_path).toMatch(/^\/infradev\/logs\/[^/]+\.log$/);
    await call("find_callers", { symbol: "nanoinfra.parallel.DataParallel.sync_gradients" });
    await call("pytest_collect", {});
    await call("get_diff", {});
    const sub = await call("submit", { note: "host-safety probe" });
    expect(sub.isError, JSON.stringify(sub.content)).toBeFalsy();

    // The decoy is untouched, and the secret is in no result.
    expect(snapshot(decoy)).toEqual(decoyBefore);
    for (const r of results) expect(JSON.stringify(r)).not.toContain(SECRET);

    // The logs are in runs/<run-id>/logs, not in the workspace (the planted link is still there, unused).
    const [runId] = readdirSync(runsDir);
    const runDir = join(runsDir, runId!);
    const logs = readdirSync(join(runDir, "logs"));
    expect(logs.length).toBeGreaterThanOrEqual(results.filter((r) => r.structuredContent?.log_path).length);
    expect(lstatSync(join(runDir, "workspace", ".infradev", "logs")).isSymbolicLink()).toBe(true);
    for (const f of logs) expect(readFileSync(join(runDir, "logs", f), "utf8")).not.toContain(SECRET);
    expect(readFileSync(join(runDir, "patch.diff"), "utf8")).not.toContain(SECRET);
  }, 300_000);

  it("the agent reads its log at log_path, cannot write there, and /proc shows no host path of the run", async () => {
    const first = await call("run_shell", { command: "echo the-log-line" });
    const logPath = first.structuredContent!.log_path as string;
    const r = await call("run_shell", {
      command: `cat ${logPath}; echo x >> ${logPath} || echo refused; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; tr '\\0' '\\n' < $p/environ; done 2>/dev/null; true`,
    });
    const out = r.structuredContent!.stdout as string;
    expect(out).toContain("the-log-line");
    expect(out).toContain("refused");
    for (const hostPath of [runsDir, base, ROOT]) expect(out, hostPath).not.toContain(hostPath);
    expect(snapshot(decoy)).toEqual(decoyBefore);
  }, 120_000);
});

describe("serve --sandbox local --pids-limit", () => {
  it("caps one command's processes; run_shell says the limit was hit; nothing survives", async () => {
    const runsDir = mkdtempSync(join(tmpdir(), "infradev-pids-serve-"));
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [CLI, "serve", "--task", "grad-bucketing", "--sandbox", "local", "--pids-limit", "40", "--runs-dir", runsDir],
      env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
      stderr: "pipe",
      cwd: ROOT,
    });
    const client = new Client({ name: "infradev-pids", version: "0" });
    try {
      await client.connect(transport);
      const marker = `${900 + Math.floor(Math.random() * 90_000) / 1000}`;
      const r = (await client.callTool({
        name: "run_shell",
        // dash, not bash: bash retries a refused fork for seconds before giving up.
        arguments: { command: `sh -c 'n=0; while [ $n -lt 5000 ]; do sleep ${marker} & n=$((n+1)); done; echo started $n'`, timeout_sec: 30 },
      })) as Result;
      const out = r.structuredContent!;
      expect(out.process_limit_hit).toBe(true);
      expect(out.warning).toMatch(/process limit 40 reached/);
      expect(out.stdout).not.toContain("started 5000");
      const ps = execFileSync("ps", ["-eo", "args="], { encoding: "utf8" });
      expect(ps).not.toContain(`sleep ${marker}`);
      const ok = (await client.callTool({ name: "run_shell", arguments: { command: "true" } })) as Result;
      expect(ok.structuredContent!.process_limit_hit).toBe(false);
    } finally {
      await client.close();
      rmSync(runsDir, { recursive: true, force: true });
    }
  }, 120_000);

  it("refuses --pids-limit with --sandbox none, and a limit that is not a whole number > 0", () => {
    for (const args of [["--sandbox", "none", "--pids-limit", "40"], ["--sandbox", "local", "--pids-limit", "0"]]) {
      const r = spawnSync(process.execPath, [CLI, "serve", "--task", "grad-bucketing", ...args], { encoding: "utf8", cwd: ROOT, timeout: 30_000 });
      expect(r.status, args.join(" ")).not.toBe(0);
      expect(r.stderr).toMatch(/--pids-limit|whole number/);
    }
  });
});
