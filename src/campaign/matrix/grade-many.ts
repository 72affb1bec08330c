import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { writeJsonAtomic } from "../../lib/json.js";
import { submissionHash } from "../../grader/grade/grade.js";
import type { GradeResult } from "../../grader/grade/types.js";
import { UsageError } from "../../lib/errors.js";
import { defaultCalibrationDir } from "../../lib/paths.js";
import { readJsonFile } from "../../lib/json.js";
import { loadGraderTask, type GraderTask } from "../../task/hidden/grader-task.js";
import { type EngineOptions } from "../engines/types.js";
import { engineFor } from "../engines/registry.js";
import { KILL_GRACE_MS } from "../engines/local.js";
import { calibrationJob, campaignPaths, cliEntry, defaultConcurrency, driveGroups, gradeBudgetSec, graderFlags, jobEnv, jobRecorder, reapOrphanJobs, runComplete, taskGpus, yesNo, type WorkGroup } from "./jobs.js";
import { mergeManifest, readManifest, writeManifest, type GradeManyManifest } from "./manifest.js";
import { readPredictions, type Prediction } from "./predictions.js";
import { GRADE_FILE, MANIFEST_FILE, PATCH_FILE, RUN_RECORD_FILE, type RunRecord } from "../types.js";

/**
 * `grade-many`: submissions made elsewhere (predictions), each graded as one run of the campaign
 * folder: runs/<task>--<model>--r<k>/ with run.json (harness "predictions"), patch.diff and, once
 * its `infradev grade` job ended, grade.json. Resumable: a run with grade.json is not graded again,
 * and a grade job killed midway resumes from the grader's own session files.
 */

/** What every campaign command (eval, grade-many) is given besides its own matrix. */
export interface CampaignCommandOptions {
  tasksDir: string | null;
  engine: string;
  concurrency?: number;
  sandbox: string;
  calibrationDir?: string;
  python?: string;
  extend?: boolean;
  /** The slurm engine's settings (cli/slurm-options.ts). */
  slurm?: EngineOptions["slurm"];
  argv: string[];
  signal?: AbortSignal;
  say: (line: string) => void;
}

export interface GradeManyOptions extends CampaignCommandOptions {
  campaignDir: string;
  predictions: string;
  /** Grade identical predictions (same task, model and patch) as repeats instead of refusing them. */
  repeatIdentical?: boolean;
}

export interface CampaignSummary {
  total: number;
  /** Complete before this command (nothing run for them). */
  reused: number;
  finished: number;
  errored: string[];
  interrupted: boolean;
}

function writeTextAtomic(file: string, text: string): void {
  const tmp = `${file}.tmp${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, file);
}

function predictionRecord(p: Prediction, task: GraderTask, now: string): RunRecord {
  return {
    schema_version: 1,
    run_id: p.run_id,
    task_id: p.task_id,
    category: task.spec.category,
    type: task.spec.type,
    agent: p.agent,
    harness: "predictions",
    harness_version: null,
    model: p.model,
    skill: false,
    repeat: p.repeat,
    started_at: now,
    ended_at: now,
    wall_s: 0,
    time_limit_min: null,
    exit_reason: "prediction",
    error: null,
    attempts: 0,
    recoveries_used: 0,
    turns: null,
    tool_calls: 0,
    tools_used: {},
    tokens: { input: null, cached_input: null, output: null, reasoning: null },
    patch_bytes: p.patch === null ? 0 : Buffer.byteLength(p.patch),
    submitted: p.patch !== null,
    grade: null,
  };
}

/** Where `infradev grade --out <runDir>/grade` leaves this patch's result (grader/grade.ts layout). */
function gradeResultFile(runDir: string, taskId: string, patch: string | null): string {
  const hash = patch === null ? submissionHash(null) : submissionHash(Buffer.from(patch));
  return join(runDir, "grade", taskId, hash, "result.json");
}

export async function runGradeMany(opts: GradeManyOptions): Promise<CampaignSummary> {
  const paths = campaignPaths(resolve(opts.campaignDir));
  const preds = readPredictions(opts.predictions, opts.predictions, { repeatIdentical: opts.repeatIdentical });
  const tasks = new Map<string, GraderTask>();
  for (const p of preds) {
    if (tasks.has(p.task_id)) continue;
    try {
      tasks.set(p.task_id, loadGraderTask(p.task_id, opts.tasksDir ?? undefined));
    } catch (e) {
      throw new UsageError(`${p.source}: ${(e as Error).message}`);
    }
  }
  // A graded run whose patch is not this prediction's would be reused under a false name.
  for (const p of preds) {
    const runDir = join(paths.runs, p.run_id);
    const prev = existsSync(join(runDir, PATCH_FILE)) ? readFileSync(join(runDir, PATCH_FILE), "utf8") : null;
    if (existsSync(join(runDir, GRADE_FILE)) && prev !== p.patch) {
      throw new UsageError(`${p.source}: ${join(runDir, PATCH_FILE)} was graded with another patch${p.patch === null ? " (this prediction has none)" : ""}; grade these predictions into another --out`);
    }
  }
  const now = new Date().toISOString();
  const wanted: GradeManyManifest = {
    schema_version: 1,
    kind: "grade-many",
    created_at: now,
    updated_at: now,
    tasks_dir: opts.tasksDir,
    tasks: [...tasks.keys()],
    agents: [],
    repeats: Math.max(...preds.map((p) => p.repeat)),
    engine: opts.engine,
    concurrency: opts.concurrency ?? defaultConcurrency(opts.engine),
    argv: opts.argv,
    models: [...new Set(preds.map((p) => p.model))],
    predictions: resolve(opts.predictions),
  };
  mkdirSync(paths.runs, { recursive: true });
  writeManifest(paths.dir, mergeManifest(readManifest(paths.dir), wanted, { extend: opts.extend, file: join(paths.dir, MANIFEST_FILE) }));

  // The cache `grade` and `calibrate` use (INFRADEV_CALIBRATION_DIR, else ~/.cache/infradev/calibration):
  // a campaign finds gold already calibrated by any earlier grade of the same task on this hardware.
  const calibrationDir = resolve(opts.calibrationDir ?? defaultCalibrationDir());
  const flags = graderFlags({ tasksDir: opts.tasksDir, calibrationDir, sandbox: opts.sandbox, python: opts.python });
  const cli = cliEntry();
  if (opts.engine === "local") await reapOrphanJobs(paths, KILL_GRACE_MS + 2000, opts.say);
  const engine = await engineFor(opts.engine, { concurrency: opts.concurrency, onState: jobRecorder(paths, opts.engine), slurm: opts.slurm });
  const summary: CampaignSummary = { total: preds.length, reused: 0, finished: 0, errored: [], interrupted: false };
  const groups: WorkGroup[] = [];
  for (const [taskId, task] of tasks) {
    const todo = preds.filter((p) => p.task_id === taskId && !runComplete(join(paths.runs, p.run_id)));
    summary.reused += preds.filter((p) => p.task_id === taskId).length - todo.length;
    if (!todo.length) continue;
    groups.push({
      name: taskId,
      first: calibrationJob({ cli, paths, taskId, spec: task.fullSpec, graderFlags: flags }),
      onFirstFailed: (s) => {
        for (const p of todo) summary.errored.push(p.run_id);
        opts.say(`${taskId}: gold's calibration ${s.state}${s.reason ? ` (${s.reason})` : ""}: its ${todo.length} prediction(s) not graded; see ${join(paths.logs, `calibrate--${taskId}.err`)}`);
      },
      items: todo.map((p) => {
        const runDir = join(paths.runs, p.run_id);
        mkdirSync(runDir, { recursive: true });
        if (p.patch !== null) writeTextAtomic(join(runDir, PATCH_FILE), p.patch);
        const record = readJsonFile<RunRecord>(join(runDir, RUN_RECORD_FILE)) ?? predictionRecord(p, task, now);
        writeJsonAtomic(join(runDir, RUN_RECORD_FILE), record);
        return {
          spec: {
            id: p.run_id,
            argv: [process.execPath, cli, "grade", "--task", taskId, ...flags, ...(p.patch !== null ? ["--patch", join(runDir, PATCH_FILE)] : []), "--out", join(runDir, "grade"), "--json"],
            cwd: paths.dir,
            env: jobEnv(paths, p.run_id),
            gpus: taskGpus(task.fullSpec),
            cpus: 1,
            timeLimitSec: gradeBudgetSec(task.fullSpec),
            stdoutPath: join(paths.logs, `${p.run_id}.out`),
            stderrPath: join(paths.logs, `${p.run_id}.err`),
          },
          onEnd: (s) => {
            if (s.state === "cancelled") {
              // This campaign cancelling its own jobs says so once; a cancel from outside is this prediction's error.
              if (opts.signal?.aborted) return;
              summary.errored.push(p.run_id);
              opts.say(`${p.run_id}: grade CANCELLED from outside this campaign (${s.reason ?? "no reason given"}); the same command resumes it`);
              return;
            }
            // Any ended job (`grade` exits 3 on a harness fault, with a result): the result file decides.
            const result = readJsonFile<GradeResult>(gradeResultFile(runDir, taskId, p.patch));
            if (!result) {
              summary.errored.push(p.run_id);
              opts.say(`${p.run_id}: grade ${s.state}${s.reason ? ` (${s.reason})` : ""}, no result; see ${join(paths.logs, `${p.run_id}.err`)}`);
              return;
            }
            // grade.json first, then run.json naming it: a reader that sees the name finds the file.
            writeJsonAtomic(join(runDir, GRADE_FILE), result);
            writeJsonAtomic(join(runDir, RUN_RECORD_FILE), { ...record, grade: { status: result.status, file: GRADE_FILE } });
            summary.finished++;
            opts.say(`[${summary.reused + summary.finished + summary.errored.length}/${summary.total}] ${p.task_id} ${p.model}: ${result.status}, resolved A ${yesNo(result.official.resolved)} / B ${yesNo(result.with_probes.resolved)}`);
          },
        };
      }),
    });
  }
  if (summary.reused) opts.say(`${summary.reused} of ${summary.total} prediction(s) already graded: reused`);
  try {
    summary.interrupted = (await driveGroups(engine, groups, opts.signal)).interrupted;
  } finally {
    await engine.close();
  }
  return summary;
}
