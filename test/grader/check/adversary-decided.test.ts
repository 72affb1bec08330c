import { describe, expect, it } from "vitest";
import { adversaryDecided } from "../../../src/grader/check/task-check.js";
import type { SessionPlan } from "../../../src/grader/grade/sessions.js";
import type { Calibration, SessionResult } from "../../../src/grader/grade/types.js";

/**
 * The stop rule of an adversarial control (task-check.ts adversaryDecided): its grade ends once Set A
 * is complete and a probe of every promise it breaks has failed where gold always passes.
 */

const cal = {
  cases: [
    { id: "ws1/official/t.py::a", suite: "official", outcomes: ["passed", "passed"] },
    { id: "ws1/probe/p.py::mean", suite: "probe", outcomes: ["passed", "passed"], probe: { promise: "mean", kind: "numerical" } },
    { id: "ws1/probe/p.py::bytes", suite: "probe", outcomes: ["passed", "passed"], probe: { promise: "bytes", kind: "resource" } },
    { id: "ws1/probe/p.py::flaky", suite: "probe", outcomes: ["passed", "failed"], probe: { promise: "time", kind: "resource" } },
    { id: "ws2/probe/p.py::bytes", suite: "probe", outcomes: ["passed", "passed"], probe: { promise: "bytes", kind: "resource" } },
  ],
} as unknown as Pick<Calibration, "cases">;

const plan = (name: "official" | "probe", ws: number) => ({ name, fileName: `eager.ws${ws}.${name}`, idPrefix: `ws${ws}/` }) as unknown as SessionPlan;
const session = (cases: Array<[string, string]>) => ({ cases: cases.map(([id, outcome]) => ({ id, outcome })) }) as unknown as SessionResult;
const plans = [plan("official", 1), plan("official", 2), plan("probe", 1), plan("probe", 2)];

function run(breaks: string[], sessions: SessionResult[]): number | null {
  const rule = adversaryDecided(cal, breaks);
  // As runSessions asks it: after each session that has sessions after it.
  for (const [i, s] of sessions.entries()) if (i + 1 < plans.length && rule(s, plans[i]!, plans.slice(i + 1))) return i;
  return null;
}

describe("adversaryDecided", () => {
  const official = session([["ws1/official/t.py::a", "passed"]]);

  it("stops after the first probe session that catches every promise it breaks, never before Set A is complete", () => {
    const caught = session([["ws1/probe/p.py::mean", "failed"], ["ws1/probe/p.py::bytes", "passed"]]);
    expect(run(["mean"], [official, official, caught, session([])])).toBe(2);
    // An official failure in a probe-like id cannot decide it: official sessions all run first.
    const rule = adversaryDecided(cal, ["mean"]);
    expect(rule(caught, plan("probe", 1), [plan("official", 2)])).toBe(false);
  });

  it("waits for every declared promise, across world sizes", () => {
    const s1 = session([["ws1/probe/p.py::mean", "failed"], ["ws1/probe/p.py::bytes", "passed"]]);
    const s2 = session([["ws2/probe/p.py::bytes", "error"]]);
    expect(run(["mean", "bytes"], [official, official, s1, s2])).toBe(null); // decided only at the last session: nothing left to skip
    expect(adversaryDecided(cal, ["mean", "bytes"])(s1, plans[2]!, plans.slice(3))).toBe(false);
  });

  it("a case gold does not always pass, a promise not declared, or no breaks at all never decide it", () => {
    const flaky = session([["ws1/probe/p.py::flaky", "failed"], ["ws1/probe/p.py::bytes", "failed"]]);
    expect(run(["time"], [official, official, flaky, session([])])).toBe(null);
    expect(run(["mean"], [official, official, flaky, session([])])).toBe(null);
    expect(run([], [official, official, flaky, session([])])).toBe(null);
  });
});
