/**
 * What issue 21's defences (bwrap --as-pid-1, the ranks' seccomp filter and audit hook, mutant twins)
 * cost, both ratios in one run, interleaved so a neighbour's load hits both sides alike:
 *
 *   1. `infradev grade` of a bundled task's gold (calibration made once per side, then N timed grades,
 *      each into a fresh out folder) with this checkout's dist against another build's (default
 *      /work/main/dist: today's main).                               target: median <= 1.15x
 *   2. `run_shell true` through `infradev serve` (SDK Client -> stdio -> tool -> bwrap) against the
 *      same bwrap command line spawned directly.                     target: median <= 1.5x + 20 ms
 *
 * Run: `npm run build && npx tsx bench/harness_reach_overhead.ts [--grades N] [--shell N] [--task ID] [--base-cli PATH]`
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { bundledTasksDir, packageRoot } from "../src/lib/paths.js";
import { createSandbox } from "../src/sandbox/picker.js";
import type { LocalSandbox } from "../src/sandbox/local/sandbox.js";
import { SANDBOX_BASE_DIR } from "../src/server/session.js";

const opt = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1]! : dflt;
};
const GRADES = Number(opt("--grades", "3"));
const SHELL_N = Number(opt("--shell", "30"));
const TASK = opt("--task", "grad-bucketing");
const NEW_CLI = join(packageRoot(), "dist", "cli", "main.js");
const BASE_CLI = opt("--base-cli", "/work/main/dist/cli/main.js");

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

function timed(argv: string[], env: Record<string, string> = process.env as Record<string, string>): Promise<{ ms: number; code: number | null; out: string }> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString().slice(-4000)));
    child.on("error", reject);
    child.on("close", (code) => resolve({ ms: performance.now() - t0, code, out }));
  });
}

async function gradeRatio(scratch: string) {
  const gold = join(bundledTasksDir(), TASK, "hidden", "golden.patch");
  const side = async (cli: string, tag: string, i: number) => {
    const r = await timed([process.execPath, cli, "grade", "--task", TASK, "--patch", gold, "--out", join(scratch, `out-${tag}-${i}`), "--calibration-dir", join(scratch, `cal-${tag}`), "--json", "--sandbox", "local"]);
    if (r.code !== 0) throw new Error(`${tag} grade exited ${r.code}: ${r.out.slice(-2000)}`);
    const res = JSON.parse(r.out.slice(0, r.out.lastIndexOf("}") + 1).slice(r.out.indexOf("{"))) as { status: string; resolved: boolean };
    if (res.status !== "graded" || !res.resolved) throw new Error(`${tag}: gold not resolved: ${JSON.stringify(res)}`);
    return r.ms;
  };
  await side(NEW_CLI, "new", -1); // calibrations (3 gold runs each), not timed
  await side(BASE_CLI, "base", -1);
  const n: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < GRADES; i++) {
    if (i % 2 === 0) {
      n.push(await side(NEW_CLI, "new", i));
      b.push(await side(BASE_CLI, "base", i));
    } else {
      b.push(await side(BASE_CLI, "base", i));
      n.push(await side(NEW_CLI, "new", i));
    }
  }
  const ratio = median(n) / median(b);
  return { task: TASK, n: GRADES, new_median_ms: Math.round(median(n)), base_median_ms: Math.round(median(b)), ratio: +ratio.toFixed(3), target: 1.15, ok: ratio <= 1.15, new_ms: n.map(Math.round), base_ms: b.map(Math.round) };
}

async function shellRatio(scratch: string) {
  const runsDir = join(scratch, "runs");
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [NEW_CLI, "serve", "--task", TASK, "--sandbox", "local", "--runs-dir", runsDir],
    env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
    stderr: "inherit",
  });
  const client = new Client({ name: "infradev-bench", version: "0" });
  await client.connect(transport);
  await client.callTool({ name: "get_task", arguments: {} });
  const runDir = join(runsDir, readdirSync(runsDir)[0]!);
  const direct = (await createSandbox({
    kind: "local",
    hostRepoDir: join(runDir, "workspace"),
    readOnlyMounts: [{ host: join(runDir, "base"), sandbox: SANDBOX_BASE_DIR }],
    hiddenPaths: [join(bundledTasksDir(), TASK), bundledTasksDir(), runsDir],
  })) as LocalSandbox;
  const env = direct.baseEnv;
  try {
    for (let i = 0; i < 3; i++) {
      await client.callTool({ name: "run_shell", arguments: { command: "true" } });
      await timed(direct.bwrapCommand(["bash", "-c", "true"]), env);
    }
    const m: number[] = [];
    const d: number[] = [];
    for (let i = 0; i < SHELL_N; i++) {
      const t0 = performance.now();
      const r = await client.callTool({ name: "run_shell", arguments: { command: "true" } });
      m.push(performance.now() - t0);
      if (r.isError) throw new Error(`run_shell failed: ${JSON.stringify(r.content)}`);
      const x = await timed(direct.bwrapCommand(["bash", "-c", "true"]), env);
      if (x.code !== 0) throw new Error(`direct bwrap failed (${x.code}): ${x.out}`);
      d.push(x.ms);
    }
    const target = 1.5 * median(d) + 20;
    return { n: SHELL_N, mcp_median_ms: +median(m).toFixed(1), bwrap_median_ms: +median(d).toFixed(1), ratio: +(median(m) / median(d)).toFixed(3), target_ms: +target.toFixed(1), ok: median(m) <= target };
  } finally {
    await client.close();
    await direct.close();
  }
}

async function main(): Promise<void> {
  const scratch = mkdtempSync(join(tmpdir(), "infradev-bench-reach-"));
  try {
    const grade = await gradeRatio(scratch);
    const shell = await shellRatio(scratch);
    console.log(JSON.stringify({ grade_vs_base: grade, run_shell_true: shell }, null, 2));
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

void main().catch((e: unknown) => {
  console.error(e);
  process.exit(1);
});
