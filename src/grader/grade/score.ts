import { labelFailure } from "./labels.js";
import type {
  ApplyMethod,
  Calibration,
  CaseRecord,
  CollectionError,
  GoldCase,
  GradeResult,
  GradeStatus,
  GradedCase,
  PartialRun,
  SetScore,
  Suite,
} from "./types.js";

/**
 * Scoring: pure functions from (gold calibration, the submission's merged cases) to the result.
 * No I/O here — everything arrives as data.
 *
 * How gold's three calibration runs count:
 * - N_p is every case any gold run collected, including cases gold fails, skips or passes only
 *   sometimes (flaky); nothing is dropped.
 * - A case is *required* when gold passed it in every run. `resolved_strict` asks the submission to
 *   pass every required case; the paper rule compares the submission's passed count with the number
 *   of required cases (for a stable gold that is exactly gold's passed count).
 * - A flaky case the submission passes still counts in its `passed`; one it fails is not held
 *   against it (gold cannot pass it reliably either) and gets no failure label. Flaky ids are
 *   reported by calibration and in the result's meta, never hidden.
 */

export interface GoldView {
  id: string;
  suite: Suite;
  required: boolean;
  flaky: boolean;
  probeKind?: string;
}

export function goldView(cal: Pick<Calibration, "cases">): GoldView[] {
  return cal.cases.map((c: GoldCase) => {
    const flaky = new Set(c.outcomes).size > 1;
    return {
      id: c.id,
      suite: c.suite,
      required: c.outcomes.length > 0 && c.outcomes.every((o) => o === "passed"),
      flaky,
      ...(c.probe ? { probeKind: c.probe.kind } : {}),
    };
  });
}

/** Ids whose outcome differed between calibration runs. */
export function flakyIds(cases: readonly GoldCase[]): string[] {
  return cases.filter((c) => new Set(c.outcomes).size > 1).map((c) => c.id);
}

/** Score of one set of cases (Set A = official, Set B = official + probes) for a submission that ran. */
export function scoreSet(gold: readonly GoldView[], sub: ReadonlyMap<string, CaseRecord>): SetScore {
  const n = gold.length;
  const passed = gold.filter((g) => sub.get(g.id)?.outcome === "passed").length;
  const goldPassed = gold.filter((g) => g.required).length;
  return {
    n_cases: n,
    passed,
    score: n === 0 ? 0 : passed / n,
    resolved: passed >= goldPassed,
    resolved_strict: gold.every((g) => !g.required || sub.get(g.id)?.outcome === "passed"),
  };
}

/** A submission that never ran (missing, empty, inapplicable): 0 / N_p, never resolved. */
export function zeroSet(gold: readonly GoldView[]): SetScore {
  return { n_cases: gold.length, passed: 0, score: 0, resolved: false, resolved_strict: false };
}

/** A harness fault is not the model's failure: nothing is scored. */
export function unscoredSet(gold: readonly GoldView[]): SetScore {
  return { n_cases: gold.length, passed: null, score: null, resolved: null, resolved_strict: null };
}

/** A session an early stop skipped, as scoring needs it: a case in one of them never ran. */
export type SkippedSession = PartialRun["skipped_sessions"][number];

function inSkipped(g: GoldView, skipped: readonly SkippedSession[]): boolean {
  // Pass-to-pass cases run in the official sessions.
  const session: Suite = g.suite === "pass_to_pass" ? "official" : g.suite;
  return skipped.some((s) => s.suite === session && g.id.startsWith(s.idPrefix));
}

/** Per-case report over gold's cases, with a failure label where gold reliably passes and the submission does not. */
export function gradeCases(gold: readonly GoldView[], sub: ReadonlyMap<string, CaseRecord>, collectionErrors: readonly CollectionError[], lostPrefixes: readonly string[] = [], skipped: readonly SkippedSession[] = []): GradedCase[] {
  return gold.map((g) => {
    // A session skipped by an early stop: its cases did not run (not passed, not labelled).
    if (!sub.has(g.id) && inSkipped(g, skipped)) return { id: g.id, suite: g.suite, outcome: "not_run" as const };
    // A session whose records were lost: every case it held counts failed, as a crash of the run.
    const lost = !sub.has(g.id) && lostPrefixes.some((p) => g.id.startsWith(p));
    const c = sub.get(g.id) ?? (lost ? { id: g.id, suite: g.suite, outcome: "failed" as const, reason: "crash" as const, time_s: 0 } : undefined);
    const outcome = c?.outcome ?? "failed";
    const label = g.required && outcome !== "passed" ? labelFailure(g.id, c, collectionErrors, g.probeKind) : undefined;
    const killed = c && "stacks" in c && c.stacks?.length ? { reason: c.reason ?? "aborted", message: c.message ?? "", stacks: c.stacks } : undefined;
    return { id: g.id, suite: g.suite, outcome, ...(label ? { label } : {}), ...(killed ? { killed } : {}) };
  });
}

export interface SubmissionOutcome {
  task_id: string;
  status: GradeStatus;
  apply_method: ApplyMethod | null;
  reason?: string;
  /** The merged cases of every session (present when status is "graded" or "tampered"). */
  cases?: readonly CaseRecord[];
  collection_errors?: readonly CollectionError[];
  /** Case-id prefixes (`<mode>/`, "" with one mode) of sessions whose records were lost: their cases count failed, as crashes. */
  lost_prefixes?: readonly string[];
  tamper_evidence?: readonly string[];
  /** The world sizes the suites ran at (copied into the result). */
  world_sizes?: readonly number[];
  /**
   * An early stop (grade.ts stopEarly): the session it stopped after, of which suite, and the sessions
   * it skipped. Every suite with a session that stopped or was skipped is not resolved.
   */
  partial?: PartialRun;
}

/** A set that an early stop left incomplete: never resolved (the session that stopped failed a case gold passes). */
function unresolved(s: SetScore): SetScore {
  return { ...s, resolved: false, resolved_strict: false };
}

/** The whole result from gold and the submission's outcome. Top-level numbers are Set B's. */
export function scoreSubmission(gold: readonly GoldView[], run: SubmissionOutcome): GradeResult {
  // Set A: the PR's own tests and the pass-to-pass suite (a patch that breaks what passed before is
  // not resolved, whatever the new tests say); Set B adds the probes.
  const official = gold.filter((g) => g.suite !== "probe");
  const passToPass = gold.filter((g) => g.suite === "pass_to_pass");
  let setA: SetScore;
  let setB: SetScore;
  let setP2p: SetScore;
  let cases: GradedCase[];
  if (run.status === "graded") {
    const sub = new Map((run.cases ?? []).map((c) => [c.id, c]));
    setA = scoreSet(official, sub);
    setB = scoreSet(gold, sub);
    setP2p = scoreSet(passToPass, sub);
    cases = gradeCases(gold, sub, run.collection_errors ?? [], run.lost_prefixes ?? [], run.partial?.skipped_sessions ?? []);
    if (run.partial) {
      // Official sessions (the pass-to-pass modules among them) all come before the probe sessions
      // (sessions.ts): a stop in an official session leaves Set A incomplete; any stop leaves Set B incomplete.
      if (run.partial.stopped_suite === "official") {
        setA = unresolved(setA);
        // Pass-to-pass stands on its own cases: complete when every one of them ran (an official
        // session run whole, then the stop: how task check grades the base of a task that has them).
        if (!passToPass.every((g) => sub.has(g.id))) setP2p = unresolved(setP2p);
      }
      setB = unresolved(setB);
    }
  } else if (run.status === "tampered") {
    // Scores 0; the outcomes as the (untrusted) records had them are kept for review, unlabelled.
    const sub = new Map((run.cases ?? []).map((c) => [c.id, c]));
    setA = zeroSet(official);
    setB = zeroSet(gold);
    setP2p = zeroSet(passToPass);
    cases = gold.map((g) => ({ id: g.id, suite: g.suite, outcome: sub.get(g.id)?.outcome ?? "failed" }));
  } else {
    const set = run.status === "harness_fault" ? unscoredSet : zeroSet;
    setA = set(official);
    setB = set(gold);
    setP2p = set(passToPass);
    cases = gold.map((g) => ({ id: g.id, suite: g.suite, outcome: "not_run" as const }));
  }
  return {
    task_id: run.task_id,
    status: run.status,
    patch_applied: run.status === "graded" || run.status === "tampered" || (run.status === "harness_fault" && run.apply_method !== null),
    apply_method: run.apply_method,
    ...(run.reason ? { reason: run.reason } : {}),
    n_cases: setB.n_cases,
    passed: setB.passed,
    score: setB.score,
    resolved: setB.resolved,
    resolved_strict: setB.resolved_strict,
    official: setA,
    with_probes: setB,
    ...(passToPass.length ? { pass_to_pass: setP2p } : {}),
    tamper_evidence: run.status === "tampered" ? [...(run.tamper_evidence ?? [])] : [],
    cases,
    ...(run.world_sizes ? { world_sizes: [...run.world_sizes] } : {}),
    ...(run.partial ? { partial: { stopped_after: run.partial.stopped_after, skipped: [...run.partial.skipped] } } : {}),
  };
}

/** The reason without a leading `<status>: ` (the status is printed beside it: said once, not "inapplicable — inapplicable: ..."). */
export function reasonOnce(r: Pick<GradeResult, "status" | "reason">): string {
  const reason = r.reason ?? "";
  return reason.startsWith(`${r.status}: `) ? reason.slice(r.status.length + 2) : reason;
}
