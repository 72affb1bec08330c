import { z } from "zod";
import type { MergedCase } from "../../runner/merge.js";
import type { CommandMeasurement } from "./measure-command.js";
import { CountsByOp, RankResourcesSchema, type RankResourcesOut, formatBytes } from "./run-summary.js";

/** One measurement (of the workspace or of the base checkout) and the after / before ratios. */

export const MeasuredRankSchema = RankResourcesSchema.extend({
  exit_code: z.number().int().nullable().describe("command form: the command's exit code on this rank; tests form: null"),
  log_tail: z.string().nullable().describe("command form: the end of this rank's output"),
});

export const MeasurementSchema = z.object({
  checkout: z.enum(["workspace", "base"]),
  ok: z.boolean().describe("false when the command failed / a test did not pass: read the figures with care"),
  failure: z.string().nullable(),
  per_rank: z.array(MeasuredRankSchema),
  max_over_ranks: z.object({
    wall_time_s: z.number().nullable(),
    peak_memory_bytes: z.number().nullable(),
    calls: CountsByOp,
    bytes: CountsByOp,
  }),
  tests: z.array(z.object({ id: z.string(), outcome: z.string() })).describe("tests form: each test's merged outcome"),
});
export type Measurement = z.infer<typeof MeasurementSchema>;

export const RatioSchema = z.object({
  metric: z.string().describe("wall_time_s, peak_memory_bytes, calls.<op> or bytes.<op> (max over ranks)"),
  after: z.number().nullable(),
  before: z.number().nullable(),
  ratio: z.number().nullable().describe("after / before; null when before is 0 or missing"),
});
export type Ratio = z.infer<typeof RatioSchema>;

function addInto(target: Record<string, number>, src: Record<string, number>): void {
  for (const [k, v] of Object.entries(src)) target[k] = (target[k] ?? 0) + v;
}

function maxOverRanks(perRank: RankResourcesOut[]): Measurement["max_over_ranks"] {
  const calls: Record<string, number> = {};
  const bytes: Record<string, number> = {};
  let wall: number | null = null;
  let peak: number | null = null;
  for (const r of perRank) {
    for (const [k, v] of Object.entries(r.calls)) calls[k] = Math.max(calls[k] ?? 0, v);
    for (const [k, v] of Object.entries(r.bytes)) bytes[k] = Math.max(bytes[k] ?? 0, v);
    if (r.wall_time_s !== null) wall = Math.max(wall ?? 0, r.wall_time_s);
    if (r.peak_memory_bytes !== null) peak = Math.max(peak ?? 0, r.peak_memory_bytes);
  }
  return { wall_time_s: wall, peak_memory_bytes: peak, calls, bytes };
}

/** Tests form: per rank, calls and bytes and wall time summed over the tests, peak memory the max. */
export function measurementFromCases(checkout: Measurement["checkout"], ranks: number, cases: MergedCase[], failure: string | null): Measurement {
  const perRank = Array.from({ length: ranks }, (_, rank) => {
    const acc: RankResourcesOut & { exit_code: number | null; log_tail: string | null } = {
      rank,
      wall_time_s: null,
      peak_memory_bytes: null,
      memory_kind: null,
      calls: {},
      bytes: {},
      exit_code: null,
      log_tail: null,
    };
    for (const c of cases) {
      const res = c.ranks[rank]?.resources;
      if (!res) continue;
      acc.wall_time_s = (acc.wall_time_s ?? 0) + res.wall_time_s;
      acc.peak_memory_bytes = Math.max(acc.peak_memory_bytes ?? 0, res.peak_memory_bytes);
      acc.memory_kind ??= res.memory_kind;
      addInto(acc.calls, res.calls);
      addInto(acc.bytes, res.bytes);
    }
    return acc;
  });
  const notPassed = cases.filter((c) => c.outcome !== "passed");
  const why = failure ?? (cases.length === 0 ? "no test ran" : notPassed.length > 0 ? `${notPassed.length} test(s) did not pass: ${notPassed.slice(0, 3).map((c) => `${c.id} (${c.outcome}${c.reason ? `, ${c.reason}` : ""})`).join(", ")}` : null);
  return {
    checkout,
    ok: why === null,
    failure: why,
    per_rank: perRank,
    max_over_ranks: maxOverRanks(perRank),
    tests: cases.map((c) => ({ id: c.id, outcome: c.outcome })),
  };
}

/** Command form. */
export function measurementFromCommand(checkout: Measurement["checkout"], m: CommandMeasurement): Measurement {
  const perRank = m.ranks.map((r) => ({
    rank: r.rank,
    wall_time_s: r.wall_time_s,
    peak_memory_bytes: r.peak_memory_bytes,
    memory_kind: r.memory_kind,
    calls: r.calls,
    bytes: r.bytes,
    exit_code: r.exit_code,
    log_tail: r.log_tail,
  }));
  const bad = m.ranks.filter((r) => r.exit_code !== 0);
  let failure: string | null = null;
  if (m.timed_out) failure = "the command timed out on some rank (killed)";
  else if (bad.length > 0) {
    const r = bad[0]!;
    const last = r.log_tail.trim().split("\n").pop() || "(no output)";
    failure = `rank ${r.rank} exited ${r.exit_code ?? "by a signal"}: ${last} (per_rank[].log_tail has the end of each rank's output)`;
  } else if (m.ranks.every((r) => r.processes === 0)) {
    failure = `no Python process reported figures (the command must run Python, and exit normally)${m.ranks[0]?.probe_errors.length ? `: ${m.ranks[0].probe_errors[0]}` : ""}`;
  }
  return { checkout, ok: failure === null, failure, per_rank: perRank, max_over_ranks: maxOverRanks(perRank), tests: [] };
}

export function ratios(after: Measurement, before: Measurement): Ratio[] {
  const row = (metric: string, a: number | null | undefined, b: number | null | undefined): Ratio => ({
    metric,
    after: a ?? null,
    before: b ?? null,
    ratio: a !== null && a !== undefined && b ? a / b : null,
  });
  const ops = [...new Set([...Object.keys(after.max_over_ranks.calls), ...Object.keys(before.max_over_ranks.calls)])].sort();
  return [
    ...ops.flatMap((op) => [
      row(`calls.${op}`, after.max_over_ranks.calls[op] ?? 0, before.max_over_ranks.calls[op] ?? 0),
      row(`bytes.${op}`, after.max_over_ranks.bytes[op] ?? 0, before.max_over_ranks.bytes[op] ?? 0),
    ]),
    row("peak_memory_bytes", after.max_over_ranks.peak_memory_bytes, before.max_over_ranks.peak_memory_bytes),
    row("wall_time_s", after.max_over_ranks.wall_time_s, before.max_over_ranks.wall_time_s),
  ];
}

function fmt(metric: string, v: number | null): string {
  if (v === null) return "n/a";
  if (metric.startsWith("bytes.") || metric === "peak_memory_bytes") return formatBytes(v);
  if (metric === "wall_time_s") return `${v.toFixed(3)} s`;
  return String(v);
}

export function formatMeasurement(m: Measurement): string {
  const x = m.max_over_ranks;
  const ops = Object.keys(x.calls).sort();
  const coll = ops.length ? ops.map((op) => `${op} ${x.calls[op]} calls / ${formatBytes(x.bytes[op] ?? 0)}`).join(", ") : "no collective";
  return `${m.checkout}: ${coll}; peak memory ${x.peak_memory_bytes === null ? "n/a" : formatBytes(x.peak_memory_bytes)}; wall ${x.wall_time_s === null ? "n/a" : `${x.wall_time_s.toFixed(3)} s`} (max over ${m.per_rank.length} ranks)${m.ok ? "" : ` [NOT OK: ${m.failure?.split("\n")[0]}]`}`;
}

export function formatRatios(rows: Ratio[]): string {
  return rows.map((r) => `${r.metric}: ${fmt(r.metric, r.before)} -> ${fmt(r.metric, r.after)}${r.ratio === null ? "" : ` (x${r.ratio.toFixed(3)})`}`).join("\n");
}
