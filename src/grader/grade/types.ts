import type { WireCheck } from "../../runner/ranks.js";
import type { CaseOutcome } from "../../runner/merge.js";
import type { ProbeMarker } from "../../runner/merge.js";

/**
 * The grader's data model. Everything scoring reads is plain data in these shapes, written to disk
 * as JSON as each step completes, so that scoring stays a chain of pure functions and a killed run
 * resumes from the files.
 */

/**
 * official: the PR's own tests (post-PR); pass_to_pass: the repository's other tests the task holds a
 * patch to (task.yaml pass_to_pass, run in the official sessions); probe: the hidden probes.
 */
export type Suite = "official" | "pass_to_pass" | "probe";

/** How a submission's run ended, kept apart from its score. */
export const GRADE_STATUSES = ["graded", "missing_patch", "empty_patch", "inapplicable", "harness_fault", "tampered"] as const;
export type GradeStatus = (typeof GRADE_STATUSES)[number];

export const APPLY_METHODS = ["git_apply", "git_apply_3way", "patch_fuzz"] as const;
export type ApplyMethod = (typeof APPLY_METHODS)[number];

/**
 * First cut of the InfraDev failure taxonomy, given to every case gold passes and the submission
 * does not. Structural labels come from the error itself; the behavioural ones from the failing
 * probe's declared kind. `assertion` / `error` / `skipped` are official tests that declare no kind.
 */
export const FAILURE_LABELS = [
  "structural:collection",
  "structural:import",
  "structural:attribute",
  "structural:signature",
  "structural:not-implemented",
  "structural:crash",
  "structural:hang",
  "numerical",
  "behavioral-resource",
  "behavioral-condition",
  "state",
  "assertion",
  "error",
  "skipped",
] as const;
export type FailureLabel = (typeof FAILURE_LABELS)[number];

/** A case outcome as the grader reports it; `not_run` when the patch never ran (empty, inapplicable). */
export type GradedOutcome = CaseOutcome | "not_run";

/**
 * One test case after the multi-rank merge, slimmed to what scoring and labelling need.
 * `id` is `<mode>/<nodeid>` when the task declares more than one mode, else the node id.
 */
export interface CaseRecord {
  id: string;
  suite: Suite;
  outcome: CaseOutcome;
  /**
   * hang / crash from the launcher's events; missing = absent on some rank; not_collected = absent
   * everywhere; run_timeout = not finished when the session ran out of its run_timeout_sec.
   */
  reason?: "hang" | "crash" | "missing" | "not_collected" | "run_timeout";
  probe?: ProbeMarker;
  /** Exception type of the first failing rank (`AttributeError`), when one could be read. */
  error_type?: string;
  /** First line of that failure's message, capped. */
  message?: string;
  /**
   * A case the launcher killed (hang, run timeout, or aborted beside one): per killed rank, its
   * message and the Python stacks (every thread) faulthandler dumped before the kill, capped.
   * Diagnosis for people, never read by scoring.
   */
  stacks?: Array<{ rank: number; text: string }>;
  time_s: number;
}

/** One collection error: the file that failed to import and why. */
export interface CollectionError {
  /** Path relative to the repo root (`tests/test_x.py`). */
  path: string;
  error_type?: string;
  message: string;
}

/** One pytest session of the grader (a mode × a suite, or both suites together), as saved to disk. */
export interface SessionResult {
  /** Identifies what ran, so that a file left by another task version or plan is never reused. */
  key: string;
  mode: string;
  session: string;
  /** The world size it ran at. */
  ranks: number;
  /** Its name in sessions/ and logs/ (`<mode>.<session>` or `<mode>.ws<N>.<session>`). */
  file: string;
  cases: CaseRecord[];
  collection_errors: CollectionError[];
  launch_status: string | null;
  /** This session's canaries (real ids), what each must be, and what each rank reported. */
  canaries?: Array<{ id: string; expected: "passed" | "failed" | "not_passed"; ranks: string[] }>;
  /** Evidence that the code under test changed what a test is or how its outcome was recorded. */
  tamper_evidence?: string[];
  /**
   * Each rank's audit hook (python/sandbox/infradev_audit.py): armed and finished, how many forgery
   * attempts it refused, what library code did that it allows (counts per event). For review.
   */
  audit?: Array<{ rank: number; session?: number; armed: boolean; done: boolean; refused_count: number; observed: Record<string, number> } | null>;
  /**
   * The kernel's count of what the session sent on the sandbox's loopback beside what the ranks'
   * collective counters counted (python/sandbox/infradev_launcher/wire.py): a second, independent
   * measurement, judged by wire-judge.ts (grading rules 8); `skip` where it was not taken (no private
   * network namespace, NCCL, a rank without totals). Absent from launchers that do not take it.
   */
  wire?: WireCheck;
  /** Every launcher session's wire record when the launcher restarted (the first is `wire`). */
  wires?: WireCheck[];
  /** Set when the launcher's records were lost (killed from inside, no bundle): cases count failed. */
  lost_records?: string;
  harness_error?: string;
  duration_s: number;
}

/**
 * An early stop (grade.ts stopEarly, sessions.ts stopWhen): the session it stopped after (file name)
 * and of which suite, and the sessions it skipped, by name and as scoring needs them.
 */
export interface PartialRun {
  stopped_after: string;
  skipped: string[];
  stopped_suite: Suite;
  skipped_sessions: Array<{ idPrefix: string; suite: Suite }>;
}

/** Per-case gold outcome over the calibration runs. */
export interface GoldCase {
  id: string;
  suite: Suite;
  /** One outcome per calibration run (`not_collected` when a run did not collect it). */
  outcomes: Array<CaseOutcome | "not_collected">;
  probe?: ProbeMarker;
}

/** Gold's wire figures for one session name, over its calibration runs (wire-judge.ts). */
export interface WireReference {
  /** The largest residual_bytes_max (payload less expected, retransmissions in). */
  residual_max: number;
  /** The largest raw payload. */
  payload_max: number;
  /** The most calls, process groups and store requests gold's sessions counted (expected_units). */
  units_max?: Record<string, number>;
}

export interface Calibration {
  format: number;
  task_id: string;
  task_hash: string;
  /** The world sizes gold ran at (its case ids carry them the way a grade's do). */
  world_sizes: number[];
  fingerprint: HardwareFingerprint;
  fingerprint_hash: string;
  runs: number;
  cases: GoldCase[];
  /** Ids whose outcome differs between runs: reported, kept in N_p (see score.ts for how they count). */
  flaky: string[];
  /**
   * Session file names where gold's own loopback traffic exceeded the wire bound in some run (tests
   * that reach the process group from C++, which no counter sees): there a submission's wire verdict
   * is not evidence. Absent in formats before 6.
   */
  wire_unexplained?: string[];
  /** Gold's wire figures per session file name (wire-judge.ts); absent in formats before 6. */
  wire_reference?: Record<string, WireReference>;
  created_at: string;
  duration_s: number;
}

export interface HardwareFingerprint {
  /** CPU and kernel: the host's (every backend shares them). */
  cpu_model: string;
  cpu_count: number;
  /** GPUs as the sandbox sees them (nvidia-smi run inside it; none when it cannot run there). */
  gpus: string[];
  /** torch's version, read by the tests' interpreter inside the sandbox (not imported). */
  torch: string;
  platform: string;
  /** The backend the tests run in (local, docker, none). */
  sandbox: string;
  /** The tests' interpreter inside the sandbox: `<sys.executable> <version>`. */
  python: string;
}

export interface SetScore {
  n_cases: number;
  /** null when the run was a harness fault: it is not the model's failure and not scored. */
  passed: number | null;
  score: number | null;
  resolved: boolean | null;
  resolved_strict: boolean | null;
}

export interface GradedCase {
  id: string;
  suite: Suite;
  outcome: GradedOutcome;
  label?: FailureLabel;
  /**
   * The launcher killed this case (a hang, the run's time limit, or a rank aborted beside one): its
   * message (naming the collective a rank waited in and the ranks that did not arrive, when the stacks
   * showed it) and each killed rank's Python stacks. For people (report, view); scoring never reads it.
   */
  killed?: { reason: string; message: string; stacks: Array<{ rank: number; text: string }> };
}

/** What `infradev grade --json` prints and `<out>/<task>/<hash>/result.json` holds. */
export interface GradeResult {
  task_id: string;
  status: GradeStatus;
  patch_applied: boolean;
  apply_method: ApplyMethod | null;
  reason?: string;
  /** Set B (official + probes), repeated at the top level. */
  n_cases: number;
  passed: number | null;
  score: number | null;
  resolved: boolean | null;
  resolved_strict: boolean | null;
  official: SetScore;
  with_probes: SetScore;
  /**
   * The pass-to-pass suite alone (task.yaml pass_to_pass), when the task has one: reported apart; its
   * cases are in `official` (Set A) and `with_probes` (Set B) too.
   */
  pass_to_pass?: SetScore;
  /**
   * Why the run is `tampered`: canaries with the wrong outcome, staged test files changed, a rank's
   * records disagreeing, tests reported that were never installed. Empty otherwise.
   */
  tamper_evidence: string[];
  cases: GradedCase[];
  /** The world sizes every suite ran at (ascending); absent when nothing was planned (no calibration). */
  world_sizes?: number[];
  /**
   * Set when the grade stopped early (`stopEarly`: the check's mutants): the sessions after
   * `stopped_after` did not run, their cases count as not passed and the suite they belong to
   * is not resolved.
   */
  partial?: Pick<PartialRun, "stopped_after" | "skipped">;
}
