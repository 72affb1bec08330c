import type { CaseOutcome, JUnitCase } from "./junit.js";

/** Per-test resources recorded by the probe plugin on one rank. */
export interface RankResources {
  wall_time_s: number;
  peak_memory_bytes: number;
  memory_kind: string;
  calls: Record<string, number>;
  bytes: Record<string, number>;
}

export interface ProbeMarker {
  promise: string;
  kind: string;
}

export interface RankCase {
  rank: number;
  outcome: CaseOutcome | "missing";
  message: string;
  /** The failure's text, capped. */
  excerpt: string;
  resources?: RankResources;
}

export interface MergedCase {
  id: string;
  outcome: CaseOutcome;
  /** Why the merged outcome is what it is, when not passed: "hang", "crash", "missing on rank 1"... */
  reason?: "hang" | "crash" | "missing";
  timeSec: number;
  ranks: RankCase[];
  probe?: ProbeMarker;
}

export interface LaunchEvent {
  kind: "hang" | "crash" | "run_timeout" | "interrupted";
  /** null for run-wide events (run_timeout, interrupted, a hang before any test started). */
  rank: number | null;
  test: string | null;
  after_s: number;
  detail: string;
}

const SEVERITY: Record<CaseOutcome, number> = { error: 3, failed: 2, passed: 1, skipped: 0 };

const EXCERPT_CHARS = 4000;

function excerpt(text: string): string {
  if (text.length <= EXCERPT_CHARS) return text;
  // The end of a traceback holds the assertion; keep the tail.
  return `[... ${text.length - EXCERPT_CHARS} chars omitted ...]\n${text.slice(-EXCERPT_CHARS)}`;
}

/**
 * Merges the per-rank JUnit results of one multi-rank session, per test id:
 * error > failed > passed > skipped; a test missing on any rank counts as failed (the rank crashed or
 * hung before reaching it); time is the max over ranks. Launch events name hangs and crashes.
 */
export function mergeRankReports(
  perRank: JUnitCase[][],
  opts: {
    events?: LaunchEvent[];
    resources?: Array<Record<string, RankResources & { markers?: { probe?: ProbeMarker } }>>;
    /** Ids collected on rank 0 (so a test no rank reached still appears, as missing). */
    collected?: string[];
  } = {},
): MergedCase[] {
  const ids: string[] = [];
  const seen = new Set<string>();
  const add = (id: string) => {
    if (!seen.has(id)) {
      seen.add(id);
      ids.push(id);
    }
  };
  for (const id of opts.collected ?? []) add(id);
  for (const cases of perRank) for (const c of cases) add(c.id);
  const byRank = perRank.map((cases) => new Map(cases.map((c) => [c.id, c])));
  const events = opts.events ?? [];

  return ids.map((id) => {
    const ranks: RankCase[] = byRank.map((m, rank) => {
      const c = m.get(id);
      const res = opts.resources?.[rank]?.[id];
      const resources = res
        ? { wall_time_s: res.wall_time_s, peak_memory_bytes: res.peak_memory_bytes, memory_kind: res.memory_kind, calls: res.calls ?? {}, bytes: res.bytes ?? {} }
        : undefined;
      if (!c) return { rank, outcome: "missing", message: "test did not run on this rank (crash or hang before it)", excerpt: "", resources };
      return { rank, outcome: c.outcome, message: c.message, excerpt: c.outcome === "passed" ? "" : excerpt(c.text || c.message), resources };
    });
    let outcome: CaseOutcome = "skipped";
    let anyMissing = false;
    for (const r of ranks) {
      const o: CaseOutcome = r.outcome === "missing" ? "failed" : r.outcome;
      if (r.outcome === "missing") anyMissing = true;
      if (SEVERITY[o] > SEVERITY[outcome]) outcome = o;
    }
    if (ranks.length === 0) outcome = "failed";
    const event = events.find((e) => e.test === id && (e.kind === "hang" || e.kind === "crash"));
    let reason: MergedCase["reason"];
    if (event) {
      reason = event.kind as "hang" | "crash";
      if (outcome === "passed" || outcome === "skipped") outcome = "error";
    } else if (anyMissing) reason = "missing";
    const timeSec = Math.max(0, ...perRank.map((_, r) => byRank[r]!.get(id)?.timeSec ?? 0));
    const marker = opts.resources?.map((r) => r[id]?.markers?.probe).find(Boolean);
    return { id, outcome, ...(reason ? { reason } : {}), timeSec, ranks, ...(marker ? { probe: marker } : {}) };
  });
}
