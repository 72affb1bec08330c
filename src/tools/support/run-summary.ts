import { z } from "zod";
import type { LaunchEvent, MergedCase, RankResources } from "../../runner/merge.js";
import type { RunRanksResult } from "../../runner/ranks.js";
import { capText } from "./result.js";

/** Shared output pieces of pytest_run and measure. */

export const CountsByOp = z.record(z.string(), z.number()).describe("per collective / p2p op name (all_reduce, broadcast, ...)");

export const RankResourcesSchema = z.object({
  rank: z.number().int(),
  wall_time_s: z.number().nullable(),
  peak_memory_bytes: z.number().nullable(),
  memory_kind: z.string().nullable().describe("cuda (allocator peak) or host_rss"),
  calls: CountsByOp,
  bytes: CountsByOp,
});
export type RankResourcesOut = z.infer<typeof RankResourcesSchema>;

export const EventSchema = z.object({
  kind: z.string().describe("hang | crash | run_timeout | interrupted"),
  rank: z.number().int().nullable().describe("null for run-wide events (run_timeout, interrupted)"),
  test: z.string().nullable(),
  after_s: z.number(),
  detail: z.string(),
});

export const TestResultSchema = z.object({
  id: z.string(),
  outcome: z.enum(["passed", "failed", "error", "skipped"]),
  reason: z.string().nullable().describe("hang, crash or missing (the test never ran on some rank), else null"),
  time_sec: z.number(),
  failures: z
    .array(z.object({ rank: z.number().int(), outcome: z.string(), message: z.string(), excerpt: z.string() }))
    .describe("one entry per rank where the test did not pass"),
  resources: z.array(RankResourcesSchema).describe("per rank: wall time, peak memory, collective calls and bytes"),
});
export type TestResult = z.infer<typeof TestResultSchema>;

export const SummarySchema = z.object({
  total: z.number().int(),
  passed: z.number().int(),
  failed: z.number().int(),
  error: z.number().int(),
  skipped: z.number().int(),
  hangs: z.number().int(),
});

const EXCERPT_CHARS = 3000;

export function toRankResources(rank: number, r: RankResources | undefined): RankResourcesOut {
  return {
    rank,
    wall_time_s: r?.wall_time_s ?? null,
    peak_memory_bytes: r?.peak_memory_bytes ?? null,
    memory_kind: r?.memory_kind ?? null,
    calls: { ...(r?.calls ?? {}) },
    bytes: { ...(r?.bytes ?? {}) },
  };
}

export function toTestResult(c: MergedCase): TestResult {
  return {
    id: c.id,
    outcome: c.outcome,
    reason: c.reason ?? null,
    time_sec: c.timeSec,
    failures: c.ranks
      .filter((r) => r.outcome !== "passed" && r.outcome !== "skipped")
      .map((r) => ({ rank: r.rank, outcome: r.outcome, message: capText(r.message, 500).text, excerpt: capText(r.excerpt, EXCERPT_CHARS).text })),
    resources: c.ranks.filter((r) => r.resources).map((r) => toRankResources(r.rank, r.resources)),
  };
}

export function summarize(cases: MergedCase[], events: LaunchEvent[]): z.infer<typeof SummarySchema> {
  const count = (o: string) => cases.filter((c) => c.outcome === o).length;
  return {
    total: cases.length,
    passed: count("passed"),
    failed: count("failed"),
    error: count("error"),
    skipped: count("skipped"),
    hangs: events.filter((e) => e.kind === "hang").length,
  };
}

export function toEvents(events: LaunchEvent[]): z.infer<typeof EventSchema>[] {
  return events.map((e) => ({ kind: e.kind, rank: e.rank, test: e.test ?? null, after_s: e.after_s, detail: e.detail }));
}

/** Failing tests first (that is what the agent reads), then the rest in collection order. */
export function orderForReport(tests: TestResult[]): TestResult[] {
  const bad = tests.filter((t) => t.outcome === "failed" || t.outcome === "error");
  return [...bad, ...tests.filter((t) => !(t.outcome === "failed" || t.outcome === "error"))];
}

export function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  if (n < 1024 ** 3) return `${(n / 1024 / 1024).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(2)} GiB`;
}

/** A collection error the launcher reported (its shape is the launcher's; keep the text). */
export function collectionErrorsOf(run: RunRanksResult): string[] {
  const errs = run.launch?.collection_errors ?? [];
  return errs.map((e) => (typeof e === "string" ? e : JSON.stringify(e)));
}
