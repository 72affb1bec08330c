/**
 * The Slurm engine: one `sbatch` job per JobSpec on a cluster whose nodes share the campaign folder.
 *
 * State comes from three places, best first: `squeue --states=all` (live jobs, and finished ones while
 * the controller still remembers them: MinJobAge), `sacct` (finished jobs, when the cluster keeps
 * accounting), and the exit file the batch script writes next to the job's stdout (a cluster without
 * slurmdbd, or a job the controller has forgotten). Every Slurm command runs as an argv array.
 */
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import { execa } from "execa";
import type { Engine, EngineOptions, JobSpec, JobState, JobStatus } from "./types.js";
import { batchScript, exitFilePath, sbatchArgv, type ExitRecord, type SlurmSubmitOptions } from "./slurm-script.js";

/**
 * `concurrency` is not used: on a cluster the scheduler (partition, QOS and account limits) decides how
 * many jobs run at once. `onState` is called on every state change this process observes.
 */
export interface SlurmEngineOptions extends EngineOptions, SlurmSubmitOptions {
  /** How often `wait` polls (ms); default 2000. */
  pollIntervalMs?: number;
  /** Folder holding sbatch/squeue/sacct/scancel; default: found on PATH. */
  binDir?: string;
  /** stdout paths of jobs an earlier process submitted (engine id → path), for their exit files. */
  jobOutputs?: Record<string, string>;
  /** How many times close() runs scancel when it cannot reach the controller; default 3. */
  scancelAttempts?: number;
}

const FINAL: ReadonlySet<JobState> = new Set(["done", "failed", "cancelled", "timeout"]);
/** Consecutive failed squeue calls `wait` tolerates (about a minute at the default interval). */
const MAX_FAILED_POLLS = 30;
const SCANCEL_ATTEMPTS = 3;
const SCANCEL_RETRY_MS = 1_000;

/**
 * Why a scancel of several ids failed, or null when it did what it could: scancel exits non-zero when
 * any id had already ended ("Invalid job id", "already completing or completed") and still cancels the
 * others, so only other errors (the controller unreachable, a spawn failure) count.
 */
export function scancelFailure(exitCode: number | null, stderr: string, spawnError: string | null): string | null {
  if (spawnError) return spawnError;
  if (exitCode === 0) return null;
  if (exitCode === null) return "scancel was killed";
  const lines = stderr
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  const other = lines.filter((l) => !/Invalid job id|already completing or completed/i.test(l));
  if (other.length) return other.at(-1)!;
  return lines.length ? null : `scancel exited ${exitCode} without a word`;
}

interface Waiter {
  resolve: (s: JobStatus) => void;
  reject: (e: Error) => void;
  unknownPolls: number;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Slurm's job state names (squeue long form, sacct's first word) → ours. */
export function mapSlurmState(slurmState: string): JobState {
  const s = slurmState.trim().split(/\s+/)[0]!.replace(/\+$/, "").toUpperCase();
  switch (s) {
    case "PENDING": case "CONFIGURING": case "REQUEUED": case "REQUEUE_HOLD": case "REQUEUE_FED": case "RESV_DEL_HOLD":
      return "queued";
    case "RUNNING": case "COMPLETING": case "SUSPENDED": case "STAGE_OUT": case "SIGNALING": case "RESIZING": case "STOPPED":
      return "running";
    case "COMPLETED":
      return "done";
    case "CANCELLED": case "REVOKED":
      return "cancelled";
    case "TIMEOUT": case "DEADLINE":
      return "timeout";
    case "FAILED": case "NODE_FAIL": case "OUT_OF_MEMORY": case "BOOT_FAIL": case "PREEMPTED": case "SPECIAL_EXIT":
      return "failed";
    default:
      return "unknown";
  }
}

/** The exit record's meaning: a TERM at or past the limit is the time limit, a TERM before it scancel. */
export function stateFromExitRecord(rec: ExitRecord): { state: JobState; reason: string } {
  if (rec.signal !== null) {
    return rec.elapsed_s >= rec.limit_s
      ? { state: "timeout", reason: `signalled ${rec.signal} after ${rec.elapsed_s} s (limit ${rec.limit_s} s)` }
      : { state: "cancelled", reason: `signalled ${rec.signal} after ${rec.elapsed_s} s` };
  }
  return rec.exit_code === 0 ? { state: "done", reason: "exit 0" } : { state: "failed", reason: `exit ${rec.exit_code}` };
}

function readExitRecord(file: string, engineId: string): ExitRecord | null {
  try {
    const rec = JSON.parse(readFileSync(file, "utf8")) as ExitRecord;
    // A resubmitted job reuses the stdout path: a record of an earlier job says nothing about this one.
    return rec.job_id === engineId && Number.isInteger(rec.exit_code) ? rec : null;
  } catch {
    return null;
  }
}

export class SlurmEngine implements Engine {
  readonly name = "slurm";
  private readonly opts: SlurmEngineOptions;
  /** Exit files of the jobs this process submitted or was told about (`track`). */
  private readonly exitFiles = new Map<string, string>();
  /** Jobs this process submitted (or adopted), their spec and the last state it reported. */
  private readonly mine = new Map<string, { spec: JobSpec; state: JobState | null }>();
  /** false once sacct said accounting is off: not asked again. */
  private accounting = true;
  private readonly waiters = new Map<string, Waiter[]>();
  private polling: Promise<void> | null = null;

  constructor(opts: SlurmEngineOptions = {}) {
    this.opts = opts;
    for (const [id, stdoutPath] of Object.entries(opts.jobOutputs ?? {})) this.track(id, { stdoutPath });
  }

  private bin(name: string): string {
    return this.opts.binDir ? `${this.opts.binDir}/${name}` : name;
  }

  /**
   * Submitting a job whose earlier job (same name, same stdout path) is still queued or running adopts
   * that one instead of starting a second writer into the same run folder: a campaign process that died
   * (its login session closed) leaves its jobs running, and the next `eval` picks them up.
   */
  async submit(job: JobSpec): Promise<{ engineId: string }> {
    const args = sbatchArgv(job, this.opts);
    const script = batchScript(job);
    const live = await this.liveJobFor(job);
    if (live) {
      this.exitFiles.set(live.engineId, exitFilePath(job));
      if (!this.mine.has(live.engineId)) this.mine.set(live.engineId, { spec: job, state: null });
      this.report(live.engineId, live, { slurm_job_id: live.engineId, adopted: true });
      return { engineId: live.engineId };
    }
    rmSync(exitFilePath(job), { force: true });
    // Slurm opens the job's stdout/stderr on the node and fails the launch when their folder is missing.
    for (const p of [job.stdoutPath, job.stderrPath]) mkdirSync(dirname(p), { recursive: true });
    const r = await execa(this.bin("sbatch"), args, { input: script, reject: false, stripFinalNewline: true });
    const engineId = r.stdout.split(";")[0]!.trim();
    if (r.exitCode !== 0 || !/^\d+$/.test(engineId)) {
      throw new Error(`sbatch refused job ${job.id}: ${(r.stderr || r.stdout || `exit ${r.exitCode}`).trim().split("\n").pop()}`);
    }
    this.exitFiles.set(engineId, exitFilePath(job));
    this.mine.set(engineId, { spec: job, state: null });
    this.report(engineId, { engineId, state: "queued", exitCode: null, reason: null }, { slurm_job_id: engineId, stdout_path: job.stdoutPath });
    return { engineId };
  }

  private async liveJobFor(job: JobSpec): Promise<JobStatus | null> {
    const r = await execa(this.bin("squeue"), ["--noheader", `--name=infradev-${job.id}`, "--states=PENDING,RUNNING,CONFIGURING,SUSPENDED,REQUEUED", "-O", "JobID:|,State:|,STDOUT:|"], { reject: false });
    if (r.exitCode !== 0) return null;
    for (const line of r.stdout.split("\n")) {
      const [id, st, out] = line.split("|").map((f) => f.trim());
      if (id && st && out === job.stdoutPath) return { engineId: id, state: mapSlurmState(st), exitCode: null, reason: `${st} (adopted)` };
    }
    return null;
  }

  private report(engineId: string, status: JobStatus, extra: Record<string, unknown> = {}): void {
    const m = this.mine.get(engineId);
    if (!m || m.state === status.state) return;
    m.state = status.state;
    try {
      this.opts.onState?.(m.spec, { ...status }, extra);
    } catch {
      // Bookkeeping must not stop the engine; the campaign folder says what is missing.
    }
  }

  /** For a process that did not submit the job (`eval status`, a resumed `eval`): where its exit file is. */
  track(engineId: string, job: Pick<JobSpec, "stdoutPath">): void {
    this.exitFiles.set(engineId, exitFilePath(job));
  }

  async status(engineIds: string[]): Promise<JobStatus[]> {
    const found = new Map<string, JobStatus>();
    const ids = engineIds.filter((id) => /^\d+$/.test(id));
    for (const s of await this.fromSqueue(ids)) found.set(s.engineId, s);
    const rest = ids.filter((id) => !found.has(id));
    if (rest.length > 0 && this.accounting) for (const s of await this.fromSacct(rest)) found.set(s.engineId, s);
    return engineIds.map((id) => {
      const known = found.get(id);
      if (known) return known;
      const file = this.exitFiles.get(id);
      const rec = file ? readExitRecord(file, id) : null;
      if (rec) {
        const { state, reason } = stateFromExitRecord(rec);
        return { engineId: id, state, exitCode: rec.exit_code, reason: `${reason} (exit file)` };
      }
      return { engineId: id, state: "unknown", exitCode: null, reason: "not in squeue, sacct or an exit file" };
    });
  }

  /** squeue knows live jobs and, with --states=all, finished ones until MinJobAge; unknown ids are dropped. */
  private async fromSqueue(ids: string[]): Promise<JobStatus[]> {
    if (ids.length === 0) return [];
    const fmt = "JobID:|,State:|,Reason:|,exit_code:|";
    const r = await execa(this.bin("squeue"), ["--noheader", "--states=all", `--jobs=${ids.join(",")}`, "-O", fmt], { reject: false });
    // One id the controller no longer knows fails the whole call when it is alone; ask one at a time then.
    if (r.exitCode !== 0 && ids.length > 1) {
      const each = await Promise.all(ids.map((id) => this.fromSqueue([id])));
      return each.flat();
    }
    if (r.exitCode !== 0) {
      if (/Invalid job id/i.test(r.stderr)) return [];
      throw new Error(`squeue failed: ${r.stderr.trim().split("\n").pop() ?? `exit ${r.exitCode}`}`);
    }
    const out: JobStatus[] = [];
    for (const line of r.stdout.split("\n")) {
      const [id, st, reason, raw] = line.split("|").map((f) => f.trim());
      if (!id || !st || !ids.includes(id)) continue;
      const wait = Number(raw);
      // squeue prints the wait status: exit code in the high byte, a killing signal in the low bits.
      const exitCode = Number.isInteger(wait) && (wait & 0x7f) === 0 ? (wait >> 8) & 0xff : null;
      const state = mapSlurmState(st);
      out.push({ engineId: id, state, exitCode: FINAL.has(state) ? exitCode : null, reason: reason && reason !== "None" ? `${st} (${reason})` : st });
    }
    return out;
  }

  private async fromSacct(ids: string[]): Promise<JobStatus[]> {
    const r = await execa(this.bin("sacct"), ["--noheader", "--parsable2", "--allocations", `--jobs=${ids.join(",")}`, "--format=JobIDRaw,State,ExitCode"], { reject: false });
    if (r.exitCode !== 0 || /accounting storage is disabled/i.test(r.stdout + r.stderr)) {
      if (/accounting storage is disabled|not running a supported accounting_storage plugin/i.test(r.stdout + r.stderr)) this.accounting = false;
      return [];
    }
    const out: JobStatus[] = [];
    for (const line of r.stdout.split("\n")) {
      const [id, st, code] = line.split("|");
      if (!id || !st || !ids.includes(id)) continue;
      const [ec, sig] = (code ?? "").split(":").map(Number);
      out.push({ engineId: id, state: mapSlurmState(st), exitCode: sig === 0 && Number.isInteger(ec) ? ec! : null, reason: `${st} (sacct)` });
    }
    return out;
  }

  /**
   * Until the job ends. All waits of this engine share one poller: one squeue call per interval for
   * every job waited on, however many (a campaign of hundreds of runs must not hammer the controller).
   */
  wait(engineId: string, signal?: AbortSignal): Promise<JobStatus> {
    return new Promise((resolve, reject) => {
      if (signal?.aborted) return reject(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
      const w: Waiter = { resolve, reject, unknownPolls: 0 };
      const list = this.waiters.get(engineId) ?? [];
      list.push(w);
      this.waiters.set(engineId, list);
      signal?.addEventListener("abort", () => {
        const left = (this.waiters.get(engineId) ?? []).filter((x) => x !== w);
        if (left.length) this.waiters.set(engineId, left);
        else this.waiters.delete(engineId);
        reject(signal.reason instanceof Error ? signal.reason : new Error("aborted"));
      }, { once: true });
      this.startPolling();
    });
  }

  private startPolling(): void {
    if (this.polling) return;
    // A wait that arrives after the loop saw no waiters but before this callback ran must still be polled.
    this.polling = this.pollLoop().finally(() => {
      this.polling = null;
      if (this.waiters.size > 0) this.startPolling();
    });
  }

  private async pollLoop(): Promise<void> {
    const interval = this.opts.pollIntervalMs ?? 2000;
    let failedPolls = 0;
    while (this.waiters.size > 0) {
      const ids = [...this.waiters.keys()];
      let states: JobStatus[];
      try {
        states = await this.status(ids);
        failedPolls = 0;
      } catch (e) {
        // A controller restarting or briefly overloaded is no reason to give up on the jobs: retry for a while.
        if (++failedPolls >= MAX_FAILED_POLLS) {
          const err = new Error(`squeue failed ${failedPolls} times in a row: ${(e as Error).message}`);
          for (const id of ids) for (const w of this.waiters.get(id) ?? []) w.reject(err);
          for (const id of ids) this.waiters.delete(id);
          return;
        }
        await sleep(interval);
        continue;
      }
      for (const s of states) {
        const list = this.waiters.get(s.engineId);
        if (!list) continue;
        const final = FINAL.has(s.state);
        this.report(s.engineId, s, final ? { ended_at: new Date().toISOString() } : {});
        // Unknown several times running: the controller forgot the job and nothing recorded its end.
        for (const w of list) w.unknownPolls = s.state === "unknown" ? w.unknownPolls + 1 : 0;
        if (final || list.every((w) => w.unknownPolls >= 3)) {
          this.waiters.delete(s.engineId);
          for (const w of list) w.resolve({ ...s });
        }
      }
      if (this.waiters.size > 0) await sleep(interval);
    }
  }

  async cancel(engineId: string): Promise<void> {
    if (!/^\d+$/.test(engineId)) throw new Error(`not a Slurm job id: ${JSON.stringify(engineId)}`);
    const r = await execa(this.bin("scancel"), [engineId], { reject: false });
    // A job that already ended is not an error to cancel.
    if (r.exitCode !== 0 && !/Invalid job id|already completing or completed/i.test(r.stderr)) {
      throw new Error(`scancel ${engineId} failed: ${r.stderr.trim().split("\n").pop() ?? `exit ${r.exitCode}`}`);
    }
  }

  /**
   * Cancels the jobs this process submitted that are still queued or running (as the local engine
   * does), so an interrupted `eval` leaves nothing behind; jobs of a campaign process that was killed
   * outright keep running, and the next `eval` adopts them (submit).
   */
  async close(): Promise<void> {
    const live = [...this.mine.entries()].filter(([, m]) => m.state === null || !FINAL.has(m.state)).map(([id]) => id);
    if (live.length > 0) {
      // One scancel for all of them, with no squeue first: an interrupted campaign may hold hundreds of
      // jobs and little time (a wrapper's kill may follow its TERM within seconds), and a squeue that
      // fails or answers "unknown" under load must not leave a queued job behind (CI, stop 26). scancel
      // of a job that already ended only prints an error for that id and still cancels the others.
      // A scancel that could not reach the controller (busy, restarting) is tried again; if it never
      // does, close() says which jobs are left rather than returning as if they were gone.
      let failure: string | null = null;
      const attempts = Math.max(1, this.opts.scancelAttempts ?? SCANCEL_ATTEMPTS);
      for (let attempt = 0; attempt < attempts; attempt++) {
        if (attempt > 0) await sleep(SCANCEL_RETRY_MS * attempt);
        const r = await execa(this.bin("scancel"), live, { reject: false });
        failure = scancelFailure(r.exitCode ?? null, `${r.stderr ?? ""}`, r.failed && r.exitCode === undefined ? (r.shortMessage ?? "could not run scancel") : null);
        if (failure === null) break;
      }
      if (failure !== null) {
        this.mine.clear();
        this.exitFiles.clear();
        throw new Error(`could not cancel Slurm job(s) ${live.join(", ")} after ${attempts} attempt(s) (${failure}): cancel them with scancel ${live.join(" ")}`);
      }
    }
    this.mine.clear();
    this.exitFiles.clear();
  }
}
