/**
 * Exec semantics every backend shares: a deadline (timeout or abort) that fires once, and — for
 * backends that run a host process (local = bwrap, none) — spawning it in its own process group,
 * capturing its output, and killing its whole tree on the deadline.
 */
import { spawn, type ChildProcess } from "node:child_process";
import type { Readable, Writable } from "node:stream";
import { killTree, sendSignal } from "./process-tree.js";
import type { CapturedOutput, OutputCapture } from "./output-capture.js";
import type { ExecResult, SandboxKind } from "./types.js";

export const DEFAULT_KILL_GRACE_MS = 2000;
/** Backstop when a caller gives no timeout: nothing runs unbounded. */
export const DEFAULT_TIMEOUT_SEC = 3600;

/**
 * A backend cannot work on this machine (bwrap missing, no namespaces, engine unreachable): a harness
 * fault at creation, with a message that says what to install or change. Never a silent fallback.
 */
export class SandboxUnavailableError extends Error {
  constructor(
    readonly kind: SandboxKind,
    message: string,
  ) {
    super(message);
    this.name = "SandboxUnavailableError";
  }
}

export type DeadlineReason = "timeout" | "abort";

export interface Deadline {
  readonly timedOut: boolean;
  readonly cancelled: boolean;
  /** Stops the timer and the abort listener (call when the command has ended). */
  dispose(): void;
}

/** Checks a caller's timeout: a positive finite number of seconds, or the default when absent. */
export function effectiveTimeoutSec(timeoutSec: number | undefined, fallback = DEFAULT_TIMEOUT_SEC): number {
  const t = timeoutSec ?? fallback;
  if (!Number.isFinite(t) || t <= 0) throw new Error(`exec: timeoutSec must be a positive number of seconds (got ${timeoutSec})`);
  return t;
}

/**
 * Calls `onFire` once, when `timeoutSec` elapses or `signal` aborts (immediately if it already has),
 * whichever comes first; the reason is kept in `timedOut` / `cancelled`.
 */
export function watchDeadline(opts: { timeoutSec: number; signal?: AbortSignal; onFire: (reason: DeadlineReason) => void }): Deadline {
  let timedOut = false;
  let cancelled = false;
  let fired = false;
  const fire = (reason: DeadlineReason): void => {
    if (fired) return;
    fired = true;
    if (reason === "timeout") timedOut = true;
    else cancelled = true;
    dispose();
    opts.onFire(reason);
  };
  const timer = setTimeout(() => fire("timeout"), Math.min(opts.timeoutSec * 1000, 2 ** 31 - 1));
  const onAbort = (): void => fire("abort");
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  function dispose(): void {
    clearTimeout(timer);
    opts.signal?.removeEventListener("abort", onAbort);
  }
  if (opts.signal?.aborted) fire("abort");
  return {
    get timedOut() {
      return timedOut;
    },
    get cancelled() {
      return cancelled;
    },
    dispose,
  };
}

export interface HostProcessSpec {
  argv: string[];
  /** Host working directory of the spawned process. */
  cwd?: string;
  /** The complete environment (nothing is inherited). */
  env: Record<string, string>;
  capture: OutputCapture;
  timeoutSec: number;
  signal?: AbortSignal;
  killGraceMs: number;
  /** See TreeKillPlan.supervisorDepth: 0 for a plain command, 2 for bwrap. */
  supervisorDepth: number;
  /**
   * Open fd 3 as a pipe; the command writes a byte to it once the backend's own set-up is done and
   * the user's command is about to start (how a bwrap set-up failure is told from a command failure).
   */
  readyFd?: boolean;
  /**
   * Bytes the process reads on fd 4 (a pipe closed after them): how bwrap gets its arguments
   * (`--args 4`), so that no host path shows in its command line (/proc/<pid>/cmdline).
   */
  argsFdData?: Buffer;
  /** Open fds of this process handed to the child at fd 5, 6, ... (bwrap's --bind-fd). The caller closes them. */
  extraFds?: number[];
  /** Written to the child's stdin, which is then closed (without it, stdin is /dev/null). */
  stdinData?: Buffer;
  /**
   * A child already started by spawnHostChild (with the same layout: stdin, readyFd, argsFdData;
   * no extraFds) and still alive: it is run instead of spawning one. argv, cwd and env are unused.
   */
  child?: ChildProcess;
}

/** Starts the process runHostProcess would start for `spec` (own process group, the fd layout), without running it. */
export function spawnHostChild(spec: Pick<HostProcessSpec, "argv" | "cwd" | "env" | "readyFd" | "argsFdData" | "extraFds" | "stdinData">): ChildProcess {
  const stdio: Array<"ignore" | "pipe" | number> = [spec.stdinData ? "pipe" : "ignore", "pipe", "pipe"];
  const extra = spec.extraFds ?? [];
  if (spec.readyFd || spec.argsFdData || extra.length) stdio.push(spec.readyFd ? "pipe" : "ignore");
  if (spec.argsFdData || extra.length) stdio.push(spec.argsFdData ? "pipe" : "ignore");
  stdio.push(...extra);
  const [cmd, ...args] = spec.argv as [string, ...string[]];
  const child = spawn(cmd, args, { cwd: spec.cwd, env: spec.env, detached: true, stdio });
  // A pipe error must not crash the server; the exit status still tells what happened.
  for (const s of child.stdio) s?.on("error", () => undefined);
  return child;
}

/** The fd number the first of extraFds arrives on. */
export const EXTRA_FD_BASE = 5;

/** The fd number argsFdData arrives on. */
export const ARGS_FD = 4;

export interface HostProcessOutcome {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  cancelled: boolean;
  durationMs: number;
  /** The readiness byte arrived on fd 3 (always true without readyFd). */
  ready: boolean;
  /** The process could not be started at all (ENOENT, EACCES...). */
  spawnError?: NodeJS.ErrnoException;
  /** Pids of the tree still alive after the kill (should be empty). */
  survivors: number[];
}

/**
 * Runs one host process in its own process group with output captured, the deadline enforced on
 * its whole tree, and — when it exits by itself — whatever it left behind in its group killed, so
 * nothing outlives the command or keeps its output pipes open.
 */
export function runHostProcess(spec: HostProcessSpec): Promise<HostProcessOutcome> {
  const started = Date.now();
  if (spec.signal?.aborted) {
    return Promise.resolve({ exitCode: null, signal: null, timedOut: false, cancelled: true, durationMs: 0, ready: true, survivors: [] });
  }
  return new Promise((resolve) => {
    let ready = !spec.readyFd;
    const child = spec.child ?? spawnHostChild(spec);

    let settled = false;
    let killing: Promise<number[]> | undefined;
    let resolveExited!: () => void;
    const rootExited = new Promise<void>((r) => (resolveExited = r));

    const deadline = watchDeadline({
      timeoutSec: spec.timeoutSec,
      signal: spec.signal,
      onFire: () => {
        if (child.pid === undefined || settled) return;
        killing = killTree({ rootPid: child.pid, supervisorDepth: spec.supervisorDepth, processGroup: true, graceMs: spec.killGraceMs, rootExited });
      },
    });

    child.stdout!.on("data", (c: Buffer) => spec.capture.write("stdout", c));
    child.stderr!.on("data", (c: Buffer) => spec.capture.write("stderr", c));
    if (spec.readyFd) (child.stdio[3] as Readable).on("data", () => (ready = true));
    if (spec.argsFdData && child.pid !== undefined) (child.stdio[ARGS_FD] as Writable).end(spec.argsFdData);
    if (spec.stdinData && child.pid !== undefined) child.stdin!.end(spec.stdinData);

    const finish = async (exitCode: number | null, signal: string | null, spawnError?: NodeJS.ErrnoException): Promise<void> => {
      if (settled) return;
      settled = true;
      deadline.dispose();
      const survivors = killing ? await killing : [];
      resolve({ exitCode, signal, timedOut: deadline.timedOut, cancelled: deadline.cancelled, durationMs: Date.now() - started, ready, spawnError, survivors });
    };

    child.once("error", (err: NodeJS.ErrnoException) => {
      if (child.pid === undefined) {
        resolveExited();
        void finish(null, null, err);
      }
    });
    child.once("exit", (code, signal) => {
      deadline.dispose();
      resolveExited();
      if (child.pid !== undefined && !killing) sendSignal(-child.pid, "SIGKILL");
      // Output pipes close right after the exit unless something escaped the group and holds them.
      const hold = setTimeout(() => {
        for (const s of child.stdio) s?.destroy();
        void finish(code, signal);
      }, 1000);
      child.once("close", () => {
        clearTimeout(hold);
        void finish(code, signal);
      });
    });
  });
}

/** The parts of an ExecResult every backend fills the same way. */
export function execResultFrom(
  outcome: Pick<HostProcessOutcome, "exitCode" | "signal" | "timedOut" | "cancelled" | "durationMs">,
  captured: CapturedOutput,
  extra: { isolated: boolean; sandboxLogPath?: string; warning?: string; harnessError?: string },
): ExecResult {
  return {
    exitCode: outcome.exitCode,
    signal: outcome.signal,
    timedOut: outcome.timedOut,
    cancelled: outcome.cancelled,
    stdout: captured.stdout,
    stderr: captured.stderr,
    truncated: captured.truncated,
    ...(captured.logPath ? { logPath: captured.logPath } : {}),
    ...(captured.logPath && extra.sandboxLogPath ? { sandboxLogPath: extra.sandboxLogPath } : {}),
    ...(captured.logPath ? { logTruncatedBytes: captured.logTruncatedBytes } : {}),
    durationMs: outcome.durationMs,
    isolated: extra.isolated,
    ...(extra.warning ? { warning: extra.warning } : {}),
    ...(extra.harnessError ? { harnessError: extra.harnessError } : {}),
  };
}

/** Header lines for the full log: what ran, where, when. */
export function logHeaderLines(backend: string, argv: string[], cwd: string): string[] {
  return [`infradev ${backend} exec ${new Date().toISOString()}`, `cwd: ${cwd}`, `argv: ${JSON.stringify(argv)}`];
}

/** Footer lines for the full log: how it ended. */
export function logFooterLines(o: Pick<HostProcessOutcome, "exitCode" | "signal" | "timedOut" | "cancelled" | "durationMs">, harnessError?: string): string[] {
  const how = o.timedOut ? "timed out (tree killed)" : o.cancelled ? "cancelled (tree killed)" : "exited";
  return [`${how}: exit code ${o.exitCode ?? "none"}${o.signal ? `, signal ${o.signal}` : ""}, ${o.durationMs} ms`, ...(harnessError ? [`harness error: ${harnessError}`] : [])];
}
