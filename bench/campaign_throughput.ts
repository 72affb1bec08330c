/**
 * Campaign throughput: graded submissions per hour with `--concurrency 2` against `--concurrency 1`
 * (sequential), the same submissions each time, both measured in one invocation. Target on 2 cores
 * for CPU tasks: ratio ≥ 1.7.
 *
 *   npm run build && npx tsx bench/campaign_throughput.ts [--n 8] [--rounds 1] [--agents 0] [--think-s 0] [--skip-grade-many] [--json FILE]
 *
 * grade-many: `n` distinct real submissions of tiny-mean (golden, two adversarial patches, the hollow
 * patch, in turn, each made distinct by a file of its own so no grade is reused), graded by the real
 * CLI (`infradev grade-many`, real 2-rank gloo sessions under bwrap) into a fresh campaign per
 * measurement. Gold is calibrated once beforehand into a shared cache (not timed), as `grade-many`
 * itself does once per task. With `--agents R` also `infradev eval` of tiny-mean × 2 stand-in agents
 * (codex:standin:golden, opencode:standin:adversarial; the stand-in is a scripted model, not a
 * language model) × R repeats: agent runs plus their grades. Each round runs both concurrencies,
 * the order alternating between rounds (the machine is shared; alternating spreads drift over both).
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { packageRoot } from "../src/lib/paths.js";

const { values } = parseArgs({
  options: {
    n: { type: "string", default: "8" },
    rounds: { type: "string", default: "1" },
    agents: { type: "string", default: "0" },
    json: { type: "string" },
    // Seconds the stand-in holds each scripted turn (INFRADEV_STANDIN_THINK_S): a model's think time.
    "think-s": { type: "string", default: "0" },
    "skip-grade-many": { type: "boolean", default: false },
  },
});
const n = Math.max(2, Number(values.n));
const rounds = Math.max(1, Number(values.rounds));
const agentRepeats = Math.max(0, Number(values.agents));
const root = packageRoot();
const CLI = join(root, "dist", "cli", "main.js");
const TASKS = join(root, "test", "fixtures", "grader", "tasks");
const HIDDEN = join(TASKS, "tiny-mean", "hidden");
const scratch = mkdtempSync(join(tmpdir(), "infradev-bench-campaign-"));
const cal = join(scratch, "calibration");
const log = (m: string) => process.stderr.write(`${m}\n`);

/** A patch made distinct by a new file of its own (same code change, another submission hash). */
function distinct(patch: string, i: number): string {
  return `${patch.endsWith("\n") ? patch : `${patch}\n`}diff --git a/bench_${i}.txt b/bench_${i}.txt\nnew file mode 100644\n--- /dev/null\n+++ b/bench_${i}.txt\n@@ -0,0 +1 @@\n+submission ${i}\n`;
}

const thinkS = values["think-s"] ?? "0";
function timed(args: string[]): number {
  const t0 = performance.now();
  execFileSync(process.execPath, [CLI, ...args], { stdio: ["ignore", "ignore", "pipe"], maxBuffer: 1 << 26, env: { ...process.env, INFRADEV_STANDIN_THINK_S: thinkS } });
  return (performance.now() - t0) / 1000;
}

const sources = [join(HIDDEN, "golden.patch"), join(HIDDEN, "adversarial", "sum-not-mean.patch"), join(HIDDEN, "adversarial", "two-all-reduces.patch"), join(HIDDEN, "hollow.patch")].map((f) => readFileSync(f, "utf8"));
const preds = join(scratch, "preds.jsonl");
writeFileSync(preds, Array.from({ length: n }, (_, i) => JSON.stringify({ task_id: "tiny-mean", model: `m${i}`, patch: distinct(sources[i % sources.length]!, i) })).join("\n") + "\n");

interface Measure { what: string; concurrency: number; round: number; submissions: number; wall_s: number; per_hour: number }
const results: Measure[] = [];

try {
  log(`calibrating tiny-mean once (not timed) ...`);
  execFileSync(process.execPath, [CLI, "calibrate", "--task", "tiny-mean", "--tasks-dir", TASKS, "--calibration-dir", cal], { stdio: ["ignore", "ignore", "inherit"] });
  for (let r = 0; r < rounds; r++) {
    for (const c of values["skip-grade-many"] ? [] : r % 2 === 0 ? [1, 2] : [2, 1]) {
      const wall = timed(["grade-many", "--predictions", preds, "--out", join(scratch, `gm-c${c}-r${r}`), "--tasks-dir", TASKS, "--calibration-dir", cal, "--concurrency", String(c)]);
      results.push({ what: "grade-many", concurrency: c, round: r, submissions: n, wall_s: wall, per_hour: (n / wall) * 3600 });
      log(`grade-many  concurrency ${c}  round ${r}: ${n} graded in ${wall.toFixed(1)} s = ${((n / wall) * 3600).toFixed(0)}/h`);
    }
    if (agentRepeats > 0) {
      for (const c of r % 2 === 0 ? [1, 2] : [2, 1]) {
        const runs = 2 * agentRepeats;
        const wall = timed(["eval", "--tasks", "tiny-mean", "--tasks-dir", TASKS, "--agent", "gold=codex:standin:golden", "--agent", "adv=opencode:standin:adversarial", "--repeats", String(agentRepeats), "--time-limit-min", "5", "--out", join(scratch, `ev-c${c}-r${r}`), "--calibration-dir", cal, "--concurrency", String(c)]);
        results.push({ what: "eval (stand-in agents)", concurrency: c, round: r, submissions: runs, wall_s: wall, per_hour: (runs / wall) * 3600 });
        log(`eval        concurrency ${c}  round ${r}: ${runs} runs graded in ${wall.toFixed(1)} s = ${((runs / wall) * 3600).toFixed(0)}/h`);
      }
    }
  }
  const rate = (what: string, c: number) => {
    const xs = results.filter((x) => x.what === what && x.concurrency === c);
    return xs.reduce((s, x) => s + x.submissions, 0) / xs.reduce((s, x) => s + x.wall_s, 0) * 3600;
  };
  const summary = [...new Set(results.map((x) => x.what))].map((what) => ({ what, per_hour_c1: rate(what, 1), per_hour_c2: rate(what, 2), ratio: rate(what, 2) / rate(what, 1) }));
  const machine = { cores: availableParallelism(), cpu: cpus()[0]?.model ?? "?", node: process.version, load_avg_1m_end: Number(readFileSync("/proc/loadavg", "utf8").split(" ")[0]) };
  for (const s of summary) log(`${s.what}: ${s.per_hour_c1.toFixed(0)}/h sequential, ${s.per_hour_c2.toFixed(0)}/h at concurrency 2: ratio ${s.ratio.toFixed(2)} (target ≥ 1.7 on 2 cores)`);
  const report = JSON.stringify({ machine, submissions: n, rounds, standin_think_s: Number(thinkS), summary, results }, null, 2);
  if (values.json) writeFileSync(values.json, `${report}\n`);
  process.stdout.write(`${report}\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
