import { existsSync, mkdirSync, readFileSync, readdirSync } from "node:fs";
import { availableParallelism, hostname } from "node:os";
import { join } from "node:path";
import { writeJsonAtomic } from "../../lib/json.js";
import { readJsonFile } from "../../lib/json.js";
import { packageRoot } from "../../lib/paths.js";
import type { TaskSpec } from "../../task/public/schema.js";
import { FINAL_JOB_STATES, type Engine, type EngineOptions, type JobSpec, type JobStatus } from "../engines/types.js";
import { GRADE_FILE, RUN_RECORD_FILE, type JobRecord, type RunRecord } from "../types.js";

/**
 * What `eval` and `grade-many` share: the campaign folder's paths, when a run is complete, the job
 * records under jobs/, gold's calibration once per task before its runs, and driving the jobs
 * through an engine until they end or the campaign is interrupted.
 */

export interface CampaignPaths {
  dir: string;
  runs: string;
  jobs: string;
  logs: string;
}

export function campaignPaths(dir: string): CampaignPaths {
  return { dir, runs: join(dir, "runs"), jobs: join(dir, "jobs"), logs: join(dir, "logs") };
}

/** run.json with ended_at, and grade.json: nothing left to do for this run (common13's contract). */
export function runComplete(runDir: string): boolean {
  const r = readJsonFile<RunRecord>(join(runDir, RUN_RECORD_FILE));
  return Boolean(r?.ended_at) && existsSync(join(runDir, GRADE_FILE));
}

/** The built CLI the jobs run (`node <it> run …`): the sources cannot be run by node itself. */
export function cliEntry(): string {
  const file = join(packageRoot(), "dist", "cli", "main.js");
  if (!existsSync(file)) throw new Error(`${file} is missing: build the package first (npm run build)`);
  return file;
}

/**
 * Set in every job's environment to `<campaign>/jobs/<job id>` (its record, less `.json`): every
 * process the job starts inherits it, so `ps e` or a test can tell which campaign job a process is.
 */
export const CAMPAIGN_JOB_ENV = "INFRADEV_CAMPAIGN_JOB";
export function jobEnv(paths: CampaignPaths, jobId: string): Record<string, string> {
  return { [CAMPAIGN_JOB_ENV]: join(paths.jobs, jobId) };
}

/** A job record as written here: common13's JobRecord plus what the engine told us. */
export interface CampaignJobRecord extends JobRecord {
  job_id: string;
  /** The process that drives the campaign: `eval status` tells a dead campaign's jobs from live ones. */
  owner: { pid: number; host: string };
  exit_code?: number | null;
  reason?: string | null;
  [extra: string]: unknown;
}

/** EngineOptions.onState that keeps `<campaign>/jobs/<job id>.json` current (atomic writes). */
export function jobRecorder(paths: CampaignPaths, engineName: string): NonNullable<EngineOptions["onState"]> {
  mkdirSync(paths.jobs, { recursive: true });
  return (job, status, extra) => {
    const file = join(paths.jobs, `${job.id}.json`);
    const prev = readJsonFile<CampaignJobRecord>(file);
    const fresh = status.state === "queued" || prev?.engine_id !== status.engineId;
    const rec: CampaignJobRecord = {
      ...(fresh ? {} : prev),
      ...extra,
      job_id: job.id,
      engine: engineName,
      engine_id: status.engineId,
      submitted_at: fresh ? new Date().toISOString() : prev!.submitted_at,
      argv: job.argv,
      state: status.state,
      owner: { pid: process.pid, host: hostname() },
      exit_code: status.exitCode,
      reason: status.reason,
    };
    writeJsonAtomic(file, rec);
  };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** A job record's owner (the campaign process) still runs: on this host, by pid. Another host's: unknown, assumed alive. */
export function ownerAlive(rec: Pick<CampaignJobRecord, "owner">): boolean {
  if (!rec.owner || rec.owner.host !== hostname()) return true;
  return alive(rec.owner.pid);
}

/**
 * Local jobs of an earlier campaign process that died (SIGKILL, a crash) may still be ending: their
 * watchdog saw the pipe close and gave them a grace period. Before a resumed campaign starts a run
 * again in the same folder, wait for those process groups to be gone, and kill what outlasts
 * `graceMs`. A group is ours only if its leader's command line is the job's (pids are reused).
 */
export async function reapOrphanJobs(paths: CampaignPaths, graceMs: number, say: (s: string) => void): Promise<void> {
  if (!existsSync(paths.jobs)) return;
  const orphans: number[] = [];
  for (const f of readdirSync(paths.jobs).filter((n) => n.endsWith(".json"))) {
    const rec = readJsonFile<CampaignJobRecord>(join(paths.jobs, f));
    if (!rec || rec.engine !== "local" || rec.state !== "running" || typeof rec.pid !== "number" || ownerAlive(rec)) continue;
    let cmdline = "";
    try {
      cmdline = readFileSync(`/proc/${rec.pid}/cmdline`, "utf8");
    } catch {
      continue;
    }
    // The watchdog's command line ends with the job's argv.
    if (cmdline.split("\0").filter(Boolean).slice(-rec.argv.length).join("\0") === rec.argv.join("\0")) orphans.push(rec.pid);
  }
  if (!orphans.length) return;
  say(`waiting for ${orphans.length} job(s) of the interrupted campaign to end`);
  const end = Date.now() + graceMs;
  while (orphans.some(alive) && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
  for (const pid of orphans.filter(alive)) {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // gone meanwhile
    }
  }
}

/** campaign.json's `concurrency` when none was asked: the local engine's default (the machine's cores), else 0 (the engine's own). */
export function defaultConcurrency(engine: string): number {
  return engine === "local" ? Math.max(1, availableParallelism()) : 0;
}

/** GPUs a task's jobs hold: a GPU task its largest world size (one GPU per rank), a CPU task none. */
export function taskGpus(spec: Pick<TaskSpec, "requires_gpu" | "ranks" | "world_sizes">): number {
  return spec.requires_gpu ? Math.max(spec.ranks, ...(spec.world_sizes ?? [])) : 0;
}

/** Wall time one grade may take: every suite (official, probes) at every world size to its run_timeout_sec, plus slack. */
export function gradeBudgetSec(spec: Pick<TaskSpec, "ranks" | "world_sizes" | "run_timeout_sec">): number {
  return 2 * (spec.world_sizes ?? [spec.ranks]).length * spec.run_timeout_sec + 600;
}

/**
 * One unit of work: a job, and what to do once it ended (read its files, say a progress line).
 * `group` orders work: a group's `first` job (gold's calibration) runs before its items.
 */
export interface WorkItem {
  spec: JobSpec;
  onEnd: (status: JobStatus) => void | Promise<void>;
}
export interface WorkGroup {
  name: string;
  first: JobSpec | null;
  /** The first job did not end done: the items are not run (say why). */
  onFirstFailed: (status: JobStatus) => void;
  items: WorkItem[];
}

/**
 * Runs every group through the engine: each group's first job, then its items, all groups at
 * once (the engine's capacity decides how many run). Every first job is submitted before any item,
 * so calibrations queue ahead of the runs. On abort the engine is closed (queued jobs dropped,
 * running ones ended) and nothing more is submitted; what finished stays finished.
 */
export async function driveGroups(engine: Engine, groups: WorkGroup[], signal?: AbortSignal, abandonAfterCloseMs = ABANDON_AFTER_CLOSE_MS): Promise<{ interrupted: boolean }> {
  let closing: Promise<void> | null = null;
  // Once the engine is closed after an abort, the jobs it cancelled end within a poll or two and their
  // waits see it; a job the cancel did not reach (a controller that did not answer) would be waited on
  // for ever — a held or queued job never ends. Past a grace the waits are given up: the campaign is
  // interrupted either way, and close() has said what it could not cancel.
  const abandon = new AbortController();
  let abandonTimer: NodeJS.Timeout | undefined;
  const onAbort = () => {
    if (closing) return;
    closing = engine.close().finally(() => {
      abandonTimer = setTimeout(() => abandon.abort(new Error("interrupted")), abandonAfterCloseMs);
    });
    closing.catch(() => undefined); // handled: the finally below awaits it and throws what it threw
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  const run = async (spec: JobSpec): Promise<JobStatus | null> => {
    if (signal?.aborted) return null;
    let engineId: string;
    try {
      ({ engineId } = await engine.submit(spec));
    } catch (e) {
      if (signal?.aborted) return null;
      throw e;
    }
    try {
      return await engine.wait(engineId, abandon.signal);
    } catch (e) {
      if (abandon.signal.aborted) return null;
      throw e;
    }
  };
  try {
    const firsts = groups.map((g) => (g.first ? run(g.first) : Promise.resolve(null)));
    await Promise.all(
      groups.map(async (g, i) => {
        if (g.first) {
          const s = await firsts[i]!;
          if (s === null) return;
          if (s.state !== "done") {
            if (!signal?.aborted) g.onFirstFailed(s);
            return;
          }
        }
        await Promise.all(
          g.items.map(async (it) => {
            const s = await run(it.spec);
            if (s !== null && FINAL_JOB_STATES.includes(s.state)) await it.onEnd(s);
          }),
        );
      }),
    );
  } finally {
    signal?.removeEventListener("abort", onAbort);
    try {
      if (closing) await closing;
    } finally {
      clearTimeout(abandonTimer);
    }
  }
  return { interrupted: Boolean(signal?.aborted) };
}

/** How long the waits of an interrupted campaign outlive the engine's close (driveGroups). */
export const ABANDON_AFTER_CLOSE_MS = 15_000;

/** gold's calibration of one task, as a job (`infradev calibrate`), so concurrent grades find it cached. */
export function calibrationJob(args: {
  cli: string;
  paths: CampaignPaths;
  taskId: string;
  spec: Pick<TaskSpec, "requires_gpu" | "ranks" | "world_sizes" | "run_timeout_sec">;
  graderFlags: string[];
}): JobSpec {
  const id = `calibrate--${args.taskId}`;
  return {
    id,
    argv: [process.execPath, args.cli, "calibrate", "--task", args.taskId, ...args.graderFlags, "--json"],
    cwd: args.paths.dir,
    gpus: taskGpus(args.spec),
    cpus: 1,
    // Three gold runs.
    timeLimitSec: 3 * gradeBudgetSec(args.spec),
    env: jobEnv(args.paths, id),
    stdoutPath: join(args.paths.logs, `${id}.out`),
    stderrPath: join(args.paths.logs, `${id}.err`),
  };
}

/** Flags every grading command of a campaign shares (calibrate, grade, run's grade). */
export interface GraderFlagOptions {
  tasksDir: string | null;
  calibrationDir: string;
  sandbox: string;
  python?: string;
}
export function graderFlags(o: GraderFlagOptions): string[] {
  return [...(o.tasksDir ? ["--tasks-dir", o.tasksDir] : []), "--calibration-dir", o.calibrationDir, "--sandbox", o.sandbox, ...(o.python ? ["--python", o.python] : [])];
}

export function yesNo(b: boolean | null | undefined): string {
  return b === null || b === undefined ? "n/a" : b ? "yes" : "no";
}
