import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { availableParallelism, hostname } from "node:os";
import { dirname } from "node:path";
import type { Engine, EngineOptions, JobSpec, JobState, JobStatus } from "./types.js";

/**
 * The local engine: jobs are child processes of this one, at most `concurrency` at once, each
 * holding `cpus` cores and `gpus` GPUs of this machine while it runs (a GPU job waits for free
 * GPUs and sees only its own through CUDA_VISIBLE_DEVICES). Jobs start in submission order: a job
 * that does not fit yet holds back the ones after it, so a GPU job is never starved by CPU jobs.
 *
 * Each job runs under a small watchdog (WATCHDOG below, run by this Node binary with `-e`) that
 * leads the job's own process group and holds a pipe from this process: when this process dies,
 * even by SIGKILL, the pipe closes and the watchdog ends the job's group, so a killed campaign
 * leaves no job writing into a run folder that the next `eval` resumes. A time limit or a cancel
 * ends the whole group: SIGTERM, then SIGKILL after KILL_GRACE_MS.
 */

export const KILL_GRACE_MS = 8_000;

/**
 * The watchdog (plain JavaScript, no imports of ours: it must run from the sources and from dist
 * alike). argv after `--`: the job's command. It exits with the job's code (128 + signal number
 * when the job died of a signal). SIGTERM to the group reaches the job; the watchdog itself waits
 * for the job to go, so the exit code is the job's.
 */
const WATCHDOG = `
const { spawn } = require("node:child_process");
const { constants } = require("node:os");
const [cmd, ...args] = process.argv.slice(1);
const child = spawn(cmd, args, { stdio: ["ignore", "inherit", "inherit"] });
let ending = false;
const endGroup = () => {
  if (ending) return;
  ending = true;
  try { process.kill(-process.pid, "SIGTERM"); } catch {}
  setTimeout(() => { try { process.kill(-process.pid, "SIGKILL"); } catch {} }, ${KILL_GRACE_MS}).unref();
};
process.on("SIGTERM", () => {});
process.on("SIGINT", () => {});
child.on("error", (e) => { process.stderr.write("infradev local engine: cannot start " + cmd + ": " + e.message + "\\n"); process.exit(127); });
child.on("exit", (code, sig) => process.exit(code ?? 128 + (constants.signals[sig] ?? 0)));
process.stdin.on("end", endGroup);
process.stdin.on("close", endGroup);
process.stdin.on("error", endGroup);
process.stdin.resume();
`;

/** GPUs this engine may hand out: $CUDA_VISIBLE_DEVICES when set (an allocation), else `nvidia-smi -L`'s. */
export function localGpuIds(env: NodeJS.ProcessEnv = process.env): string[] {
  const visible = env.CUDA_VISIBLE_DEVICES;
  if (visible !== undefined) return visible.split(",").map((s) => s.trim()).filter((s) => s !== "" && s !== "-1" && s !== "NoDevFiles");
  const r = spawnSync("nvidia-smi", ["-L"], { encoding: "utf8", timeout: 10_000 });
  if (r.status !== 0 || typeof r.stdout !== "string") return [];
  return r.stdout.split("\n").flatMap((l) => /^GPU (\d+):/.exec(l)?.[1] ?? []);
}

export interface LocalEngineOptions extends EngineOptions {
  /** Cores to hand out (default: os.availableParallelism()). */
  cpus?: number;
  /** GPU ids to hand out (default: localGpuIds()). */
  gpuIds?: string[];
}

interface LocalJob {
  spec: JobSpec;
  engineId: string;
  status: JobStatus;
  cpus: number;
  gpus: string[];
  child?: ChildProcess;
  timer?: NodeJS.Timeout;
  killTimer?: NodeJS.Timeout;
  /** Why we are ending it (the final state once it exits). */
  ending?: "timeout" | "cancelled";
  /** Holds its cores and GPUs (between start and release). */
  held?: boolean;
  waiters: Array<(s: JobStatus) => void>;
}

export class LocalEngine implements Engine {
  readonly name = "local";
  readonly concurrency: number;
  readonly totalCpus: number;
  readonly gpuIds: string[];
  private readonly jobs = new Map<string, LocalJob>();
  private readonly queue: LocalJob[] = [];
  private readonly freeGpus: string[];
  private usedCpus = 0;
  private running = 0;
  private seq = 0;
  private closed = false;

  constructor(private readonly opts: LocalEngineOptions = {}) {
    this.totalCpus = Math.max(1, opts.cpus ?? availableParallelism());
    this.gpuIds = opts.gpuIds ?? localGpuIds();
    this.freeGpus = [...this.gpuIds];
    this.concurrency = Math.max(1, opts.concurrency ?? this.totalCpus);
  }

  async submit(spec: JobSpec): Promise<{ engineId: string }> {
    if (this.closed) throw new Error("local engine: closed");
    if (!/^[A-Za-z0-9._-]+$/.test(spec.id)) throw new Error(`local engine: job id "${spec.id}" must be [A-Za-z0-9._-]`);
    if (!spec.argv.length || !spec.argv[0]!.startsWith("/")) throw new Error(`local engine: job ${spec.id}: argv[0] must be an absolute path (got "${spec.argv[0] ?? ""}")`);
    const engineId = `local-${process.pid}-${++this.seq}`;
    const job: LocalJob = { spec, engineId, status: { engineId, state: "queued", exitCode: null, reason: null }, cpus: Math.min(Math.max(1, spec.cpus), this.totalCpus), gpus: [], waiters: [] };
    this.jobs.set(engineId, job);
    this.report(job, {});
    if (spec.gpus > this.gpuIds.length) {
      this.finish(job, "failed", null, `needs ${spec.gpus} GPU(s); this machine has ${this.gpuIds.length}${this.gpuIds.length ? ` (${this.gpuIds.join(",")})` : ""}`);
    } else {
      this.queue.push(job);
      this.schedule();
    }
    return { engineId };
  }

  wait(engineId: string, signal?: AbortSignal): Promise<JobStatus> {
    const job = this.jobs.get(engineId);
    if (!job) return Promise.resolve({ engineId, state: "unknown", exitCode: null, reason: "not a job of this engine" });
    if (isFinal(job.status.state)) return Promise.resolve({ ...job.status });
    return new Promise((resolve, reject) => {
      const onAbort = () => reject(signal!.reason instanceof Error ? signal!.reason : new Error("aborted"));
      if (signal?.aborted) return onAbort();
      signal?.addEventListener("abort", onAbort, { once: true });
      job.waiters.push((s) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(s);
      });
    });
  }

  async status(engineIds: string[]): Promise<JobStatus[]> {
    return engineIds.map((id) => ({ ...(this.jobs.get(id)?.status ?? { engineId: id, state: "unknown" as const, exitCode: null, reason: "not a job of this engine" }) }));
  }

  async cancel(engineId: string): Promise<void> {
    const job = this.jobs.get(engineId);
    if (!job || isFinal(job.status.state)) return;
    if (job.status.state === "queued") {
      this.queue.splice(this.queue.indexOf(job), 1);
      this.finish(job, "cancelled", null, "cancelled while queued");
      return;
    }
    this.endGroup(job, "cancelled");
    await this.wait(engineId);
  }

  /** Cancels what is queued or running and waits for the running jobs to be gone. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.jobs.values()].map((j) => this.cancel(j.engineId)));
  }

  private schedule(): void {
    while (this.queue.length && this.running < this.concurrency) {
      const job = this.queue[0]!;
      if (this.totalCpus - this.usedCpus < job.cpus || this.freeGpus.length < job.spec.gpus) break;
      this.queue.shift();
      this.start(job);
    }
  }

  private start(job: LocalJob): void {
    const { spec } = job;
    job.gpus = this.freeGpus.splice(0, spec.gpus);
    this.usedCpus += job.cpus;
    this.running++;
    job.held = true;
    let out: number | undefined;
    let err: number | undefined;
    try {
      for (const p of [spec.stdoutPath, spec.stderrPath]) mkdirSync(dirname(p), { recursive: true });
      // Appended, with a header: an earlier attempt's log (a killed campaign's) stays readable above it.
      out = openSync(spec.stdoutPath, "a");
      err = spec.stderrPath === spec.stdoutPath ? out : openSync(spec.stderrPath, "a");
      const header = `=== ${new Date().toISOString()} local engine: job ${spec.id} (${job.engineId}) on ${hostname()}${job.gpus.length ? `, GPUs ${job.gpus.join(",")}` : ""}\n`;
      writeSync(out, header);
      if (err !== out) writeSync(err, header);
      const env: NodeJS.ProcessEnv = { ...process.env, ...(spec.env ?? {}) };
      // A CPU job sees no GPU; a GPU job only the ones it holds.
      env.CUDA_VISIBLE_DEVICES = job.gpus.join(",");
      job.child = spawn(process.execPath, ["-e", WATCHDOG, "--", ...spec.argv], { cwd: spec.cwd, env, detached: true, stdio: ["pipe", out, err] });
    } catch (e) {
      this.release(job);
      this.finish(job, "failed", null, `cannot start: ${(e as Error).message}`);
      return;
    } finally {
      if (out !== undefined) closeSync(out);
      if (err !== undefined && err !== out) closeSync(err);
    }
    const child = job.child;
    job.status = { ...job.status, state: "running" };
    this.report(job, { pid: child.pid, started_at: new Date().toISOString(), gpus: job.gpus });
    job.timer = setTimeout(() => this.endGroup(job, "timeout"), spec.timeLimitSec * 1000);
    job.timer.unref();
    child.on("error", (e) => {
      this.release(job);
      this.finish(job, "failed", null, `cannot start: ${e.message}`);
    });
    child.on("exit", (code, signal) => {
      this.release(job);
      if (job.ending === "timeout") this.finish(job, "timeout", code, `ran past its time limit of ${spec.timeLimitSec} s: process group ended`);
      else if (job.ending === "cancelled") this.finish(job, "cancelled", code, "cancelled: process group ended");
      else if (code === 0) this.finish(job, "done", 0, null);
      else this.finish(job, "failed", code, signal ? `killed by ${signal}` : `exit code ${code}`);
    });
  }

  private endGroup(job: LocalJob, why: "timeout" | "cancelled"): void {
    if (job.ending || !job.child?.pid) return;
    job.ending = why;
    const pgid = job.child.pid;
    try {
      process.kill(-pgid, "SIGTERM");
    } catch {
      // already gone
    }
    job.killTimer = setTimeout(() => {
      try {
        process.kill(-pgid, "SIGKILL");
      } catch {
        // already gone
      }
    }, KILL_GRACE_MS);
    job.killTimer.unref();
  }

  private release(job: LocalJob): void {
    if (!job.held) return;
    job.held = false;
    clearTimeout(job.timer);
    clearTimeout(job.killTimer);
    // The group may still hold stragglers after the leader exited: end them before the resources are reused.
    if (job.child?.pid) {
      try {
        process.kill(-job.child.pid, "SIGKILL");
      } catch {
        // none left
      }
    }
    this.usedCpus -= job.cpus;
    this.running--;
    this.freeGpus.push(...job.gpus);
  }

  private finish(job: LocalJob, state: JobState, exitCode: number | null, reason: string | null): void {
    if (isFinal(job.status.state)) return;
    job.status = { engineId: job.engineId, state, exitCode, reason };
    this.report(job, { ended_at: new Date().toISOString() });
    for (const w of job.waiters.splice(0)) w({ ...job.status });
    this.schedule();
  }

  private report(job: LocalJob, extra: Record<string, unknown>): void {
    try {
      this.opts.onState?.(job.spec, { ...job.status }, extra);
    } catch {
      // Bookkeeping must not stop the engine; the caller's own files say what is missing.
    }
  }
}

function isFinal(s: JobState): boolean {
  return s === "done" || s === "failed" || s === "cancelled" || s === "timeout";
}
