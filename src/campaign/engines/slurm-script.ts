/**
 * What the Slurm engine hands to `sbatch`: its argv (options as separate words, never a shell string) and
 * the batch script, which runs the job's argv with every word single-quoted and then records how it
 * ended in an exit file next to the job's stdout. Pure functions, so the quoting is tested on its own.
 *
 * Why an exit file: a cluster without slurmdbd has no `sacct`, and the controller forgets a finished job
 * after MinJobAge; the file (written atomically, naming its job id) keeps the exit code for later.
 */
import type { JobSpec } from "./types.js";

export interface SlurmSubmitOptions {
  partition?: string;
  account?: string;
  qos?: string;
  /** Extra sbatch words, appended after ours (so a later `--time=…` overrides the computed one). */
  sbatchArgs?: string[];
}

/** What the batch script records when the job's command has ended (the file is `exitFilePath`). */
export interface ExitRecord {
  job_id: string;
  exit_code: number;
  /** "TERM" when Slurm signalled the job (scancel or the time limit) while the command ran. */
  signal: string | null;
  elapsed_s: number;
  /** The job's time limit as squeue reported it when the job started (the computed one if it could not). */
  limit_s: number;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const JOB_ID = /^[A-Za-z0-9._-]{1,200}$/;

/** One word for sh, inside single quotes; a quote inside becomes '\'' (close, escaped quote, reopen). */
export function shellQuote(word: string): string {
  if (word.includes("\0")) throw new Error(`a job word cannot hold a NUL byte: ${JSON.stringify(word.slice(0, 40))}`);
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/** Slurm's time limit is whole minutes: round the job's seconds up (at least 1). */
export function slurmTimeMinutes(timeLimitSec: number): number {
  if (!Number.isFinite(timeLimitSec) || timeLimitSec <= 0) throw new Error(`job timeLimitSec must be > 0 (got ${timeLimitSec})`);
  return Math.max(1, Math.ceil(timeLimitSec / 60));
}

export function exitFilePath(job: Pick<JobSpec, "stdoutPath">): string {
  return `${job.stdoutPath}.exit.json`;
}

/** sbatch expands %j, %x … in --output/--error and treats a backslash specially; such paths are refused. */
function slurmPath(field: string, path: string): string {
  if (!path.startsWith("/")) throw new Error(`job ${field} must be an absolute path (got ${JSON.stringify(path)})`);
  if (/[%\\\n]/.test(path)) throw new Error(`job ${field} ${JSON.stringify(path)}: sbatch would rewrite '%' or '\\' in it; use a folder without them`);
  return path;
}

export function validateJob(job: JobSpec): void {
  if (!JOB_ID.test(job.id)) throw new Error(`job id ${JSON.stringify(job.id)}: use letters, digits, '.', '_' and '-'`);
  if (job.argv.length === 0 || !job.argv[0]!.startsWith("/")) throw new Error(`job ${job.id}: argv[0] must be an absolute path (got ${JSON.stringify(job.argv[0] ?? null)})`);
  if (!Number.isInteger(job.gpus) || job.gpus < 0) throw new Error(`job ${job.id}: gpus must be an integer ≥ 0 (got ${job.gpus})`);
  if (!Number.isInteger(job.cpus) || job.cpus < 1) throw new Error(`job ${job.id}: cpus must be an integer ≥ 1 (got ${job.cpus})`);
  slurmTimeMinutes(job.timeLimitSec);
  slurmPath("cwd", job.cwd);
  slurmPath("stdoutPath", job.stdoutPath);
  slurmPath("stderrPath", job.stderrPath);
  for (const name of Object.keys(job.env ?? {})) {
    if (!ENV_NAME.test(name)) throw new Error(`job ${job.id}: env name ${JSON.stringify(name)} is not a shell variable name`);
  }
}

/** sbatch's argv; the script itself goes on its stdin. */
export function sbatchArgv(job: JobSpec, opts: SlurmSubmitOptions = {}): string[] {
  validateJob(job);
  const args = [
    "--parsable",
    `--job-name=infradev-${job.id}`,
    `--output=${job.stdoutPath}`,
    `--error=${job.stderrPath}`,
    // A resubmitted job appends, as the local engine does: the killed attempt's log stays readable.
    "--open-mode=append",
    `--chdir=${job.cwd}`,
    `--time=${slurmTimeMinutes(job.timeLimitSec)}`,
    "--nodes=1",
    "--ntasks=1",
    `--cpus-per-task=${job.cpus}`,
    // The submitting environment goes along (PATH, the provider key named by --provider-key-env); the
    // job's own variables are exported inside the script, because --export=A=B splits values on commas.
    "--export=ALL",
  ];
  if (job.gpus > 0) args.push(`--gres=gpu:${job.gpus}`);
  for (const [flag, value] of [["partition", opts.partition], ["account", opts.account], ["qos", opts.qos]] as const) {
    if (value === undefined) continue;
    if (value === "" || value.startsWith("-") || /\s/.test(value)) throw new Error(`--${flag} ${JSON.stringify(value)} is not a Slurm ${flag} name`);
    args.push(`--${flag}=${value}`);
  }
  args.push(...(opts.sbatchArgs ?? []));
  return args;
}

/**
 * The batch script. The command runs in the foreground; Slurm's SIGTERM (scancel, time limit) reaches it
 * directly, and the trap only notes that it came, so the exit record can say "signalled" and, from the
 * elapsed time against the limit, whether that was the time limit. SIGKILL after KillWait leaves no
 * record; the engine then relies on squeue/sacct.
 */
export function batchScript(job: JobSpec): string {
  validateJob(job);
  const exitFile = shellQuote(exitFilePath(job));
  const limitSec = slurmTimeMinutes(job.timeLimitSec) * 60;
  const lines = [
    "#!/bin/sh",
    `# Generated by infradev (campaign/engines/slurm-script.ts) for job ${job.id}.`,
    ...Object.entries(job.env ?? {}).map(([k, v]) => `${k}=${shellQuote(v)}; export ${k}`),
    "infradev_start=$(date +%s)",
    // The limit as Slurm holds it (an --sbatch-arg=--time=… or a partition default may differ from
    // ours): squeue's %l is [days-]hours:minutes:seconds, or minutes:seconds; ours when it cannot say.
    `infradev_limit=$(squeue --noheader --jobs="$SLURM_JOB_ID" --format=%l 2>/dev/null | awk '/^[0-9:-]+$/ { d = 0; t = $0; if (index(t, "-")) { d = substr(t, 1, index(t, "-") - 1); t = substr(t, index(t, "-") + 1) } n = split(t, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; if (n == 1) s = s * 60; print d * 86400 + s }')`,
    `case "$infradev_limit" in ''|*[!0-9]*) infradev_limit=${limitSec} ;; esac`,
    // Appended logs: a header tells one attempt from the next (as the local engine writes).
    `infradev_header="=== $(date -u +%Y-%m-%dT%H:%M:%SZ) slurm engine: job ${job.id} ($SLURM_JOB_ID) on $(hostname)"`,
    'echo "$infradev_header"; echo "$infradev_header" >&2',
    "infradev_signal=null",
    `trap 'infradev_signal="\\"TERM\\""' TERM`,
    `cd ${shellQuote(job.cwd)} || exit 125`,
    job.argv.map(shellQuote).join(" ") + " </dev/null",
    "infradev_rc=$?",
    "infradev_elapsed=$(( $(date +%s) - infradev_start ))",
    `infradev_tmp=${exitFile}.$SLURM_JOB_ID.tmp`,
    `printf '{"job_id":"%s","exit_code":%d,"signal":%s,"elapsed_s":%d,"limit_s":%d}\\n' "$SLURM_JOB_ID" "$infradev_rc" "$infradev_signal" "$infradev_elapsed" "$infradev_limit" >"$infradev_tmp" && mv -f "$infradev_tmp" ${exitFile}`,
    'exit "$infradev_rc"',
    "",
  ];
  return lines.join("\n");
}
