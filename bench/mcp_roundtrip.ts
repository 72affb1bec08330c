/**
 * What the MCP server costs on top of the sandbox it drives, measured in one run (interleaved, so
 * load from other processes hits both sides alike):
 *
 *   1. `run_shell` with `true` through the server (SDK Client -> stdio -> tool -> bwrap) against
 *      spawning the same bwrap command line directly.            target: median <= 1.5x + 20 ms
 *   2. `pytest_run` with 2 ranks on the base tests through the server against the rank launcher
 *      called directly in the same bwrap sandbox.                 target: median <= 1.1x
 *
 * Run: `npm run build && npx tsx bench/mcp_roundtrip.ts [--shell N] [--pytest N]`
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, posix } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { bundledTasksDir, packageRoot } from "../lib/paths.js";
import { createSandbox, type LocalSandbox } from "../sandbox/index.js";
import { SANDBOX_BASE_DIR } from "../server/session.js";

const TASK = "grad-bucketing";
const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? Number(process.argv[i + 1]) : dflt;
};
const SHELL_N = arg("--shell", 40);
const PYTEST_N = arg("--pytest", 3);

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

function spawnTimed(argv: string[], env: Record<string, string>): Promise<{ ms: number; code: number | null; out: string }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ ms: performance.now() - t0, code, out }));
  });
}

async function main(): Promise<void> {
  const root = packageRoot();
  const runsDir = mkdtempSync(join(tmpdir(), "infradev-bench-runs-"));
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [join(root, "dist", "cli", "main.js"), "serve", "--task", TASK, "--sandbox", "local", "--runs-dir", runsDir],
    env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
    stderr: "inherit",
  });
  const client = new Client({ name: "infradev-bench", version: "0" });
  await client.connect(transport);
  const runDir = join(runsDir, readdirSync(runsDir)[0]!);
  const workspace = join(runDir, "workspace");

  // The same sandbox the server builds: workspace, base checkout, hidden paths.
  const direct = (await createSandbox({
    kind: "local",
    hostRepoDir: workspace,
    readOnlyMounts: [{ host: join(runDir, "base"), sandbox: SANDBOX_BASE_DIR }],
    hiddenPaths: [join(bundledTasksDir(), TASK), bundledTasksDir(), runsDir],
  })) as LocalSandbox;
  const env = direct.baseEnv;

  try {
    // Warm-up: first calls pay for page cache and JIT.
    for (let i = 0; i < 3; i++) {
      await client.callTool({ name: "run_shell", arguments: { command: "true" } });
      await spawnTimed(direct.bwrapCommand(["bash", "-c", "true"]), env);
    }
    const viaMcp: number[] = [];
    const viaBwrap: number[] = [];
    for (let i = 0; i < SHELL_N; i++) {
      const t0 = performance.now();
      const r = await client.callTool({ name: "run_shell", arguments: { command: "true" } });
      viaMcp.push(performance.now() - t0);
      if (r.isError) throw new Error(`run_shell failed: ${JSON.stringify(r.content)}`);
      const d = await spawnTimed(direct.bwrapCommand(["bash", "-c", "true"]), env);
      if (d.code !== 0) throw new Error(`direct bwrap failed (${d.code}): ${d.out}`);
      viaBwrap.push(d.ms);
    }
    const shellMcp = median(viaMcp);
    const shellDirect = median(viaBwrap);
    const shellTarget = 1.5 * shellDirect + 20;

    const pyMcp: number[] = [];
    const pyDirect: number[] = [];
    for (let i = 0; i < PYTEST_N; i++) {
      const t0 = performance.now();
      const r = await client.callTool({ name: "pytest_run", arguments: { ranks: 2 } }, undefined, { timeout: 600_000 });
      pyMcp.push(performance.now() - t0);
      const out = r.structuredContent as { summary: { passed: number; total: number } };
      if (r.isError || out.summary.passed !== out.summary.total) throw new Error(`pytest_run did not pass: ${JSON.stringify(r.content).slice(0, 500)}`);
      // What runRanks runs, minus the server: the launcher in the same sandbox.
      const outDir = `.infradev/results/bench-direct-${i}`;
      const argv = [
        direct.python,
        "-S",
        posix.join(direct.pythonHelpersDir, "infradev_launch.py"),
        "--nproc", "2",
        "--out-dir", posix.join(direct.repoDir, outDir),
        "--per-test-timeout", "60",
        "--run-timeout", "600",
        "--launcher", "builtin",
        "--",
        "tests", "-p", "no:cacheprovider",
      ];
      const d = await spawnTimed(direct.bwrapCommand(argv), { ...env, PYTHONDONTWRITEBYTECODE: "1" });
      if (d.code !== 0) throw new Error(`direct launcher failed (${d.code}): ${d.out.slice(-2000)}`);
      pyDirect.push(d.ms);
    }
    const pyM = median(pyMcp);
    const pyD = median(pyDirect);

    const report = {
      run_shell_true: {
        n: SHELL_N,
        mcp_median_ms: +shellMcp.toFixed(1),
        bwrap_median_ms: +shellDirect.toFixed(1),
        ratio: +(shellMcp / shellDirect).toFixed(3),
        target_ms: +shellTarget.toFixed(1),
        ok: shellMcp <= shellTarget,
      },
      pytest_run_2_ranks: {
        n: PYTEST_N,
        mcp_median_ms: +pyM.toFixed(0),
        launcher_median_ms: +pyD.toFixed(0),
        ratio: +(pyM / pyD).toFixed(3),
        target_ratio: 1.1,
        ok: pyM / pyD <= 1.1,
      },
    };
    process.stdout.write(
      [
        `run_shell true : MCP ${shellMcp.toFixed(1)} ms vs bwrap ${shellDirect.toFixed(1)} ms (median of ${SHELL_N}) -> x${(shellMcp / shellDirect).toFixed(2)}; target <= 1.5x + 20 ms = ${shellTarget.toFixed(1)} ms: ${report.run_shell_true.ok ? "OK" : "MISSED"}`,
        `pytest_run 2r  : MCP ${pyM.toFixed(0)} ms vs launcher ${pyD.toFixed(0)} ms (median of ${PYTEST_N}) -> x${(pyM / pyD).toFixed(3)}; target <= 1.1x: ${report.pytest_run_2_ranks.ok ? "OK" : "MISSED"}`,
        JSON.stringify(report),
        "",
      ].join("\n"),
    );
  } finally {
    await client.close();
    await direct.close();
    rmSync(runsDir, { recursive: true, force: true });
  }
}

await main();
