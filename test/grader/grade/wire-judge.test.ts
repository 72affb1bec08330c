import { describe, expect, it } from "vitest";
import type { WireCheck } from "../../../src/runner/ranks.js";
import type { SessionResult } from "../../../src/grader/grade/types.js";
import { WIRE_SLACK_BYTES, WIRE_SLACK_SHARE, unitAllowance, wireEvidence, wireReferences } from "../../../src/grader/grade/wire-judge.js";

/**
 * The wire verdict's two rules (wire-judge.ts) as pure functions over the launcher's records. The
 * records' figures here are the shape wire.py writes; the real kernel counts are exercised by
 * test/python/test_wire.py (the launcher's bound) and test/e2e/redteam-counts.test.ts (direct-backend:
 * the gold-referenced residual through the real CLI).
 */
const wire = (w: Partial<WireCheck>): WireCheck => ({ payload_bytes: 60e6, payload_bytes_min: 59e6, payload_bound: 118e6, bound_ratio: 0.5, verdict: false, expected_payload: 60e6, residual_bytes_max: 1e5, residual_bytes_judged: 0, retrans_segments: 10, counted_bytes: 113e6, calls: 4000, ...w });
const session = (file: string, w: WireCheck | undefined) => ({ file, wire: w }) as unknown as SessionResult;

describe("wire verdict", () => {
  it("gold's reference is its largest residual and payload over every calibration run, per session; skipped records give none", () => {
    const refs = wireReferences([
      [session("eager.probe", wire({ residual_bytes_max: 400_000, payload_bytes: 60.1e6 })), session("eager.official", wire({ skip: "network namespace not private" }))],
      [session("eager.probe", wire({ residual_bytes_max: 690_000, payload_bytes: 60.0e6 })), session("eager.official", undefined)],
    ]);
    expect(refs).toEqual({ "eager.probe": { residual_max: 690_000, payload_max: 60.1e6, units_max: {} } });
  });

  it("a session with fewer calls, groups or store requests than gold is owed their estimated framing; more are owed nothing", () => {
    const ref = wireReferences([[session("eager.probe", wire({ residual_bytes_max: -1.7e6, payload_bytes: 16e6, expected_units: { calls: 10_000, groups: 4, store_ops: 30 } }))], [session("eager.probe", wire({ residual_bytes_max: -1.8e6, payload_bytes: 16e6, expected_units: { calls: 10_800, groups: 4, store_ops: 20 } }))]])["eager.probe"]!;
    expect(ref.units_max).toEqual({ calls: 10_800, groups: 4, store_ops: 30 });
    const perUnit = { calls: 200, groups: 600, store_ops: 256 };
    // A patch that coalesces gold's small collectives: 1,000 calls where gold made up to 10,800.
    const coalesced = wire({ expected_payload: 16e6, expected_units: { calls: 1_000, groups: 4, store_ops: 30 }, expected_unit_bytes: perUnit, residual_bytes_judged: -0.46e6 });
    expect(unitAllowance(ref, coalesced)).toBe(200 * 9_800);
    expect(wireEvidence("eager.probe", coalesced, { reference: ref })).toEqual([]);
    // The same residual without that allowance would have read as smuggling (the held-out case it was found on).
    expect(wireEvidence("eager.probe", { ...coalesced, expected_unit_bytes: {} }, { reference: ref })).toHaveLength(1);
    // More calls than gold: nothing owed.
    expect(unitAllowance(ref, wire({ expected_units: { calls: 20_000, groups: 9, store_ops: 90 }, expected_unit_bytes: perUnit }))).toBe(0);
  });

  it("a residual beyond gold's by more than the slack is evidence; within it is not", () => {
    const reference = { residual_max: 690_000, payload_max: 61e6 };
    const allowed = 690_000 + WIRE_SLACK_SHARE * 61e6 + WIRE_SLACK_BYTES;
    expect(wireEvidence("eager.probe", wire({ residual_bytes_judged: allowed - 1 }), { reference })).toEqual([]);
    const [line, ...rest] = wireEvidence("eager.probe", wire({ residual_bytes_judged: 5.5e6 }), { reference });
    expect(rest).toEqual([]);
    expect(line).toMatch(/^eager\.probe: .* 5\.500 MB more than its counted collectives carry .* gold's own sessions left at most 0\.690 MB unexplained .*collectives run past the counters$/);
    // No reference for this session (an older calibration, a record gold did not take): the bound alone.
    expect(wireEvidence("eager.probe", wire({ residual_bytes_judged: 5.5e6 }))).toEqual([]);
  });

  it("the launcher's bound verdict is evidence on its own, without a reference", () => {
    const beyond = wire({ verdict: true, bound_ratio: 1.9 });
    expect(wireEvidence("eager.ws2.probe", beyond)).toEqual([expect.stringMatching(/more than 1\.25 × the .* can explain \(ratio 1\.9;/)]);
    expect(wireEvidence("eager.ws2.probe", wire({ verdict: false, bound_ratio: 1.2 }))).toEqual([]);
  });

  it("a record that was not taken is no evidence either way", () => {
    expect(wireEvidence("eager.probe", wire({ skip: "NCCL groups: their traffic is not on these sockets", verdict: true, residual_bytes_judged: 1e9 }), { reference: { residual_max: 0, payload_max: 1 } })).toEqual([]);
    expect(wireEvidence("eager.probe", undefined)).toEqual([]);
  });
});
