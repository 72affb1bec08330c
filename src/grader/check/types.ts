/** What `task check` takes and what its report holds (report.json; the text and HTML renderings read it). */
import type { GraderTask } from "../../task/hidden/grader-task.js";
import type { GradeResult } from "../grade/types.js";
import type { SandboxFactory } from "../grade/pipeline.js";
import type { Progress } from "../../lib/progress.js";

export type FindingLevel = "error" | "warning" | "info";

export interface Finding {
  level: FindingLevel;
  /** What it is about: promises, markers, adversarial, alternatives, mutants, gold, contract, prompt, traps, hollow, base. */
  area: string;
  message: string;
}

export type MutantVerdict = "killed_official" | "killed_probes" | "survived" | "equivalent" | "not_run" | "error";

export interface MutantRow {
  id: string;
  file: string;
  line: number;
  operator: string;
  description: string;
  verdict: MutantVerdict;
  /** Promises of the probes that failed (killed_probes), or why (error / equivalent). */
  detail?: string;
  killed_by?: string[];
  /** The change against the golden patch, as `-`/`+` lines. */
  diff: string;
}

export interface SubmissionRow {
  kind: "base" | "empty" | "hollow" | "hollow-generated" | "adversarial" | "alternative";
  name: string;
  status: GradeResult["status"] | "not_run";
  set_a: { resolved: boolean | null; resolved_strict: boolean | null; score: number | null };
  set_b: { resolved: boolean | null; resolved_strict: boolean | null; score: number | null };
  /** Probe cases gold passes and this submission does not: id → promise. */
  failing_probes: Array<{ id: string; promise: string | null }>;
  /** Official cases gold passes and this one does not. */
  failing_official: string[];
  ok: boolean;
  why?: string;
  note?: string;
  breaks?: string[];
  /**
   * Sessions not run because the verdict this control needs was decided before them (the base and a
   * lone hollow at their first failure, an adversarial patch once a probe of each promise it breaks
   * failed): its scores and failing cases cover the sessions that ran. `--full-grades` runs them all.
   */
  skipped_sessions?: string[];
}

export interface CoverageRow {
  id: string;
  text: string;
  prompt_line: number;
  probes: string[];
  adversarial: string[];
  mutants: string[];
}

export interface CheckReport {
  task: string;
  task_dir: string;
  passed: boolean;
  /** `static`: only the checks that run nothing (`--static`): gold, controls and mutants were not run. */
  stage: "static" | "full";
  started_at: string;
  duration_s: number;
  world_sizes: number[];
  findings: Finding[];
  coverage: CoverageRow[];
  gold: { runs: number; cases: number; probes: number; flaky: string[]; skipped_probes: string[]; calibration_cached: boolean } | null;
  submissions: SubmissionRow[];
  mutants: {
    generated: number;
    graded: number;
    skipped: Record<string, number>;
    killed_official: number;
    killed_probes: number;
    survived: number;
    equivalent: number;
    not_run: number;
    errors: number;
    score: number | null;
    threshold: number;
    reused: number;
    /** The score per mutation operator (check/mutant-operators.ts). */
    by_operator?: Record<string, OperatorScore>;
    rows: MutantRow[];
  } | null;
  contract: Array<{ name: string; kind: string; defined_at: string; referenced_at: string[]; in_prompt: boolean }>;
  leaks: Array<{ file: string; line: number; lines: number; prompt_line: number; text: string }>;
}

export interface CheckOptions {
  task: GraderTask;
  /** The check's folder: grades, mutants, report.json. */
  outDir: string;
  calibrationDir?: string;
  sandboxFactory: SandboxFactory;
  /** Python for the host-side analysis (stdlib only). */
  hostPython?: string;
  /** Grade at most this many mutants (a seeded sample); null / undefined: all. */
  mutants?: number | null;
  /** false: no mutants at all (the rest of the check only). */
  runMutants?: boolean;
  seed?: number;
  /** Wall-clock budget for the mutants, seconds: mutants not started by then are `not_run`. */
  timeLimitSec?: number;
  /** Grades at once (default: the machine's cores halved, at least 1; a GPU task: 1). */
  jobs?: number;
  /**
   * Grade every control in full. Default: the base (and a hollow patch when there is only one kind)
   * stops at its first failing case gold passes, an adversarial patch once Set A is complete and a
   * probe of each promise it breaks has failed: the verdicts are the same, the sessions after are not run.
   */
  fullGrades?: boolean;
  minMutationScore?: number;
  /** Only the static checks (markers, promises, traps, the golden patch's analysis): nothing is run in a sandbox. */
  staticOnly?: boolean;
  onProgress?: Progress;
  /** Test hook / later phases: the world sizes the grader runs (default: the task's). */
  worldSizes?: number[];
}

export const DEFAULT_MIN_MUTATION_SCORE = 0.9;

/** Per mutation operator: how its graded mutants fared, and its own score (killed / graded). */
export interface OperatorScore {
  generated: number;
  graded: number;
  killed: number;
  survived: number;
  equivalent: number;
  not_run: number;
  score: number | null;
}
