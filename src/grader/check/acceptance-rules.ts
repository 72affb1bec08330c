import type { GradeResult } from "../grade/types.js";

/**
 * What the acceptance check asks of each kind of submission (Algorithm 2 of the InfraDev paper, with
 * positive controls): shared by `demo` and `task check`, so both hold a task to the same rules.
 */

export type AcceptanceKind = "golden" | "base" | "empty" | "hollow" | "hollow-generated" | "adversarial" | "alternative";

export interface FailingCases {
  /** Probe cases gold passes (every calibration run) and this submission does not, with their promise. */
  probes: ReadonlyArray<{ id: string; promise: string | null }>;
  /** Official cases (the pass-to-pass suite among them: Set A) gold passes and this submission does not. */
  official: readonly string[];
}

/** The cases of a result that gold passes and it does not: exactly those carrying a failure label. */
export function failingCases(result: GradeResult, promiseOf: (id: string) => string | null): FailingCases {
  const failing = result.cases.filter((c) => c.label);
  return {
    probes: failing.filter((c) => c.suite === "probe").map((c) => ({ id: c.id, promise: promiseOf(c.id) })),
    official: failing.filter((c) => c.suite !== "probe").map((c) => c.id),
  };
}

/** Why this submission breaks the rules for its kind; empty when it keeps them. */
export function acceptanceProblems(kind: AcceptanceKind, result: GradeResult, failing: FailingCases, breaks: readonly string[] = []): string[] {
  const out: string[] = [];
  if (result.status === "harness_fault") return [`harness fault: ${result.reason}`];
  // None of a task's own patches touches the harness: evidence against one is a grader or task bug.
  if (result.status === "tampered") return [`graded tampered (a task or grader bug): ${result.tamper_evidence.slice(0, 2).join("; ")}`];
  const list = (ids: readonly string[]) => `${ids.slice(0, 3).join(", ")}${ids.length > 3 ? `, … (${ids.length})` : ""}`;
  switch (kind) {
    case "golden":
      if (!(result.official.resolved_strict && result.with_probes.resolved_strict)) out.push("gold is not resolved (strict) in Set A and Set B");
      break;
    case "alternative":
      if (!result.official.resolved_strict) out.push(`not resolved (strict) in Set A: fails ${list(failing.official)}`);
      if (!result.with_probes.resolved_strict && failing.probes.length) out.push(`over-strict probe(s), a false reject: ${failing.probes.map((f) => `${f.id}${f.promise ? ` (${f.promise})` : ""}`).join(", ")}`);
      else if (!result.with_probes.resolved_strict && result.official.resolved_strict) out.push("not resolved (strict) in Set B");
      break;
    case "adversarial":
      if (!result.official.resolved) out.push("not resolved in Set A (an adversarial patch must pass the official tests: adversarial ≥ gold)");
      if (result.with_probes.resolved) out.push("resolved in Set B: no probe catches it");
      for (const promise of breaks) if (!failing.probes.some((f) => f.promise === promise)) out.push(`declares it breaks "${promise}", but no probe of that promise fails on it`);
      break;
    case "base":
      // The base may pass weak official tests (a performance PR's often do); the probes must catch it.
      if (result.with_probes.resolved) out.push("the pre-PR base is resolved in Set B: the probes do not test what the PR changes");
      // Pass-to-pass means passing before the PR too: a case the base fails belongs in official_tests (or a deselect).
      if (result.pass_to_pass && result.pass_to_pass.resolved_strict === false) {
        const p2p = result.cases.filter((c) => c.suite === "pass_to_pass" && c.outcome !== "passed");
        const failed = p2p.filter((c) => c.outcome !== "not_run");
        if (failed.length) out.push(`the pre-PR base fails pass-to-pass case(s) gold passes (fail-to-pass: move them to official_tests, or deselect them with a reason): ${list(failed.map((c) => `${c.id} (${c.outcome})`))}`);
        else out.push(`the pre-PR base's pass-to-pass case(s) did not run, so the check cannot tell whether they pass before the PR: ${list(p2p.map((c) => c.id))}`);
      }
      break;
    default:
      if (result.official.resolved || result.with_probes.resolved) out.push("resolved, but must not be");
      if (kind === "empty" && (result.score !== 0 || result.official.score !== 0)) out.push(`scores ${result.score}, not exactly 0`);
  }
  return out;
}
