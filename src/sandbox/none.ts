/**
 * The `none` backend: commands run as plain host processes, with the same timeout, tree kill, output
 * cap and logs as the others — and nothing isolated. Only for an explicit choice; every result says so.
 */
import { statSync } from "node:fs";
import { resolve } from "node:path";
import { silentLogger, type Logger } from "../lib/logger.js";
import { resolveInside } from "../lib/path-validation.js";
import { sandboxPythonDir } from "../lib/paths.js";
import {
  DEFAULT_KILL_GRACE_MS,
  DEFAULT_TIMEOUT_SEC,
  effectiveTimeoutSec,
  execResultFrom,
  logFooterLines,
  logHeaderLines,
  runHostProcess,
} from "./exec-common.js";
import { prepareLogDir, releaseLogDir, type HostLogDir } from "./log-dir.js";
import { DEFAULT_MAX_OUTPUT_BYTES, OutputCapture } from "./output-capture.js";
import type { ExecOptions, ExecResult, Sandbox } from "./types.js";

export const NONE_WARNING =
  "sandbox 'none': this command ran directly on the host with the server's user and environment; nothing is isolated (files, network, processes).";

export interface NoneSandboxOptions {
  hostRepoDir: string;
  /** Default /usr/bin/python3. */
  python?: string;
  /**
   * Host folder for the exec logs, outside the workspace (the server: runs/<run-id>/logs). Default:
   * a private temp folder, removed by close(). Commands see it at its host path.
   */
  logDir?: string;
  /** The stored log keeps the first and the last this many bytes of an exec's output (default 8 MiB each). */
  logHeadBytes?: number;
  logTailBytes?: number;
  /** Environment of every exec, over the base one. */
  env?: Record<string, string>;
  /**
   * Start from the server's own environment (default true: the reason to pick `none` is usually a
   * host set-up — conda, CUDA — that commands need). false: only PATH, LANG, HOME of the host.
   */
  inheritEnv?: boolean;
  maxOutputBytes?: number;
  defaultTimeoutSec?: number;
  killGraceMs?: number;
  logger?: Logger;
}

export class NoneSandbox implements Sandbox {
  readonly kind = "none" as const;
  readonly repoDir: string;
  readonly hostRepoDir: string;
  readonly pythonHelpersDir: string;
  readonly python: string;
  readonly logDir: string;
  private readonly hostLogDir: HostLogDir;
  private readonly env: Record<string, string>;
  private readonly logger: Logger;
  private readonly running = new Map<AbortController, Promise<unknown>>();
  private closed = false;

  constructor(private readonly opts: NoneSandboxOptions) {
    const repo = resolve(opts.hostRepoDir);
    let isDir = false;
    try {
      isDir = statSync(repo).isDirectory();
    } catch {
      // reported below
    }
    if (!isDir) throw new Error(`none sandbox: hostRepoDir ${opts.hostRepoDir} is not an existing folder`);
    this.hostRepoDir = repo;
    this.repoDir = repo;
    this.pythonHelpersDir = sandboxPythonDir();
    this.python = opts.python ?? "/usr/bin/python3";
    this.hostLogDir = prepareLogDir(opts.logDir, repo, "none");
    this.logDir = this.hostLogDir.hostDir;
    const host = Object.fromEntries(Object.entries(process.env).filter((e): e is [string, string] => typeof e[1] === "string"));
    const base =
      opts.inheritEnv === false
        ? Object.fromEntries(["PATH", "LANG", "HOME"].filter((k) => host[k] !== undefined).map((k) => [k, host[k]!]))
        : host;
    this.env = { ...base, INFRADEV_SANDBOX: "none", ...opts.env };
    this.logger = opts.logger ?? silentLogger();
    this.logger.warn({ workspace: repo }, NONE_WARNING);
  }

  async exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    if (this.closed) throw new Error("none sandbox: exec after close()");
    if (argv.length === 0 || argv[0] === "") throw new Error("none sandbox: exec needs a non-empty argv");
    if (argv.some((a) => a.includes("\0"))) throw new Error("none sandbox: an argv element contains a NUL byte");
    const timeoutSec = effectiveTimeoutSec(opts.timeoutSec, this.opts.defaultTimeoutSec ?? DEFAULT_TIMEOUT_SEC);
    const cwd = resolve(this.repoDir, opts.cwd ?? ".");
    const capture = new OutputCapture({
      maxOutputBytes: opts.maxOutputBytes ?? this.opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES,
      logDir: this.logDir,
      logHeadBytes: this.opts.logHeadBytes,
      logTailBytes: this.opts.logTailBytes,
      logHeader: [...logHeaderLines("none", argv, cwd), NONE_WARNING],
      onOutput: opts.onOutput,
    });

    let cwdIsDir = false;
    try {
      cwdIsDir = statSync(cwd).isDirectory();
    } catch {
      // reported as the command's failure below
    }
    let outcome;
    let harnessError: string | undefined;
    if (!cwdIsDir) {
      capture.write("stderr", `infradev: cannot cd to ${cwd}: no such folder\n`);
      outcome = { exitCode: 1, signal: null, timedOut: false, cancelled: false, durationMs: 0 };
    } else {
      const closer = new AbortController();
      const signal = opts.signal ? AbortSignal.any([opts.signal, closer.signal]) : closer.signal;
      const pending = runHostProcess({
        argv,
        cwd,
        env: { ...this.env, ...opts.env },
        capture,
        timeoutSec,
        signal,
        killGraceMs: this.opts.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
        supervisorDepth: 0,
      });
      this.running.set(closer, pending);
      const run = await pending.finally(() => this.running.delete(closer));
      outcome = run;
      if (run.spawnError) {
        // Like a shell: a missing program is the command's failure (127), not the harness's.
        const code = run.spawnError.code === "ENOENT" ? 127 : 126;
        capture.write("stderr", `infradev: cannot run ${argv[0]}: ${run.spawnError.message}\n`);
        outcome = { ...run, exitCode: code };
      } else if (run.survivors.length) {
        harnessError = `processes survived the kill: ${run.survivors.join(", ")}`;
        this.logger.warn({ argv0: argv[0], survivors: run.survivors }, "none sandbox: processes survived the kill");
      }
    }
    const captured = await capture.finish(logFooterLines(outcome, harnessError));
    return execResultFrom(outcome, captured, { isolated: false, sandboxLogPath: captured.logPath, warning: NONE_WARNING, harnessError });
  }

  toHostPath(sandboxPath: string): string {
    return resolveInside(this.hostRepoDir, sandboxPath);
  }

  /** Kills every running exec's tree and waits for them. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const closer of this.running.keys()) closer.abort();
    await Promise.allSettled(this.running.values());
    releaseLogDir(this.hostLogDir);
  }
}

/** Creates the `none` backend. Call it only on an explicit request: nothing is isolated. */
export function createNoneSandbox(opts: NoneSandboxOptions): NoneSandbox {
  return new NoneSandbox(opts);
}
