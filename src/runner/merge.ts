/**
 * Merging one multi-rank session's per-rank records (from the launcher's result bundle) per test id.
 * The host parses no XML and reads no file of the sandbox: the records arrive as JSON in the bundle.
 */

export type CaseOutcome = "passed" | "failed" | "error" | "skipped";

/**
 * Per-test resources recorded by the probe plugin on one rank. (As before the bundle: the
 * measurements of a test the launcher killed, or whose call phase never ran, are null at run time;
 * the consumers in tools/ treat them with `??`.)
 */
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

/** One test on one rank, as the launcher's bundle carries it (python/sandbox/README.md, "Result bundle"). */
export interface RankRecord {
  nodeid: string;
  outcome: CaseOutcome;
  when?: string;
  message?: string;
  longrepr?: string;
  duration_s?: number;
  markers?: { probe?: ProbeMarker };
  session?: number;
  wall_time_s?: number | null;
  peak_memory_bytes?: number | null;
  memory_kind?: string | null;
  calls?: Record<string, number>;
  bytes?: Record<string, number>;
  /** Set on records the launcher wrote for a test it killed: "hang" | "crash" | "aborted" | ... */
  killed?: string;
  /** The bundle's cap cut this record to its essentials (no longrepr, no measurements). */
  reduced?: boolean;
}

export interface RankCase {
  rank: number;
  outcome: CaseOutcome | "missing";
  message: string;
  /** The failure's text, capped. */
  excerpt: string;
  resources?: RankResources;
  /** The launcher wrote this record: it stopped the rank while the test ran (hang, crash, aborted, fail_fast...). */
  killed?: string;
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
  kind: "hang" | "crash" | "run_timeout" | "interrupted" | "fail_fast";
  /** null for run-wide events (run_timeout, interrupted, a hang before any test started). */
  rank: number | null;
  test: string | null;
  after_s: number;
  detail: string;
  /**
   * A hang or run timeout: the torch.distributed call the stuck rank waits in and the ranks that did not
   * arrive, read by the launcher from the ranks' stacks (python/sandbox/infradev_launcher/hang.py).
   * A diagnosis, never a verdict: the stacks come from processes the code under test runs in.
   */
  collective?: { text: string; name: string; call_site: string | null; waiting: number[]; not_arrived: number[]; where: Record<string, string> };
}

const SEVERITY: Record<CaseOutcome, number> = { error: 3, failed: 2, passed: 1, skipped: 0 };
const OUTCOMES = new Set<string>(Object.keys(SEVERITY));

const EXCERPT_CHARS = 4000;

function excerpt(text: string): string {
  if (text.length <= EXCERPT_CHARS) return text;
  // The end of a traceback holds the assertion; keep the tail.
  return `[... ${text.length - EXCERPT_CHARS} chars omitted ...]\n${text.slice(-EXCERPT_CHARS)}`;
}

function headExcerpt(text: string): string {
  if (text.length <= EXCERPT_CHARS) return text;
  return `${text.slice(0, EXCERPT_CHARS)}\n[... ${text.length - EXCERPT_CHARS} chars omitted ...]`;
}

const str = (v: unknown): string => (typeof v === "string" ? v : "");
const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) ? v : null);

function counter(v: unknown): Record<string, number> {
  const out: Record<string, number> = {};
  if (v && typeof v === "object" && !Array.isArray(v)) {
    for (const [k, n] of Object.entries(v as Record<string, unknown>)) if (typeof n === "number" && Number.isFinite(n)) out[k] = n;
  }
  return out;
}

function resourcesOf(rec: RankRecord): RankResources | undefined {
  if (rec.reduced) return undefined;
  return {
    wall_time_s: num(rec.wall_time_s) as number,
    peak_memory_bytes: num(rec.peak_memory_bytes) as number,
    memory_kind: (typeof rec.memory_kind === "string" ? rec.memory_kind : null) as string,
    calls: counter(rec.calls),
    bytes: counter(rec.bytes),
  };
}

function probeOf(rec: RankRecord | undefined): ProbeMarker | undefined {
  const p = rec?.markers?.probe;
  if (!p || typeof p !== "object") return undefined;
  return { promise: str(p.promise), kind: str(p.kind) };
}

/**
 * Merges the per-rank records of one multi-rank session, per test id:
 * error > failed > passed > skipped; a test missing on any rank counts as failed (the rank crashed or
 * hung before reaching it); time is the max over ranks. Launch events name hangs and crashes.
 */
export function mergeRankReports(
  perRank: RankRecord[][],
  opts: {
    events?: LaunchEvent[];
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
  for (const id of opts.collected ?? []) if (typeof id === "string") add(id);
  const byRank = perRank.map((records) => {
    const m = new Map<string, RankRecord>();
    for (const r of records) {
      if (!r || typeof r.nodeid !== "string") continue;
      add(r.nodeid);
      m.set(r.nodeid, r);
    }
    return m;
  });
  const events = opts.events ?? [];

  return ids.map((id) => {
    const ranks: RankCase[] = byRank.map((m, rank) => {
      const c = m.get(id);
      if (!c) return { rank, outcome: "missing", message: "test did not run on this rank (crash or hang before it)", excerpt: "" };
      const outcome: CaseOutcome = OUTCOMES.has(c.outcome) ? c.outcome : "error";
      const message = str(c.message);
      const resources = resourcesOf(c);
      const killed = typeof c.killed === "string" && c.killed ? c.killed : undefined;
      // A record the launcher wrote when it killed the rank: its message, then the stacks it dumped,
      // innermost frame first; the head is what says where the rank was.
      const text = str(c.longrepr) || message;
      return { rank, outcome, message, excerpt: outcome === "passed" ? "" : typeof c.killed === "string" && c.killed ? headExcerpt(text) : excerpt(text), ...(resources ? { resources } : {}), ...(killed ? { killed } : {}) };
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
    const timeSec = Math.max(0, ...byRank.map((m) => num(m.get(id)?.duration_s) ?? 0));
    const marker = byRank.map((m) => probeOf(m.get(id))).find(Boolean);
    return { id, outcome, ...(reason ? { reason } : {}), timeSec, ranks, ...(marker ? { probe: marker } : {}) };
  });
}
