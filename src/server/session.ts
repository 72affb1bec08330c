import { resolve } from "node:path";
import type { Logger } from "../lib/logger.js";
import { bundledTasksDir } from "../lib/paths.js";
import type { Sandbox, SandboxKind } from "../sandbox/types.js";
import { loadPublicTask, resolveTaskDir, type PublicTask } from "../task/public/loader.js";
import { taskPython } from "../task/public/runnable.js";
import type { ToolDeps } from "../tools/index.js";
import type { Skill } from "../tools/support/deps.js";
import { workspaceDiff } from "../tools/support/workspace-diff.js";
import { openRun, reserveRun, resumedTaskRef, type RunDirSession, type RunPaths } from "./run-dir.js";
import { loadSkill } from "./skill.js";
import { JsonlTrace } from "./trace.js";

/** Where the pristine base checkout appears inside the sandbox. */
export const SANDBOX_BASE_DIR = "/base";

/** What the server asks of a sandbox backend; cli/serve.ts maps it onto createSandbox(...). */
export interface SandboxRequest {
  kind: SandboxKind;
  /** The workspace on the host (the sandbox's repo, read-write). */
  hostRepoDir: string;
  /** Extra read-only binds: the base checkout at /base. */
  readOnlyMounts: Array<{ host: string; sandbox: string }>;
  /** The task's env.pythonpath folders (host paths inside `boundary`, the task folder): read-only and first on PYTHONPATH. */
  pythonPath: Array<{ host: string; boundary: string }>;
  /** Host paths the sandbox must never see: the task folder (hidden/ with it), the package's tasks/, every run. */
  hiddenPaths: string[];
  /** Host folder for exec logs, outside the workspace: runs/<run-id>/logs (read-only inside at /infradev/logs). */
  logDir: string;
  python: string;
  sessionId: string;
  task: PublicTask;
  logger: Logger;
}

export type SandboxFactory = (req: SandboxRequest) => Promise<Sandbox>;

export interface SessionOptions {
  /** The task id or folder; may be left out with `resume` (the run folder names its task). */
  taskId?: string;
  tasksRoot?: string;
  runsDir: string;
  resume?: string;
  sandboxKind: SandboxKind;
  python?: string;
  logger: Logger;
  createSandbox: SandboxFactory;
  /**
   * Called with the task as soon as it is loaded, before anything is made or served: `serve` refuses
   * a task this machine cannot run here (it throws; startSession throws it on).
   */
  checkTask?: (task: PublicTask) => void;
}

export interface Session {
  deps: ToolDeps;
  session: RunDirSession;
  resumed: boolean;
  /**
   * Writes patch.diff, closes the sandbox (cancelling commands still running), waits for `settled`
   * (the owner's signal that the calls those commands served have answered, hence written their trace
   * lines), then appends session_end, so that it stays the trace's last line. Idempotent.
   */
  finish(reason: string, opts?: { settled?: () => Promise<void> }): Promise<void>;
}

/** How long shutdown waits for the sandbox to close before writing session_end anyway. */
const CLOSE_WAIT_MS = 15_000;

/** Resolves when `p` settles or after `ms`, whichever is first; true when `p` settled in time. */
async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((res) => (timer = setTimeout(() => res(false), ms)));
  try {
    return await Promise.race([p.then(() => true as const), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A session whose build has started: enough to answer `initialize` and register the tools at once. */
export interface StartedSession {
  task: PublicTask;
  /**
   * For createServer: task, skill and logger now; sandbox, session, base and trace once `ready`
   * resolves (reading them earlier throws). Every tool call waits for `deps.ready` (tools/support/register.ts).
   */
  deps: ToolDeps;
  /** The built session; rejects with the reason it could not be built (then every tool call fails with it). */
  ready: Promise<Session>;
}

/**
 * Starts a session: the task (through the public door only) and the skill are read now, synchronously,
 * so that a bad task or run id fails before anything is served; the slow part (the run folder, the
 * workspace copy, the base checkout, the sandbox) is built in the background, after the caller had a
 * turn to connect its transport. An MCP client thus gets its `initialize` reply before the workspace
 * exists (Codex waits about 1 s for a server).
 */
export function startSession(opts: SessionOptions): StartedSession {
  const taskRef = opts.taskId ?? (opts.resume !== undefined ? resumedTaskRef(opts.runsDir, opts.resume) : undefined);
  if (taskRef === undefined) throw new Error("serve: --task is required (or --resume <run-id>, whose run names its task)");
  const task = loadPublicTask(taskRef, opts.tasksRoot);
  opts.checkTask?.(task);
  const skill = loadSkill();
  // The run's folder exists before anything is served (whoever watches the runs folder sees it at once).
  const reserved = opts.resume === undefined ? reserveRun(task.id, opts.runsDir) : undefined;
  let built: Session | null = null;
  const ready = new Promise<void>((res) => setImmediate(res)).then(() => buildSession({ ...opts, taskId: taskRef }, task, skill, reserved));
  ready.then((s) => (built = s)).catch(() => undefined); // the owner reports a failure; never an unhandled rejection
  const need = (): ToolDeps => {
    if (!built) throw new Error("the session is still being built (tool calls wait for deps.ready)");
    return built.deps;
  };
  const deps: ToolDeps = {
    task,
    skill,
    logger: opts.logger,
    ready: ready.then(() => undefined),
    get sandbox() {
      return need().sandbox;
    },
    get session() {
      return need().session;
    },
    get base() {
      return need().base;
    },
    get trace() {
      return need().trace;
    },
  };
  deps.ready!.catch(() => undefined);
  return { task, deps, ready };
}

/**
 * Everything one `infradev serve` session needs, in order: the task through the public door only,
 * the run folder (new, or resumed), the pristine base checkout, the sandbox (which hides the task
 * folder, the package's tasks and all runs), the skill and the trace.
 */
export async function openSession(opts: SessionOptions): Promise<Session> {
  return startSession(opts).ready;
}

async function buildSession(opts: SessionOptions & { taskId: string }, task: PublicTask, skill: Skill, reserved: RunPaths | undefined): Promise<Session> {
  const { session, resumed } = await openRun({ task, runsDir: opts.runsDir, resume: opts.resume, reserved, taskDir: resolveTaskDir(opts.taskId, opts.tasksRoot), onProgress: (msg) => opts.logger.info(msg) });
  const { paths } = session;
  let baseHost: string | null;
  if (resumed) {
    const { existingBaseCheckout } = await import("./base-checkout.js");
    baseHost = existingBaseCheckout(paths.baseDir);
    if (!baseHost) opts.logger.warn({ base: paths.baseDir }, "the run's base checkout is gone; measure's compare_with_base is unavailable");
  } else {
    const { createBaseCheckout } = await import("./base-checkout.js");
    baseHost = await createBaseCheckout(paths.workspaceDir, paths.baseDir, session.baseCommit);
  }
  const taskDir = resolveTaskDir(opts.taskId, opts.tasksRoot);
  const hiddenPaths = [...new Set([resolve(taskDir), resolve(opts.tasksRoot ?? bundledTasksDir()), bundledTasksDir(), resolve(opts.runsDir)])];
  const trace = new JsonlTrace(paths.tracePath);
  const sandbox = await opts.createSandbox({
    kind: opts.sandboxKind,
    hostRepoDir: paths.workspaceDir,
    readOnlyMounts: baseHost ? [{ host: baseHost, sandbox: SANDBOX_BASE_DIR }] : [],
    hiddenPaths,
    pythonPath: task.pythonPath.map((host) => ({ host, boundary: taskDir })),
    logDir: paths.logsDir,
    // The one interpreter rule (tasks/runnable.ts): --python, else $INFRADEV_PYTHON, else task.yaml's env.python.
    python: taskPython(task.spec, opts.python).python,
    sessionId: paths.runId,
    task,
    logger: opts.logger,
  });
  // The `none` backend cannot remap paths: the base is wherever it is on the host.
  const baseInSandbox = baseHost ? (sandbox.kind === "none" ? baseHost : SANDBOX_BASE_DIR) : null;
  const deps: ToolDeps = {
    task,
    sandbox,
    session,
    base: baseHost && baseInSandbox ? { hostDir: baseHost, sandboxDir: baseInSandbox, commit: session.baseCommit } : null,
    skill,
    logger: opts.logger,
    trace,
  };
  trace.append({
    ts: new Date().toISOString(),
    event: resumed ? "session_resume" : "session_start",
    run_id: paths.runId,
    task_id: task.id,
    sandbox: sandbox.kind,
    workspace: paths.workspaceDir,
    base_commit: session.baseCommit,
  });
  let finished: Promise<void> | null = null;
  const finish = (reason: string, finishOpts: { settled?: () => Promise<void> } = {}): Promise<void> => {
    finished ??= (async () => {
      const started = Date.now();
      let patch: { files_changed: number; patch_bytes: number } | { error: string };
      try {
        const diff = await workspaceDiff(sandbox, session.baseCommit);
        session.recordPatch(diff.patch);
        patch = { files_changed: diff.files_changed, patch_bytes: diff.patch_bytes };
      } catch (e) {
        patch = { error: (e as Error).message };
        opts.logger.error({ err: (e as Error).message }, "could not write patch.diff at shutdown");
      }
      // Closing first cancels a command still running; its tool call then records itself before session_end.
      const closing = sandbox.close().catch((e: unknown) => opts.logger.error({ err: String(e) }, "sandbox close failed"));
      if (!(await within(closing, CLOSE_WAIT_MS))) opts.logger.error(`the sandbox did not close within ${CLOSE_WAIT_MS / 1000} s; ending the session anyway`);
      else if (finishOpts.settled) await finishOpts.settled().catch(() => undefined);
      try {
        trace.append({ ts: new Date().toISOString(), event: "session_end", reason, duration_ms: Date.now() - started, submitted: session.submitted() !== null, patch });
      } catch (e) {
        opts.logger.error({ err: String(e) }, "could not append the last trace line");
      }
      await closing;
    })();
    return finished;
  };
  return { deps, session, resumed, finish };
}
