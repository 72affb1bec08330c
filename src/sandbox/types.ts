/**
 * The one interface every sandbox backend (local = bubblewrap, docker, none) implements, and the
 * process-runner seam through which the rank launcher, pytest and the grader run commands.
 */

export type SandboxKind = "local" | "docker" | "none";

export interface ExecOptions {
  /** Working directory as the sandbox sees it; relative paths resolve against `repoDir`. */
  cwd?: string;
  /** Extra environment variables (merged over the sandbox's base environment). */
  env?: Record<string, string>;
  /** Wall-clock limit; on expiry the whole process tree is killed and `timedOut` is set. */
  timeoutSec?: number;
  /** Cap on stdout + stderr kept in memory (head and tail kept); the log is saved to a file (capped too). */
  maxOutputBytes?: number;
  /** Cancels the command (kills the whole process tree) when aborted. */
  signal?: AbortSignal;
  /** Streaming output, for progress. */
  onOutput?: (chunk: string, stream: "stdout" | "stderr") => void;
}

export interface ExecResult {
  /** Exit code, or null when the process was killed by a signal. */
  exitCode: number | null;
  /** The signal that ended the process, if any. */
  signal: string | null;
  timedOut: boolean;
  cancelled: boolean;
  /** Captured output, capped to maxOutputBytes (head + marker + tail). */
  stdout: string;
  stderr: string;
  /** True when stdout or stderr was cut. */
  truncated: boolean;
  /**
   * Host path of the stored log (stdout and stderr interleaved), when one was saved. It lives outside
   * the workspace, in a folder the sandbox can only read (server: runs/<run-id>/logs/).
   */
  logPath?: string;
  /** The same log as commands inside the sandbox see it: /infradev/logs/<file> (none: the host path). */
  sandboxLogPath?: string;
  /**
   * Bytes of output the stored log dropped: it keeps the first and the last N bytes (8 MiB each by
   * default) with a marker line between; 0 when the log holds all of the output.
   */
  logTruncatedBytes?: number;
  durationMs: number;
  /** False only for the `none` backend: nothing is isolated. */
  isolated: boolean;
  /** One line a caller must pass on to the user, e.g. the `none` backend's "nothing is isolated". */
  warning?: string;
  /** Set when the backend itself failed (not the command): bwrap missing, engine unreachable... */
  harnessError?: string;
  /** Set when the container / cgroup's memory limit killed the command. */
  oomKilled?: boolean;
  /** Set when the exec reached its process limit (local: the pids cgroup's pids.events `max` count rose). */
  pidsLimitHit?: boolean;
}

export interface Sandbox {
  readonly kind: SandboxKind;
  /** The repo (workspace) path as commands inside the sandbox see it. */
  readonly repoDir: string;
  /** The same repo on the host (where the server / grader reads results). */
  readonly hostRepoDir: string;
  /** Where the package's python/sandbox helpers are visible inside the sandbox (read-only). */
  readonly pythonHelpersDir: string;
  /** The Python interpreter to use inside the sandbox. */
  readonly python: string;
  /** Run argv (never a shell string; a shell is argv ["bash", "-lc", cmd] inside the sandbox). */
  exec(argv: string[], opts?: ExecOptions): Promise<ExecResult>;
  /** Maps a path inside repoDir (sandbox view) to the host path, or throws if it is outside. */
  toHostPath(sandboxPath: string): string;
  close(): Promise<void>;
}
