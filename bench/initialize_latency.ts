/**
 * Issue 12 item 7: time from spawning `infradev serve` (stdio) to its reply to MCP `initialize`,
 * against a minimal stdio server on the same SDK (bench/minimal_stdio_server.mjs), in one run,
 * interleaved (A, B, A, B...) so load from other processes hits both alike. Each process is waited
 * for until it exits before the next one starts. Target: median ratio <= 1.5x.
 *
 * The client is hand-rolled on purpose (one JSON line written at spawn, the first stdout line read
 * back): the SDK client's own start-up would be inside both figures.
 *
 * Run: `npm run build && npx tsx bench/initialize_latency.ts [--reps N] [--sandbox local|none] [--entry cli|serve-only] [--cli other/dist/cli/main.js]`
 * (serve-only: the serve command without the rest of the CLI, see bench/serve_only_entry.mjs).
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { packageRoot } from "../src/lib/paths.js";

const arg = (name: string, dflt: string) => {
  const i = process.argv.indexOf(name);
  return i >= 0 ? process.argv[i + 1]! : dflt;
};
const REPS = Number(arg("--reps", "10"));
const SANDBOX = arg("--sandbox", "local");
/** cli: the real `dist/cli/main.js serve`; serve-only: the serve command alone (bench/serve_only_entry.mjs). */
const ENTRY = arg("--entry", "cli");
/** Another build's dist/cli/main.js (a before/after comparison), with --entry cli. */
const CLI = arg("--cli", "");

const INITIALIZE = `${JSON.stringify({
  jsonrpc: "2.0",
  id: 0,
  method: "initialize",
  params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "bench", version: "0" } },
})}\n`;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

/** Spawns argv, writes `initialize`, resolves with the ms to the reply; then closes stdin and waits for the exit. */
function timeInitialize(argv: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "pipe", "pipe"], env: { ...process.env, INFRADEV_LOG_LEVEL: "warn" } });
    let out = "";
    let err = "";
    let ms: number | null = null;
    child.stdin.write(INITIALIZE);
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      if (ms === null && out.includes("\n")) {
        ms = performance.now() - t0;
        const reply = JSON.parse(out.slice(0, out.indexOf("\n"))) as { id?: number; result?: { serverInfo?: unknown } };
        if (reply.id !== 0 || !reply.result?.serverInfo) reject(new Error(`not an initialize reply: ${out.slice(0, 300)}`));
        child.stdin.end();
      }
    });
    child.on("error", reject);
    child.on("close", (code) => {
      if (ms === null) reject(new Error(`${argv.join(" ")} exited (${code}) before replying:\n${err.slice(-2000)}`));
      else resolve(ms);
    });
  });
}

async function main(): Promise<void> {
  const root = packageRoot();
  const runsDir = mkdtempSync(join(tmpdir(), "infradev-bench-init-"));
  const entry = ENTRY === "serve-only" ? join(root, "bench", "serve_only_entry.mjs") : CLI || join(root, "dist", "cli", "main.js");
  const serve = [process.execPath, entry, "serve", "--task", "grad-bucketing", "--sandbox", SANDBOX, "--runs-dir", runsDir];
  const minimal = [process.execPath, join(root, "bench", "minimal_stdio_server.mjs")];
  try {
    // Warm-up: page cache for node, the SDK and the package.
    await timeInitialize(minimal);
    await timeInitialize(serve);
    const a: number[] = [];
    const b: number[] = [];
    const ratios: number[] = [];
    for (let i = 0; i < REPS; i++) {
      const m = await timeInitialize(minimal);
      const s = await timeInitialize(serve);
      a.push(m);
      b.push(s);
      ratios.push(s / m);
    }
    const report = {
      reps: REPS,
      sandbox: SANDBOX,
      entry: ENTRY,
      minimal_median_ms: +median(a).toFixed(1),
      serve_median_ms: +median(b).toFixed(1),
      ratio_of_medians: +(median(b) / median(a)).toFixed(3),
      median_pair_ratio: +median(ratios).toFixed(3),
      serve_ms: b.map((x) => +x.toFixed(0)),
      minimal_ms: a.map((x) => +x.toFixed(0)),
      target_ratio: 1.5,
      ok: median(b) / median(a) <= 1.5,
    };
    process.stdout.write(
      `initialize reply: serve ${report.serve_median_ms} ms vs minimal SDK server ${report.minimal_median_ms} ms (median of ${REPS}) -> x${report.ratio_of_medians}; target <= 1.5x: ${report.ok ? "OK" : "MISSED"}\n${JSON.stringify(report)}\n`,
    );
  } finally {
    rmSync(runsDir, { recursive: true, force: true });
  }
}

await main();
