import { mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import type { GradeResult } from "../../grader/grade/types.js";
import { UsageError } from "../../lib/errors.js";
import { readJsonFile } from "../../lib/json.js";
import { bundledTasksDir, defaultCalibrationDir } from "../../lib/paths.js";
import { NotRunnableError, taskPython, taskRunnableHere } from "../../task/public/runnable.js";
import { listTaskIds } from "../../task/public/loader.js";
import { loadGraderTask, type GraderTask } from "../../task/hidden/grader-task.js";
import { engineFor } from "../engines/registry.js";
import { KILL_GRACE_MS } from "../engines/local.js";
import type { CampaignCommandOptions, CampaignSummary } from "./grade-many.js";
import { calibrationJob, campaignPaths, cliEntry, defaultConcurrency, driveGroups, gradeBudgetSec, graderFlags, jobEnv, jobRecorder, reapOrphanJobs, runComplete, taskGpus, yesNo, type WorkGroup } from "./jobs.js";
import { mergeManifest, readManifest, writeManifest } from "./manifest.js";
import { GRADE_FILE, MANIFEST_FILE, RUN_RECORD_FILE, runId, type AgentConfig, type CampaignManifest, type RunRecord } from "../types.js";

/**
 * `eval`: tasks × agents × repeats, each run one `infradev run --out <campaign>/runs/<run-id>` job
 * on the engine (the run grades its own patch), gold calibrated once per task before its runs.
 * Resumable: a run with run.json and grade.json is skipped; any other is submitted again, and
 * `infradev run` itself picks up what its folder holds (grades only, or starts afresh).
 */

export interface EvalOptions extends CampaignCommandOptions {
  campaignDir: string;
  /** Task ids, or "all" (every task of the tasks folder). */
  tasks: string[] | "all";
  agents: AgentConfig[];
  repeats: number;
}

export interface PlannedRun {
  run_id: string;
  task: GraderTask;
  agent: AgentConfig;
  repeat: number;
}

/**
 * The tasks asked for. On the local engine the jobs run here, so a task this machine cannot run
 * (tasks/runnable.ts) is refused when named and left out, with the reason, from `all`; another
 * engine's nodes decide for themselves (the calibration job fails there with the reason).
 */
export function resolveTasks(tasks: string[] | "all", tasksDir: string | null, opts: { checkRunnableHere: boolean; python?: string; sandbox: string; say: (s: string) => void }): GraderTask[] {
  const ids = tasks === "all" ? listTaskIds(tasksDir ?? bundledTasksDir()) : tasks;
  if (!ids.length) throw new UsageError(`eval: --tasks all: no task in ${tasksDir ?? bundledTasksDir()}`);
  if (new Set(ids).size !== ids.length) throw new UsageError(`eval: --tasks names a task twice (${ids.join(",")})`);
  const loaded = ids.map((id) => loadGraderTask(id, tasksDir ?? undefined));
  if (!opts.checkRunnableHere) return loaded;
  return loaded.filter((t) => {
    const r = taskRunnableHere(t.spec, { python: taskPython(t.spec, opts.python).python, sandbox: opts.sandbox });
    if (r.runnable) return true;
    if (tasks !== "all") throw new NotRunnableError(t.id, r.reason ?? "not runnable here", "eval");
    opts.say(`${t.id}: left out, cannot run on this machine: ${r.reason}`);
    return false;
  });
}

/** The matrix's runs, task by task (a task's runs share its calibration). */
export function planRuns(tasks: GraderTask[], agents: AgentConfig[], repeats: number): PlannedRun[] {
  return tasks.flatMap((task) => agents.flatMap((agent) => Array.from({ length: repeats }, (_, i) => ({ run_id: runId(task.id, agent.name, i + 1), task, agent, repeat: i + 1 }))));
}

/** `infradev run …` for one run of the matrix (flags as cli/run.ts declares them). */
export function runArgv(cli: string, p: PlannedRun, runDir: string, grader: string[]): string[] {
  const a = p.agent;
  return [
    process.execPath, cli, "run",
    "--task", p.task.id,
    "--agent", a.harness,
    "--model", a.model,
    "--name", a.name,
    "--repeat", String(p.repeat),
    "--time-limit-min", String(a.time_limit_min),
    "--recoveries", String(a.recoveries),
    a.skill ? "--skill" : "--no-skill",
    ...(a.provider_url ? ["--provider-url", a.provider_url] : []),
    ...(a.provider_key_env ? ["--provider-key-env", a.provider_key_env] : []),
    "--out", runDir,
    ...grader,
    "--json",
  ];
}

export async function runEval(opts: EvalOptions): Promise<CampaignSummary> {
  const paths = campaignPaths(resolve(opts.campaignDir));
  const tasks = resolveTasks(opts.tasks, opts.tasksDir, { checkRunnableHere: opts.engine === "local", python: opts.python, sandbox: opts.sandbox, say: opts.say });
  if (!tasks.length) throw new UsageError("eval: --tasks all: no task can run on this machine (see the lines above)");
  const now = new Date().toISOString();
  const wanted: CampaignManifest = {
    schema_version: 1,
    kind: "eval",
    created_at: now,
    updated_at: now,
    tasks_dir: opts.tasksDir,
    tasks: tasks.map((t) => t.id),
    agents: opts.agents,
    repeats: opts.repeats,
    engine: opts.engine,
    concurrency: opts.concurrency ?? defaultConcurrency(opts.engine),
    argv: opts.argv,
  };
  const manifest = mergeManifest(readManifest(paths.dir), wanted, { extend: opts.extend, file: join(paths.dir, MANIFEST_FILE) });
  // --extend may have widened the matrix to tasks of earlier commands: those are run (resumed) too.
  const allTasks = manifest.tasks.map((id) => tasks.find((t) => t.id === id) ?? loadGraderTask(id, opts.tasksDir ?? undefined));
  mkdirSync(paths.runs, { recursive: true });
  writeManifest(paths.dir, manifest);

  // The cache `grade` and `calibrate` use (INFRADEV_CALIBRATION_DIR, else ~/.cache/infradev/calibration):
  // a campaign finds gold already calibrated by any earlier grade of the same task on this hardware.
  const calibrationDir = resolve(opts.calibrationDir ?? defaultCalibrationDir());
  const flags = graderFlags({ tasksDir: opts.tasksDir, calibrationDir, sandbox: opts.sandbox, python: opts.python });
  const cli = cliEntry();
  const planned = planRuns(allTasks, manifest.agents, manifest.repeats);
  const summary: CampaignSummary = { total: planned.length, reused: 0, finished: 0, errored: [], interrupted: false };
  const groups: WorkGroup[] = [];
  for (const task of allTasks) {
    const mine = planned.filter((p) => p.task.id === task.id);
    const todo = mine.filter((p) => !runComplete(join(paths.runs, p.run_id)));
    summary.reused += mine.length - todo.length;
    if (!todo.length) continue;
    groups.push({
      name: task.id,
      first: calibrationJob({ cli, paths, taskId: task.id, spec: task.fullSpec, graderFlags: flags }),
      onFirstFailed: (s) => {
        for (const p of todo) summary.errored.push(p.run_id);
        opts.say(`${task.id}: gold's calibration ${s.state}${s.reason ? ` (${s.reason})` : ""}: its ${todo.length} run(s) not started; see ${join(paths.logs, `calibrate--${task.id}.err`)}`);
      },
      items: todo.map((p) => {
        const runDir = join(paths.runs, p.run_id);
        return {
          spec: {
            id: p.run_id,
            argv: runArgv(cli, p, runDir, flags),
            cwd: paths.dir,
            env: jobEnv(paths, p.run_id),
            gpus: taskGpus(task.fullSpec),
            // A run mostly waits on its model; its test sessions are short bursts of `ranks` processes.
            cpus: 1,
            timeLimitSec: Math.ceil(p.agent.time_limit_min * 60) + gradeBudgetSec(task.fullSpec) + 300,
            stdoutPath: join(paths.logs, `${p.run_id}.out`),
            stderrPath: join(paths.logs, `${p.run_id}.err`),
          },
          onEnd: (s) => {
            const n = () => `[${summary.reused + summary.finished + summary.errored.length}/${summary.total}]`;
            if (s.state === "cancelled") {
              // This campaign cancelling its own jobs (SIGINT / SIGTERM) says so once; a cancel from outside is this run's error.
              if (opts.signal?.aborted) return;
              summary.errored.push(p.run_id);
              opts.say(`${n()} ${task.id} ${p.agent.name} r${p.repeat}: CANCELLED from outside this campaign (${s.reason ?? "no reason given"}); the same command resumes it`);
              return;
            }
            const rec = readJsonFile<RunRecord>(join(runDir, RUN_RECORD_FILE));
            const grade = readJsonFile<GradeResult>(join(runDir, GRADE_FILE));
            if (!rec?.ended_at || !grade || rec.exit_reason === "error") {
              summary.errored.push(p.run_id);
              const why = rec?.error ?? (rec ? (grade ? rec.exit_reason : "not graded") : `job ${s.state}${s.reason ? ` (${s.reason})` : ""}, no run.json`);
              opts.say(`${n()} ${task.id} ${p.agent.name} r${p.repeat}: ERROR ${why}; see ${join(paths.logs, `${p.run_id}.err`)}`);
              return;
            }
            summary.finished++;
            opts.say(`${n()} ${task.id} ${p.agent.name} r${p.repeat}: ${rec.exit_reason}, ${grade.status}, resolved A ${yesNo(grade.official.resolved)} / B ${yesNo(grade.with_probes.resolved)}, ${rec.wall_s.toFixed(1)} s`);
          },
        };
      }),
    });
  }
  if (summary.reused) opts.say(`${summary.reused} of ${summary.total} run(s) already complete: reused`);
  if (opts.engine === "local") await reapOrphanJobs(paths, KILL_GRACE_MS + 2000, opts.say);
  const engine = await engineFor(opts.engine, { concurrency: opts.concurrency, onState: jobRecorder(paths, opts.engine), slurm: opts.slurm });
  try {
    summary.interrupted = (await driveGroups(engine, groups, opts.signal)).interrupted;
  } finally {
    await engine.close();
  }
  return summary;
}
