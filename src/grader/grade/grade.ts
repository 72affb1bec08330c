import { copyFileSync, existsSync, mkdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { HarnessFault, calibrate } from "./calibrate.js";
import { clearArtifacts, sha256, taskContentHash } from "../../lib/files.js";
import { readJsonFile, writeJsonAtomic } from "../../lib/json.js";
import { fingerprintHash, hardwareFingerprint } from "../workspace/fingerprint.js";
import { runControl, runSubmission, type SandboxFactory } from "./pipeline.js";
import { goldView, scoreSubmission, type GoldView, type SubmissionOutcome } from "./score.js";
import { gradedWorldSizes, worldSizesTag, type SessionPlan, type StopRule } from "./sessions.js";
import type { ConfigRevert, PytestPin } from "../workspace/harness-files.js";
import type { Calibration, GradeResult, HardwareFingerprint, PartialRun, SessionResult } from "./types.js";
import type { Progress } from "../../lib/progress.js";
import { scanPatchForTampering, type TamperFinding } from "./tamper-scan.js";
import { wireEvidence } from "./wire-judge.js";
import type { WireCheck } from "../../runner/ranks.js";

/**
 * `grade`: one submission of one task, end to end. Artifacts, under constant names:
 *
 *   <out>/<task_id>/<submission-hash>[-ws<N>…]/   (the suffix when not at the task's own world sizes)
 *     submission.patch   the patch as given        apply.json / apply.log   how it applied
 *     sessions/<mode>[.ws<N>].<session>.json  merged cases of each finished session (resume points),
 *                        in real ids, with its canaries and tamper evidence
 *     control/           the control run on the base, when a session lost its records
 *     logs/<mode>.<session>/          the launcher's files (rank logs, JUnit, launch.json)
 *     meta.json          task hash, calibration, flaky gold cases, reverted test edits and
 *                        pytest-affecting files (reverted_test_config), the pytest pin, timings
 *     result.json        the result (what --json prints); written last, so it marks completion
 *
 * A complete result for the same task content and calibration is reused; a run killed midway
 * resumes from the session files (the workspace itself is rebuilt: it is cheap and deterministic).
 */

export interface GradeOptions {
  task: GraderTask;
  /** null: no patch was produced (scores 0 / N_p as `missing_patch`). */
  patchFile: string | null;
  /**
   * For the acceptance check, not for submissions: run the suites on the pre-PR base as it is
   * (patchFile is ignored) and score what happens, where an empty patch is scored 0 unseen.
   */
  baseAsIs?: boolean;
  outDir: string;
  sandboxFactory: SandboxFactory;
  calibrationDir?: string;
  /** A calibration the caller already has (demo: one per task). */
  calibration?: Calibration;
  fingerprint?: HardwareFingerprint;
  taskHash?: string;
  /** Grade again: a complete earlier result and the session files of this submission are removed first. */
  force?: boolean;
  /** The world sizes to grade at (default: the task's, sessions.ts gradedWorldSizes; `--ranks N` gives [N]). */
  worldSizes?: readonly number[];
  /**
   * For the check's mutants: stop after the first session in which a case gold passes in every
   * calibration run did not pass (shouldStopEarly); the result then carries `partial`. Each session
   * itself stops at the first such case (fail fast: failFastIds) unless `failFast` is false.
   */
  stopEarly?: boolean;
  /** With stopEarly: false stops between sessions only (bench/task_check_wall.ts's "before" arm). */
  failFast?: boolean;
  /**
   * The check's controls: a rule of their own for stopping between sessions once the verdict the
   * check needs is decided (task-check.ts: an adversarial patch once Set A is complete and a probe of
   * every promise it breaks has failed). Like stopEarly, a stop makes the result `partial`.
   */
  stopWhen?: StopRule;
  onProgress?: Progress;
  signal?: AbortSignal;
}

/**
 * Version of the rules a result was graded under; a result from other rules is graded again.
 * 2: pytest-affecting files outside the test dirs restored, sessions pinned to the base's config.
 * 3: tests staged read-only under random names with canaries; `tampered`; lost records are the
 *    submission's unless a control run loses them too.
 * 4: official tests and probes in separate sessions, each in a fresh sandbox over the same
 *    post-install workspace (a patch cannot tell them apart by order or left-over state).
 * 5: every suite at each graded world size (ids `ws<N>/…` when not just `[ranks]`); early stop (`partial`).
 * 6: the probes beside the official tests, at their depth (a submission that behaves only for callers
 *    one folder deeper, or in another folder, was resolved under 5); pass_to_pass counted in Set A.
 * 7: golden-differential rules judged on the host against golden's records from a session of its own
 *    (under 6 golden's package was staged beside the probes, where a submission could reach it).
 * 8: the wire verdict: a session whose loopback carried more TCP payload than 1.25 × what its counted
 *    collectives, groups and store requests can explain is `tampered` (launcher's kernel count,
 *    wire.py), except in sessions where gold's own traffic exceeded the bound too.
 */
export const GRADING_RULES = 8;

export interface GradeMeta {
  grading_rules: number;
  task_hash: string;
  fingerprint_hash: string;
  calibration_created_at: string;
  submission_hash: string;
  patch_file: string | null;
  world_sizes: number[];
  /** Graded with stopEarly; `partial` when it did stop (a partial result is reused only by another stopEarly grade). */
  stop_early: boolean;
  partial?: Pick<PartialRun, "stopped_after" | "skipped">;
  flaky_gold_cases: string[];
  reverted_test_edits: string[];
  /** Pytest-affecting files outside the test dirs the submission touched: restored to base or removed. */
  reverted_test_config: ConfigRevert[];
  /** Added lines that reach for the grading harness (grader/tamper-scan.ts): for a reviewer, not scored. */
  tamper_findings: TamperFinding[];
  /** The arguments that pinned the sessions to the base's pytest config (null when nothing ran). */
  pytest_pin: PytestPin | null;
  reused_sessions: string[];
  harness_error?: string;
  /** Sessions whose records were lost, and what the control run on the base said. */
  lost_records?: string[];
  control?: string;
  duration_s: number;
}

export interface GradeOutcome {
  result: GradeResult;
  artifactDir: string;
  /** True when a complete earlier result was returned without running anything. */
  reused: boolean;
}

/** The artifact folder of a submission that gave no patch at all (the same input every time). */
export const MISSING_HASH = "missing";
/** The artifact folder of the base run as it is (baseAsIs). */
export const BASE_AS_IS = "base-as-is";

/**
 * The artifact folder's name: the patch's hash; with no bytes, `missing` when no patch was given,
 * else `missing-<hash of the path>`, so two absent files never share a result.
 */
export function submissionHash(bytes: Uint8Array | null, missingPath: string | null = null): string {
  if (bytes !== null) return sha256(bytes).slice(0, 16);
  return missingPath === null ? MISSING_HASH : `${MISSING_HASH}-${sha256(missingPath).slice(0, 16)}`;
}

/**
 * The early stop's decision after one session (pure): some case of this session that gold passed in
 * every calibration run did not pass. A session's cases are gold's of its suite under its id prefix.
 */
export function shouldStopEarly(gold: readonly GoldView[], session: Pick<SessionResult, "cases">, plan: Pick<SessionPlan, "name" | "idPrefix">): boolean {
  const outcome = new Map(session.cases.map((c) => [c.id, c.outcome]));
  return requiredIn(gold, plan).some((id) => outcome.get(id) !== "passed");
}

/** The cases of one session gold passes in every calibration run (with the plan's id prefix). */
function requiredIn(gold: readonly GoldView[], plan: Pick<SessionPlan, "name" | "idPrefix">): string[] {
  return gold.filter((g) => g.required && g.suite === plan.name && g.id.startsWith(plan.idPrefix)).map((g) => g.id);
}

/**
 * The early stop inside a session (pure): the real ids, without the plan's prefix, at whose first
 * failure the launcher stops the session — every case of it gold passes in every calibration run.
 */
export function failFastIds(gold: readonly GoldView[], plan: Pick<SessionPlan, "name" | "idPrefix">): string[] {
  return requiredIn(gold, plan).map((id) => id.slice(plan.idPrefix.length));
}

/** A patch with nothing in it (whitespace only). */
export function isEmptyPatch(bytes: Uint8Array): boolean {
  return Buffer.from(bytes).toString("latin1").trim() === "";
}

export async function gradeSubmission(opts: GradeOptions): Promise<GradeOutcome> {
  const { task } = opts;
  const started = Date.now();
  const say: Progress = (msg, kind) => opts.onProgress?.(msg, kind);
  const bytes = !opts.baseAsIs && opts.patchFile !== null && existsSync(opts.patchFile) && statSync(opts.patchFile).isFile() ? readFileSync(opts.patchFile) : null;
  const hash = opts.baseAsIs ? BASE_AS_IS : submissionHash(bytes, opts.patchFile);
  const worldSizes = opts.worldSizes ? [...opts.worldSizes].sort((a, b) => a - b) : gradedWorldSizes(task.fullSpec);
  const artifactDir = join(opts.outDir, task.id, `${hash}${worldSizesTag(task.fullSpec, worldSizes)}`);
  const taskHash = opts.taskHash ?? taskContentHash(task.taskDir);
  const fingerprint = opts.fingerprint ?? opts.calibration?.fingerprint ?? (await hardwareFingerprint(task, opts.sandboxFactory));
  const fpHash = fingerprintHash(fingerprint);

  // --force: nothing of an earlier grade is reused (result, sessions, logs); workspace.path stays so
  // that the next workspace build still removes a killed run's temp workspace.
  if (opts.force) clearArtifacts(artifactDir);
  const previous = readJsonFile<GradeResult>(join(artifactDir, "result.json"));
  const previousMeta = readJsonFile<GradeMeta>(join(artifactDir, "meta.json"));
  const sameWorldSizes = previousMeta?.world_sizes?.join(",") === worldSizes.join(",");
  // This grade may stop before its last session (the check's mutants and controls).
  const mayStop = opts.stopEarly === true || opts.stopWhen !== undefined;
  // A partial result (stopped early) answers only another early-stopping grade.
  const complete = !previous?.partial || mayStop;
  if (previous && previousMeta && previousMeta.grading_rules === GRADING_RULES && previousMeta.task_hash === taskHash && previousMeta.fingerprint_hash === fpHash && sameWorldSizes && complete && previous.status !== "harness_fault") {
    say(`complete result found, reusing ${join(artifactDir, "result.json")}`);
    return { result: previous, artifactDir, reused: true };
  }
  mkdirSync(artifactDir, { recursive: true });
  if (bytes !== null) copyFileSync(opts.patchFile!, join(artifactDir, "submission.patch"));

  let calibration = opts.calibration;
  if (calibration && calibration.world_sizes?.join(",") !== worldSizes.join(",")) {
    throw new Error(`${task.id}: the calibration given was made at world sizes [${calibration.world_sizes?.join(", ") ?? "?"}], this grade is at [${worldSizes.join(", ")}]: calibrate at the same world sizes`);
  }
  if (!calibration) {
    try {
      const handle = await calibrate({ task, cacheDir: opts.calibrationDir, sandboxFactory: opts.sandboxFactory, fingerprint, taskHash, worldSizes, onProgress: say, signal: opts.signal });
      if (!handle.cached) say(`calibrated gold (${handle.calibration.runs} runs) → ${handle.file}`);
      calibration = handle.calibration;
    } catch (e) {
      if (!(e instanceof HarnessFault)) throw e;
      // Without gold there is no N_p; the fault is reported, nothing is scored.
      const result = scoreSubmission([], { task_id: task.id, status: "harness_fault", apply_method: null, reason: e.message, world_sizes: worldSizes });
      return { result, artifactDir, reused: false };
    }
  }
  const gold = goldView(calibration);

  let outcome: SubmissionOutcome;
  let reverted: string[] = [];
  let revertedConfig: ConfigRevert[] = [];
  let pin: PytestPin | null = null;
  let reusedSessions: string[] = [];
  let harnessError: string | undefined;
  let lost: string[] = [];
  let control: string | undefined;
  let partial: PartialRun | undefined;
  if (bytes === null && !opts.baseAsIs) {
    outcome = { task_id: task.id, status: "missing_patch", apply_method: null, reason: opts.patchFile ? `patch file ${opts.patchFile} does not exist or is not a file` : "no patch was submitted" };
  } else if (bytes !== null && isEmptyPatch(bytes)) {
    outcome = { task_id: task.id, status: "empty_patch", apply_method: null, reason: "the patch is empty" };
  } else {
    const run = await runSubmission({
      task,
      runKey: `${taskHash}:${fpHash}`,
      patchFile: opts.baseAsIs ? null : join(artifactDir, "submission.patch"),
      artifactDir,
      sandboxFactory: opts.sandboxFactory,
      worldSizes,
      ...(opts.stopEarly ? { stopWhen: (s: SessionResult, p: SessionPlan) => shouldStopEarly(gold, s, p) } : opts.stopWhen ? { stopWhen: opts.stopWhen } : {}),
      ...(opts.stopEarly && opts.failFast !== false ? { failFast: (p: SessionPlan) => failFastIds(gold, p) } : {}),
      // The wire verdict against gold's calibration: the bound and gold's residual in the same session
      // (wire-judge.ts); neither where gold's own traffic exceeded the bound (its uncounted traffic,
      // DDP's reducer say, varies from run to run: no reference to hold a submission to).
      wireJudge: (p: SessionPlan, wire: WireCheck | undefined) =>
        (calibration.wire_unexplained ?? []).includes(p.fileName) ? [] : wireEvidence(p.fileName, wire, { reference: calibration.wire_reference?.[p.fileName] }),
      onProgress: say,
      signal: opts.signal,
    });
    if (run.kind === "inapplicable") {
      outcome = { task_id: task.id, status: "inapplicable", apply_method: null, reason: run.reason };
    } else {
      reverted = run.revertedTestEdits;
      revertedConfig = run.revertedTestConfig;
      pin = run.pytestPin;
      reusedSessions = run.reusedSessions;
      harnessError = run.harnessError;
      lost = run.lostRecords;
      partial = run.partial;
      if (run.harnessError) {
        outcome = { task_id: task.id, status: "harness_fault", apply_method: run.method, reason: `harness fault (not the submission's): ${run.harnessError}` };
      } else if (run.tamperEvidence.length) {
        const n = run.tamperEvidence.length;
        outcome = { task_id: task.id, status: "tampered", apply_method: run.method, reason: `tampered: ${n} piece(s) of evidence that the code under test changed the tests or their recorded outcomes`, cases: run.cases, tamper_evidence: run.tamperEvidence, ...(run.partial ? { partial: run.partial } : {}) };
      } else {
        const graded: SubmissionOutcome = { task_id: task.id, status: "graded", apply_method: run.method, cases: run.cases, collection_errors: run.collectionErrors, ...(run.partial ? { partial: run.partial } : {}) };
        outcome = graded;
        if (run.lostRecords.length) {
          // Lost records are the submission's, unless the same harness loses them on the base too.
          const lostSession = run.sessions.find((x) => x.lost_records)!;
          const ctl = await runControl({ task, sandboxFactory: opts.sandboxFactory, mode: lostSession.mode, ranks: lostSession.ranks, artifactDir: join(artifactDir, "control"), onProgress: say, signal: opts.signal });
          control = ctl.ok ? "the control run (canaries only, fresh base workspace) kept its records" : ctl.why;
          outcome = ctl.ok
            ? { ...graded, lost_prefixes: run.lostPrefixes, reason: `records lost: ${run.lostRecords.join("; ")} (the control run on the base kept its records: the submission's doing; those cases count failed)` }
            : { task_id: task.id, status: "harness_fault", apply_method: run.method, reason: `harness fault (not the submission's): records lost: ${run.lostRecords.join("; ")}; ${ctl.why}` };
        }
      }
    }
  }
  const result = scoreSubmission(gold, { ...outcome, world_sizes: worldSizes });
  const meta: GradeMeta = {
    grading_rules: GRADING_RULES,
    task_hash: taskHash,
    fingerprint_hash: fpHash,
    calibration_created_at: calibration.created_at,
    submission_hash: hash,
    patch_file: opts.baseAsIs ? null : opts.patchFile,
    world_sizes: worldSizes,
    stop_early: mayStop,
    ...(partial ? { partial: { stopped_after: partial.stopped_after, skipped: partial.skipped } } : {}),
    flaky_gold_cases: calibration.flaky,
    reverted_test_edits: reverted,
    reverted_test_config: revertedConfig,
    tamper_findings: bytes !== null && !isEmptyPatch(bytes) ? scanPatchForTampering(Buffer.from(bytes).toString("utf8")) : [],
    pytest_pin: pin,
    reused_sessions: reusedSessions,
    ...(harnessError ? { harness_error: harnessError } : {}),
    ...(lost.length ? { lost_records: lost } : {}),
    ...(control ? { control } : {}),
    duration_s: (Date.now() - started) / 1000,
  };
  writeJsonAtomic(join(artifactDir, "meta.json"), meta);
  writeJsonAtomic(join(artifactDir, "result.json"), result);
  return { result, artifactDir, reused: false };
}
