/**
 * The CI suite table (issue 23): per test file, how long it took, grouped by vitest project, from the
 * JSON every `npm test` run writes (test/helpers/suite-times-reporter.ts: test-results/suite-times.json)
 * or from a saved `vitest run --reporter=verbose` log; with two inputs, old vs new side by side.
 *
 *   npx tsx bench/ci_suite_times.ts [RUN]                    RUN: a suite-times JSON (default test-results/suite-times.json) or a verbose log
 *   npx tsx bench/ci_suite_times.ts OLD NEW [--renames REV]  old vs new per file; REV: a commit whose test renames map OLD's names to NEW's
 *   npx tsx bench/ci_suite_times.ts RUN --weights FILE        also write RUN's per-file seconds as the start-order table
 *                                                            (test/helpers/suite-weights.json, read by weighted-sequencer.ts)
 *
 * A verbose log gives each test's own time, not its file's hooks (a beforeAll that grades is left
 * out): such a file's figure is a lower bound, marked `≥`. The JSON has each file's wall time.
 */
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { suiteTable, type SuiteTime, type SuiteTimes } from "../test/helpers/suite-times.js";

const SLOW = /^test\/(docker|gpu|harness-real|e2e|slurm|browser)\//;

interface Run {
  times: SuiteTimes;
  /** Figures are the tests' own times only (a verbose log). */
  lowerBound: boolean;
  /** The whole run's duration as vitest printed it (a log), seconds. */
  duration?: number;
}

/** A verbose vitest log: `✓ test/x.test.ts > suite > name 123ms` per test, the `Duration` line at the end. */
export function parseVerboseLog(text: string): Run {
  const plain = text.replace(/\x1b\[[0-9;]*m/g, "");
  const byFile = new Map<string, SuiteTime>();
  for (const line of plain.split("\n")) {
    const m = /^\s*([✓×↓])\s+(test\/\S+\.test\.ts)\s+>.*?(?:\s(\d+)ms)?\s*$/.exec(line);
    if (!m) continue;
    const file = m[2]!;
    const s = byFile.get(file) ?? { file, project: SLOW.test(file) ? "slow" : "fast", seconds: 0, tests: 0, failed: 0, skipped: 0 };
    s.tests++;
    if (m[1] === "×") s.failed++;
    if (m[1] === "↓") s.skipped++;
    s.seconds += Number(m[3] ?? 0) / 1000;
    byFile.set(file, s);
  }
  const d = /Duration\s+([\d.]+)(ms|s)/.exec(plain);
  const duration = d ? Number(d[1]) / (d[2] === "ms" ? 1000 : 1) : undefined;
  return { times: { ended_at: "", wall_s: duration ?? 0, load: { start: Number.NaN, end: Number.NaN }, suites: [...byFile.values()] }, lowerBound: true, ...(duration !== undefined ? { duration } : {}) };
}

function readRun(file: string): Run {
  const text = readFileSync(file, "utf8");
  if (text.trimStart().startsWith("{")) return { times: JSON.parse(text) as SuiteTimes, lowerBound: false };
  return parseVerboseLog(text);
}

/** Old test path → new one, from the renames of one commit (git's rename detection). */
function renamesOf(rev: string): Map<string, string> {
  const out = execFileSync("git", ["diff", "--name-status", "-M", `${rev}^`, rev, "--", "test"], { encoding: "utf8" });
  const map = new Map<string, string>();
  for (const line of out.split("\n")) {
    const [status, from, to] = line.split("\t");
    if (status?.startsWith("R") && from && to) map.set(from, to);
  }
  return map;
}

const fmt = (s: number | undefined) => (s === undefined ? "—" : s >= 60 ? `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, "0")}s` : `${s.toFixed(1)}s`);

const { values, positionals } = parseArgs({ allowPositionals: true, options: { renames: { type: "string" }, weights: { type: "string" } } });
const inputs = positionals.length ? positionals : ["test-results/suite-times.json"];
const renames = values.renames ? renamesOf(values.renames) : new Map<string, string>();
/** A run under today's names (a log's project follows its file's folder). */
const renamed = (r: Run): Run => ({
  ...r,
  times: { ...r.times, suites: r.times.suites.map((s) => ({ ...s, file: renames.get(s.file) ?? s.file, project: r.lowerBound ? (SLOW.test(renames.get(s.file) ?? s.file) ? "slow" : "fast") : s.project })) },
});
if (inputs.length === 1) {
  const run = renamed(readRun(inputs[0]!));
  const lines = suiteTable(run.times);
  if (values.weights) {
    if (run.lowerBound) throw new Error("--weights needs a suite-times JSON (a verbose log has no hook times)");
    const seconds = Object.fromEntries(run.times.suites.map((s) => [s.file, Math.round(s.seconds * 10) / 10]));
    writeFileSync(values.weights, `${JSON.stringify({ measured: `npm test, ${run.times.ended_at}, ${run.times.cores ?? "?"} cores`, seconds }, null, 1)}\n`);
  }
  if (run.lowerBound) {
    lines[lines.length - 1] = `whole run ${fmt(run.duration)} (vitest's Duration line); per file: the tests' own times, hooks not included`;
  }
  process.stdout.write(`${lines.join("\n")}\n`);
} else {
  const [oldRun, newRun] = [renamed(readRun(inputs[0]!)), readRun(inputs[1]!)];
  const oldBy = new Map(oldRun.times.suites.map((s) => [s.file, s]));
  const newBy = new Map(newRun.times.suites.map((s) => [s.file, s]));
  const files = [...new Set([...oldBy.keys(), ...newBy.keys()])].sort((a, b) => (oldBy.get(b)?.seconds ?? 0) - (oldBy.get(a)?.seconds ?? 0));
  const width = Math.max(40, ...files.map((f) => f.length));
  const mark = (r: Run) => (r.lowerBound ? "≥" : " ");
  const rows = [`${"file".padEnd(width)}  ${"old".padStart(8)}  ${"new".padStart(8)}  new/old`];
  for (const f of files) {
    const o = oldBy.get(f)?.seconds;
    const n = newBy.get(f)?.seconds;
    rows.push(`${f.padEnd(width)}  ${o === undefined ? "       —" : `${mark(oldRun)}${fmt(o).padStart(7)}`}  ${n === undefined ? "       —" : `${mark(newRun)}${fmt(n).padStart(7)}`}  ${o && n ? (n / o).toFixed(2) : "—"}`);
  }
  const total = (r: Run) => r.duration ?? r.times.wall_s;
  rows.push(`whole run: old ${fmt(total(oldRun))}, new ${fmt(total(newRun))}${total(oldRun) ? ` (${(total(newRun) / total(oldRun)).toFixed(2)})` : ""}`);
  process.stdout.write(`${rows.join("\n")}\n`);
}
