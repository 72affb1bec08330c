import type { CaseOutcome } from "../../runner/merge.js";
import type { WireCheck } from "../../runner/ranks.js";
import type { LaunchEvent, MergedCase } from "../../runner/merge.js";
import { hashEvidence, mapCaseId, unmapText, type Canary, type InstallMap } from "../workspace/test-renaming.js";
import { auditEvidence, type AuditRecord } from "./audit-evidence.js";

/**
 * The tamper verdict of one grading session (Contract E): a pure function from what the session
 * reported (per-rank cases, the launcher's independent records of each rank, launch events), the
 * install map, the session's canaries and the staged files' hashes before and after it, to evidence
 * lines. Any evidence marks the submission `tampered` (score 0).
 *
 * Evidence:
 * - a canary with the wrong outcome on a rank, or missing on a rank that neither crashed nor hung
 *   nor ran out of time (a kill only loses tests, it never turns a failure into a pass);
 * - a staged test, probe or canary file whose hash changed (or that vanished or appeared);
 * - a rank whose records disagree: pytest's exit status against the failures recorded, the recording
 *   plugin's counts against pytest's own summary line, the plugin's outcome of a test against
 *   pytest's own JUnit report (checked on a rank the launcher did not have to kill or restart);
 * - a rank whose pytest ended normally (exit 0, 1 or 5) without pytest's own JUnit report, its summary
 *   line or the plugin's collective totals: an undisturbed rank always leaves all three;
 * - a `group=` object the collectives refused (not a torch ProcessGroup: a Python object that would
 *   run its own collectives below one counted call);
 * - results that name a test that was never installed;
 * - a rank's audit channel: a refused in-memory forgery, or a channel cut short (audit-evidence.ts).
 */

export interface OutcomeCounts {
  passed: number;
  failed: number;
  error: number;
  skipped: number;
}

/** Contract A's RankIntegrity (sandbox/ranks.ts), as the verdict reads it. */
export interface RankIntegrityRecord {
  rank: number;
  /** The launcher session (0, then 1, 2... after restarts). */
  session?: number;
  exit_code: number | null;
  plugin: OutcomeCounts;
  pytest_junit: (OutcomeCounts & { outcomes: Record<string, CaseOutcome>; outcomes_truncated?: boolean }) | null;
  summary: OutcomeCounts | null;
  /** The rank's audit channel (audit-evidence.ts); null where it has none (torchrun). */
  audit?: AuditRecord | null;
  comm_written?: boolean;
  refused_groups?: string[];
  wire?: WireCheck;
}

export interface TamperInput {
  /** `<mode>.<session>`, for the evidence lines. */
  session: string;
  ranks: number;
  /** The merged cases as the ranks reported them (installed ids). */
  cases: readonly MergedCase[];
  integrity?: readonly RankIntegrityRecord[];
  events?: readonly LaunchEvent[];
  map: InstallMap;
  /** The canaries this session must report (those under its paths). */
  canaries: readonly Canary[];
  hashesBefore: Readonly<Record<string, string>>;
  hashesAfter: Readonly<Record<string, string>>;
  /** Installed → real text replacements beyond the map (the probe folder's name). */
  extra?: ReadonlyArray<[string, string]>;
  /** Node ids / files the plugin reported as collection errors (pytest's junit reports each as an error case). */
  collectionErrors?: readonly string[];
}

// fail_fast: a mutant's session the launcher stopped at its first failing case (runRanks stopOnFail,
// task check only): the canaries after it never ran, the counts are partial.
const DISTURBING = new Set(["hang", "crash", "run_timeout", "interrupted", "fail_fast"]);

/** Ranks whose session the launcher had to stop (kill, restart, out of time): counts there are partial. */
function disturbedRanks(events: readonly LaunchEvent[], ranks: number): Set<number> {
  const out = new Set<number>();
  for (const e of events) {
    if (!DISTURBING.has(e.kind)) continue;
    // A hang or crash restarts every rank; a run-wide event stops every rank.
    for (let r = 0; r < ranks; r++) out.add(r);
  }
  return out;
}

const failures = (c: OutcomeCounts) => c.failed + c.error;
const fmt = (c: OutcomeCounts) => `${c.passed} passed, ${c.failed} failed, ${c.error} errors, ${c.skipped} skipped`;

function integrityEvidence(rec: RankIntegrityRecord, cases: readonly MergedCase[], collectionErrors: ReadonlySet<string>, say: (s: string) => string): string[] {
  const out: string[] = [];
  const r = rec.rank;
  const junit = rec.pytest_junit;
  const exit = rec.exit_code;
  // pytest that ended by itself (tests passed, failed, or none collected) has written its JUnit report
  // and printed its summary line, and the plugin its collective totals: a missing one was removed.
  if (exit === 0 || exit === 1 || exit === 5) {
    const missing = [junit ? null : "pytest's JUnit report", rec.summary ? null : "pytest's summary line", rec.comm_written === false ? "the collective totals" : null].filter((x) => x !== null);
    if (missing.length) out.push(`rank ${r}: pytest exited ${exit} but ${missing.join(", ")} ${missing.length > 1 ? "are" : "is"} missing (removed or cut by code in the rank)`);
  }
  for (const g of rec.refused_groups ?? []) out.push(`rank ${r}: a collective was handed a group that is not a torch ProcessGroup: ${g}`);
  // rec.wire (the kernel's count of what the session sent) is judged per session, against gold's
  // calibration, by sessions.ts (wireEvidence): not here.
  if (exit === 0 && (failures(rec.plugin) > 0 || (rec.summary && failures(rec.summary) > 0) || (junit && failures(junit) > 0))) {
    out.push(`rank ${r}: pytest exited 0 although failures were recorded (plugin: ${fmt(rec.plugin)}${rec.summary ? `; summary: ${fmt(rec.summary)}` : ""})`);
  }
  if (exit === 1 && rec.summary && failures(rec.plugin) === 0 && failures(rec.summary) === 0 && (!junit || failures(junit) === 0)) {
    out.push(`rank ${r}: pytest exited 1 (tests failed) but no failure or error was recorded anywhere (plugin: ${fmt(rec.plugin)}; summary: ${fmt(rec.summary)})`);
  }
  // The launcher counts all three in the units of pytest's summary line (one per phase report pytest
  // counts: a teardown error after a passed call is one pass and one error, a collection error an
  // error), so on an honest run they are equal.
  const same = (a: OutcomeCounts, b: OutcomeCounts) => a.passed === b.passed && a.failed === b.failed && a.error === b.error && a.skipped === b.skipped;
  if (rec.summary && !same(rec.plugin, rec.summary)) out.push(`rank ${r}: the recording plugin's counts (${fmt(rec.plugin)}) disagree with pytest's summary line (${fmt(rec.summary)})`);
  if (junit && !same(rec.plugin, junit)) out.push(`rank ${r}: the recording plugin's counts (${fmt(rec.plugin)}) disagree with pytest's own JUnit report (${fmt(junit)})`);
  if (junit) {
    const mismatched: string[] = [];
    const seen = new Set<string>();
    for (const [id, o] of Object.entries(junit.outcomes)) {
      seen.add(id);
      // A file that failed to import: pytest's junit has an error case for it, the plugin a collection error.
      if (o === "error" && collectionErrors.has(id)) continue;
      const rc = cases.find((c) => c.id === id)?.ranks.find((x) => x.rank === r);
      const mine = rc?.outcome ?? "missing";
      if (mine !== o) mismatched.push(`${say(id)}: plugin ${mine}, junit ${o}`);
    }
    // The launcher caps the outcomes it sends: the other direction only when they are all there.
    if (!junit.outcomes_truncated) {
      for (const c of cases) {
        const rc = c.ranks.find((x) => x.rank === r);
        if (rc && rc.outcome !== "missing" && !seen.has(c.id)) mismatched.push(`${say(c.id)}: plugin ${rc.outcome}, not in pytest's junit`);
      }
    }
    if (mismatched.length) {
      out.push(`rank ${r}: the recording plugin and pytest's own JUnit report disagree on ${mismatched.length} test(s): ${mismatched.slice(0, 5).join("; ")}${mismatched.length > 5 ? "; …" : ""}`);
    }
  }
  return out;
}

export function tamperEvidence(input: TamperInput): string[] {
  const { map } = input;
  const say = (text: string) => unmapText(map, text, input.extra ?? []);
  const events = input.events ?? [];
  const out: string[] = [];

  // Canaries: every rank reports each one, with the outcome it must have.
  const disturbed = disturbedRanks(events, input.ranks);
  const brokenFiles = new Set((input.collectionErrors ?? []).map((e) => e.split("::")[0]!));
  for (const c of input.canaries) {
    const mc = input.cases.find((x) => x.id === c.installed);
    // A twin lives in a real test module: when that module does not import (base, a hollow patch),
    // neither it nor the test it runs is collected, an honest outcome.
    if (c.expected === "not_passed" && !mc && brokenFiles.has(c.installed.split("::")[0]!)) continue;
    const verb = c.expected === "passed" ? "pass" : c.expected === "failed" ? "fail" : "not pass";
    for (let r = 0; r < input.ranks; r++) {
      const rc = mc?.ranks.find((x) => x.rank === r);
      // A rank the launcher stopped: the canary it was in when killed (the launcher's own record,
      // `killed`) or never reached says nothing about the code under test.
      if (!rc || rc.outcome === "missing" || (rc.killed && disturbed.has(r))) {
        if (disturbed.has(r) || mc?.reason === "hang" || mc?.reason === "crash") continue;
        out.push(`${input.session}: canary ${c.real} (must ${verb}) was not reported by rank ${r}`);
      } else if (c.expected === "not_passed" ? rc.outcome === "passed" : rc.outcome !== c.expected) {
        out.push(`${input.session}: canary ${c.real} must ${verb} but is ${rc.outcome} on rank ${r}`);
      }
    }
  }

  // Results that name tests never installed.
  const strangers = input.cases.filter((c) => mapCaseId(map, c.id) === null).map((c) => say(c.id));
  if (strangers.length) {
    out.push(`${input.session}: the results name ${strangers.length} test(s) that were never installed: ${strangers.slice(0, 5).join(", ")}${strangers.length > 5 ? ", …" : ""}`);
  }

  // Independent records of each rank.
  for (const rec of input.integrity ?? []) {
    for (const e of auditEvidence(rec.rank, rec.exit_code, rec.audit, disturbed.has(rec.rank))) out.push(`${input.session}: ${e}`);
    if (disturbed.has(rec.rank)) continue;
    for (const e of integrityEvidence(rec, input.cases, new Set(input.collectionErrors ?? []), say)) out.push(`${input.session}: ${e}`);
  }

  for (const e of hashEvidence(input.hashesBefore, input.hashesAfter, say)) out.push(`${input.session}: ${e}`);
  return out;
}

/** At most `n` evidence lines, the rest counted. */
export function capEvidence(lines: readonly string[], n = 40): string[] {
  return lines.length <= n ? [...lines] : [...lines.slice(0, n), `… ${lines.length - n} more`];
}
