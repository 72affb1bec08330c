/**
 * PLACEHOLDER until branch eval13 is merged: the Engine contract from /work/briefs/common13.md, verbatim,
 * so the Slurm engine compiles on its own. eval13's campaign/engine.ts replaces this file at the merge.
 */
export interface JobSpec {
  id: string;
  argv: string[];
  cwd: string;
  env?: Record<string, string>;
  gpus: number;
  cpus: number;
  timeLimitSec: number;
  stdoutPath: string;
  stderrPath: string;
}
export type JobState = "queued" | "running" | "done" | "failed" | "cancelled" | "timeout" | "unknown";
export interface JobStatus {
  engineId: string;
  state: JobState;
  exitCode: number | null;
  reason: string | null;
}
export interface Engine {
  readonly name: string;
  submit(job: JobSpec): Promise<{ engineId: string }>;
  wait(engineId: string, signal?: AbortSignal): Promise<JobStatus>;
  status(engineIds: string[]): Promise<JobStatus[]>;
  cancel(engineId: string): Promise<void>;
  close(): Promise<void>;
}
