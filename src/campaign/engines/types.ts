/**
 * Where a campaign's jobs run. An engine knows nothing about runs or tasks: it starts commands
 * (argv arrays, never shell strings), reports their state and ends them. `eval` and `grade-many`
 * build the JobSpecs (`infradev run …`, `infradev grade …`) and afterwards read only the campaign
 * folder, so a job on a cluster node and one here are the same command writing the same files.
 */

export interface JobSpec {
  /** The run id, [A-Za-z0-9._-]. */
  id: string;
  /** The full command, argv[0] an absolute path (node): never a shell string. */
  argv: string[];
  cwd: string;
  /** Added to the job's environment. */
  env?: Record<string, string>;
  /** GPUs the job holds while it runs (0 for a CPU task). */
  gpus: number;
  /** Cores it wants. */
  cpus: number;
  /** Hard wall limit for the job (run budget + grading + slack). */
  timeLimitSec: number;
  stdoutPath: string;
  stderrPath: string;
}

export type JobState = "queued" | "running" | "done" | "failed" | "cancelled" | "timeout" | "unknown";
export const FINAL_JOB_STATES: readonly JobState[] = ["done", "failed", "cancelled", "timeout"];

export interface JobStatus {
  engineId: string;
  state: JobState;
  exitCode: number | null;
  reason: string | null;
}

export interface Engine {
  /** "local" | "slurm" */
  readonly name: string;
  /** Returns at once (the job is queued). */
  submit(job: JobSpec): Promise<{ engineId: string }>;
  /** Until the job ends. */
  wait(engineId: string, signal?: AbortSignal): Promise<JobStatus>;
  /** Current states (slurm: squeue + sacct). */
  status(engineIds: string[]): Promise<JobStatus[]>;
  cancel(engineId: string): Promise<void>;
  close(): Promise<void>;
}

/** Settings every engine is made with (an engine ignores those that mean nothing to it). */
export interface EngineOptions {
  /** Jobs at once; undefined = what the machine allows (local: its cores and GPUs). */
  concurrency?: number;
  /**
   * Called on every state change of a job, with the engine's extra facts (local: the process
   * group's pid), so the caller can persist it (`<campaign>/jobs/<id>.json`).
   */
  onState?: (job: JobSpec, status: JobStatus, extra: Record<string, unknown>) => void;
  /** The slurm engine's settings (`--partition`, `--account`, `--qos`, `--sbatch-arg`; poll interval). */
  slurm?: {
    partition?: string;
    account?: string;
    qos?: string;
    sbatchArgs?: string[];
    pollIntervalMs?: number;
    /** stdout paths of jobs an earlier process submitted (engine id → path): their exit files. */
    jobOutputs?: Record<string, string>;
  };
}
