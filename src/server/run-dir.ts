import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { PublicTask } from "../task/public/loader.js";
import type { RunSession } from "../tools/support/deps.js";
import { isRealFolderInside } from "../lib/safe-fs.js";
import { writeJsonAtomic } from "../lib/json.js";

/**
 * One session's folder, `runs/<run-id>/`, with constant names (a run resumes from what is there):
 *
 *   session.json   task, base commit, submission state
 *   workspace/     the agent's repo (git, base committed)
 *   base/          pristine checkout of the base commit (git worktree), read-only in the sandbox
 *   logs/          every exec's log (capped), read-only inside the sandbox at /infradev/logs
 *   trace.jsonl    one line per tool call
 *   patch.diff     the patch (on submit, and on shutdown)
 */

export interface RunPaths {
  runId: string;
  runDir: string;
  workspaceDir: string;
  baseDir: string;
  logsDir: string;
  sessionFile: string;
  tracePath: string;
  patchPath: string;
}

interface SessionFile {
  schema_version: 1;
  run_id: string;
  task_id: string;
  /** The task folder the run was created from (absolute); absent in runs made before it was recorded. */
  task_dir?: string;
  base_commit: string;
  created_at: string;
  resumed_at: string[];
  submitted_at: string | null;
  note: string | null;
  patch_written_at: string | null;
}

const RUN_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export function runPaths(runsDir: string, runId: string): RunPaths {
  if (!RUN_ID.test(runId) || runId.includes("..")) {
    throw new Error(`run id "${runId}" is not valid: use letters, digits, '.', '_' and '-' (as printed when the run was created)`);
  }
  const runDir = join(resolve(runsDir), runId);
  return {
    runId,
    runDir,
    workspaceDir: join(runDir, "workspace"),
    baseDir: join(runDir, "base"),
    logsDir: join(runDir, "logs"),
    sessionFile: join(runDir, "session.json"),
    tracePath: join(runDir, "trace.jsonl"),
    patchPath: join(runDir, "patch.diff"),
  };
}

export function newRunId(taskId: string, now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
  return `${taskId}-${stamp}-${randomBytes(3).toString("hex")}`;
}


/** The session state behind the RunSession interface the tools see; persisted on every change. */
export class RunDirSession implements RunSession {
  private state: SessionFile;

  constructor(
    readonly paths: RunPaths,
    state: SessionFile,
  ) {
    this.state = state;
  }

  get runId(): string {
    return this.paths.runId;
  }
  get runDir(): string {
    return this.paths.runDir;
  }
  get baseCommit(): string {
    return this.state.base_commit;
  }
  get patchPath(): string {
    return this.paths.patchPath;
  }
  get tracePath(): string {
    return this.paths.tracePath;
  }
  get taskId(): string {
    return this.state.task_id;
  }

  submitted(): { at: string; note: string | null } | null {
    return this.state.submitted_at ? { at: this.state.submitted_at, note: this.state.note } : null;
  }

  recordPatch(patch: string, submission?: { note: string | null }): { at: string } {
    const at = new Date().toISOString();
    const tmp = `${this.paths.patchPath}.tmp${process.pid}`;
    writeFileSync(tmp, patch);
    renameSync(tmp, this.paths.patchPath);
    this.state = { ...this.state, patch_written_at: at, ...(submission ? { submitted_at: at, note: submission.note } : {}) };
    writeJsonAtomic(this.paths.sessionFile, this.state);
    return { at };
  }
}

export interface OpenRunOptions {
  task: PublicTask;
  runsDir: string;
  /** Reopen this run instead of creating a new one. */
  resume?: string;
  now?: Date;
  /** A new run's folder made already (reserveRun): `serve` names the run before it answers `initialize`. */
  reserved?: RunPaths;
  /** The task's folder, recorded in a new run's session.json (`serve --resume` without `--task` reads it). */
  taskDir?: string;
  /** Long steps of creating the workspace (a first clone of a git source). */
  onProgress?: (msg: string) => void;
}

/**
 * The task of an existing run, for `serve --resume <run-id>` without `--task`: the folder recorded
 * in its session.json when it still holds a task.yaml, else the task id (looked up in the tasks
 * folder as usual). Throws the same clear errors as a resume does.
 */
export function resumedTaskRef(runsDir: string, runId: string): string {
  const paths = runPaths(runsDir, runId);
  if (!existsSync(paths.sessionFile)) {
    throw new Error(`--resume ${runId}: no run there (${paths.sessionFile} is missing); runs are folders of ${resolve(runsDir)}`);
  }
  const state = JSON.parse(readFileSync(paths.sessionFile, "utf8")) as SessionFile;
  if (typeof state.task_id !== "string") throw new Error(`--resume ${runId}: ${paths.sessionFile} names no task_id; pass --task`);
  if (typeof state.task_dir === "string" && existsSync(join(state.task_dir, "task.yaml"))) return state.task_dir;
  return state.task_id;
}

/** Picks a new run id and makes its (empty) folder, synchronously; openRun({ reserved }) fills it. */
export function reserveRun(taskId: string, runsDir: string, now?: Date): RunPaths {
  const paths = runPaths(runsDir, newRunId(taskId, now));
  mkdirSync(paths.runDir, { recursive: true });
  return paths;
}

/** Creates runs/<new-id>/ with the workspace at base, or reopens runs/<resume>/ as it was left. */
export async function openRun(opts: OpenRunOptions): Promise<{ session: RunDirSession; resumed: boolean }> {
  if (opts.resume !== undefined) {
    const paths = runPaths(opts.runsDir, opts.resume);
    if (!existsSync(paths.sessionFile)) {
      throw new Error(`--resume ${opts.resume}: no run there (${paths.sessionFile} is missing); runs are folders of ${resolve(opts.runsDir)}`);
    }
    const state = JSON.parse(readFileSync(paths.sessionFile, "utf8")) as SessionFile;
    if (state.task_id !== opts.task.id) {
      throw new Error(`--resume ${opts.resume}: that run is for task "${state.task_id}", not "${opts.task.id}"; pass --task ${state.task_id}`);
    }
    // lstat, not stat: the agent owned the workspace, and its .git may be a planted link.
    if (!isRealFolderInside(paths.runDir, "workspace/.git")) throw new Error(`--resume ${opts.resume}: the workspace ${paths.workspaceDir} is missing or not a git repo (its .git must be a real folder)`);
    const resumed: SessionFile = { ...state, resumed_at: [...(state.resumed_at ?? []), (opts.now ?? new Date()).toISOString()] };
    writeJsonAtomic(paths.sessionFile, resumed);
    return { session: new RunDirSession(paths, resumed), resumed: true };
  }
  const paths = opts.reserved ?? reserveRun(opts.task.id, opts.runsDir, opts.now);
  // Imported here (git client): `serve` answers `initialize` before it builds the run.
  const { createSnapshot } = await import("../task/public/snapshot.js");
  const snap = await createSnapshot(opts.task, paths.workspaceDir, { onProgress: opts.onProgress });
  const state: SessionFile = {
    schema_version: 1,
    run_id: paths.runId,
    task_id: opts.task.id,
    ...(opts.taskDir ? { task_dir: resolve(opts.taskDir) } : {}),
    base_commit: snap.baseCommit,
    created_at: (opts.now ?? new Date()).toISOString(),
    resumed_at: [],
    submitted_at: null,
    note: null,
    patch_written_at: null,
  };
  writeJsonAtomic(paths.sessionFile, state);
  return { session: new RunDirSession(paths, state), resumed: false };
}
