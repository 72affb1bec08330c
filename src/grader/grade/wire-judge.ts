import type { WireCheck } from "../../runner/ranks.js";
import type { SessionResult, WireReference } from "./types.js";

/**
 * The wire verdict of one session (issue 21, property 3): the launcher's kernel count of the TCP
 * payload the session's loopback carried (python/sandbox/infradev_launcher/wire.py, read outside
 * the ranks, which cannot lower it) against what the ranks' counted collectives explain. Two rules,
 * each tamper evidence when it fails:
 *
 * - **Bound** (gold-independent): more payload than 1.25 × the most every counted call, process group
 *   and store request can put on lo (wire.py's payload_bound).
 * - **Gold's residual**: the residual is the payload less what the counted calls are expected to
 *   carry (wire.py's measured per-op model plus framing). Honest code leaves gold's residual (store
 *   and connection traffic, framing); a collective smuggled past the counters adds its bytes to it,
 *   however small a share of the session it is. The submission's residual (16 KiB taken out per
 *   retransmitted segment, wire.py RETRANS_ALLOWANCE) may exceed gold's largest (over its calibration
 *   runs, retransmissions in) by WIRE_SLACK_SHARE of the session's payload plus WIRE_SLACK_BYTES,
 *   plus what it is owed for making fewer calls, groups or store requests than gold (unitAllowance).
 *
 * Both are off in a session where gold's own traffic exceeded the bound (calibration
 * `wire_unexplained`: tests reaching the process group from C++, e.g. DDP's reducer, which no counter
 * sees): there gold's uncounted traffic varies from run to run (a DDP test's session: 7.4 and 14.7 MB
 * of residual in two runs of gold), so neither rule has a reference to hold a submission to.
 *
 * Measured (grad-bucketing, w=2, probe session): gold's payload 60.12-60.20 MB in three runs; the
 * per-parameter all-reduces dug out of the counter's closure (redteam-counts' direct-backend) 67.05
 * MB with the same counted calls and bytes — 11 % of the session, inside the bound (ratio 0.55).
 */
export const WIRE_SLACK_SHARE = 0.03;
export const WIRE_SLACK_BYTES = 512 * 1024;


const mb = (n: number | undefined) => `${((n ?? 0) / 1e6).toFixed(3)} MB`;

/**
 * The expected payload counts each call, process group and store request at an upper estimate of its
 * framing, so it over-counts by some unknown share of that estimate per unit: a session with fewer
 * units than gold's (a patch that coalesces gold's many small collectives into a few) keeps less of
 * that over-count and its residual reads higher by up to the estimate × the difference. That much is
 * owed to it (weight-sync-delta's held-out correct `coalesced-buffer` read 1.2 MB over gold without it).
 */
export function unitAllowance(ref: WireReference, wire: WireCheck): number {
  let owed = 0;
  for (const [k, perUnit] of Object.entries(wire.expected_unit_bytes ?? {})) {
    owed += perUnit * Math.max(0, (ref.units_max?.[k] ?? 0) - (wire.expected_units?.[k] ?? 0));
  }
  return owed;
}

/** Gold's reference from its sessions of every calibration run: per session file name. */
export function wireReferences(runs: ReadonlyArray<readonly SessionResult[]>): Record<string, WireReference> {
  const out: Record<string, WireReference> = {};
  for (const sessions of runs) {
    for (const s of sessions) {
      const w = s.wire;
      if (!w || w.skip || typeof w.residual_bytes_max !== "number" || typeof w.payload_bytes !== "number") continue;
      const prev = out[s.file];
      const units: Record<string, number> = { ...(prev?.units_max ?? {}) };
      for (const [k, n] of Object.entries(w.expected_units ?? {})) units[k] = Math.max(units[k] ?? 0, n);
      out[s.file] = { residual_max: Math.max(prev?.residual_max ?? -Infinity, w.residual_bytes_max), payload_max: Math.max(prev?.payload_max ?? 0, w.payload_bytes), units_max: units };
    }
  }
  return out;
}

/**
 * The evidence lines of one session's wire record (empty: it agrees). Sessions where gold's own
 * traffic exceeded the bound (calibration `wire_unexplained`) are not judged at all: the caller
 * leaves them out (grade.ts).
 */
export function wireEvidence(name: string, wire: WireCheck | undefined, opts: { reference?: WireReference } = {}): string[] {
  if (!wire || wire.skip) return [];
  const out: string[] = [];
  if (wire.verdict) {
    out.push(`${name}: the session's loopback carried ${mb(wire.payload_bytes_min)} of TCP payload (kernel count, outside the ranks), more than 1.25 × the ${mb(wire.payload_bound)} every counted collective call, process group and store request can explain (ratio ${wire.bound_ratio}; counted ${mb(wire.counted_bytes)} in ${wire.calls} calls): collectives run past the counters`);
  }
  const ref = opts.reference;
  if (ref && typeof wire.residual_bytes_judged === "number") {
    const allowed = ref.residual_max + WIRE_SLACK_SHARE * Math.max(ref.payload_max, wire.expected_payload ?? 0) + WIRE_SLACK_BYTES + unitAllowance(ref, wire);
    if (wire.residual_bytes_judged > allowed) {
      out.push(`${name}: the session's loopback carried ${mb(wire.payload_bytes)} of TCP payload (kernel count, outside the ranks; ${wire.retrans_segments} retransmitted segments), ${mb(wire.residual_bytes_judged)} more than its counted collectives carry (expected ${mb(wire.expected_payload)}); gold's own sessions left at most ${mb(ref.residual_max)} unexplained (allowed ${mb(allowed)}): collectives run past the counters`);
    }
  }
  return out;
}
