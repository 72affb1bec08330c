/**
 * The docker sandbox once its container runs: exec (through docker-exec.ts), path mapping between the
 * container and the host, and close(). Made by createDockerSandbox (docker.ts).
 */
import { basename, posix, relative, resolve } from "node:path";
import type { Duplex } from "node:stream";
import type Docker from "dockerode";
import type { Logger } from "../../lib/logger.js";
import { PathOutsideRootError, isPathInside, resolveInside } from "../../lib/path-validation.js";
import { execInContainer, type GroupSignal } from "./exec.js";
import { PidsWatch, type OomWatch } from "./oom.js";
import { CONTAINER_LOG_DIR, CONTAINER_PYTHON_HELPERS, CONTAINER_WORKSPACE } from "./spec.js";
import { releaseLogDir, type HostLogDir } from "../log-dir.js";
import { effectiveTimeoutSec, execResultFrom, logFooterLines, logHeaderLines } from "../exec-common.js";
import { OutputCapture, newExecId } from "../output-capture.js";
import type { ExecOptions, ExecResult, Sandbox } from "../types.js";

export interface DockerSandboxConfig {
  docker: Docker;
  container: Docker.Container;
  containerName: string;
  hostRepoDir: string;
  python: string;
  logDir: HostLogDir;
  logHeadBytes?: number;
  logTailBytes?: number;
  maxOutputBytes: number;
  defaultTimeoutSec: number;
  killGraceMs: number;
  logger: Logger;
  oom: OomWatch;
  initStdin: Duplex;
}

export class DockerSandbox implements Sandbox {
  readonly kind = "docker" as const;
  readonly repoDir = CONTAINER_WORKSPACE;
  readonly pythonHelpersDir = CONTAINER_PYTHON_HELPERS;
  readonly hostRepoDir: string;
  readonly python: string;
  readonly logDir: string;
  readonly docker: Docker;
  readonly container: Docker.Container;
  readonly containerName: string;
  private readonly running = new Map<AbortController, Promise<unknown>>();
  /** The container's pids cgroup counter of refused forks (host side, when the engine runs here). */
  private readonly pids: PidsWatch;
  private closed = false;

  constructor(private readonly cfg: DockerSandboxConfig) {
    this.hostRepoDir = cfg.hostRepoDir;
    this.python = cfg.python;
    this.logDir = cfg.logDir.hostDir;
    this.docker = cfg.docker;
    this.container = cfg.container;
    this.containerName = cfg.containerName;
    this.pids = new PidsWatch(cfg.container);
  }

  get containerId(): string {
    return this.container.id;
  }

  async exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    if (this.closed) throw new Error(`docker sandbox: exec after close() (container ${this.containerName})`);
    if (argv.length === 0 || argv[0] === "") throw new Error("docker sandbox: exec needs a non-empty argv");
    if (argv.some((a) => a.includes("\0"))) throw new Error("docker sandbox: an argv element contains a NUL byte");
    const timeoutSec = effectiveTimeoutSec(opts.timeoutSec, this.cfg.defaultTimeoutSec);
    const workdir = posix.resolve(CONTAINER_WORKSPACE, opts.cwd ?? ".");
    const execId = newExecId();
    const capture = new OutputCapture(
      {
        maxOutputBytes: opts.maxOutputBytes ?? this.cfg.maxOutputBytes,
        logDir: this.cfg.logDir.hostDir,
        logHeadBytes: this.cfg.logHeadBytes,
        logTailBytes: this.cfg.logTailBytes,
        logHeader: [...logHeaderLines("docker", argv, workdir), `container: ${this.containerName}`],
        onOutput: opts.onOutput,
      },
      execId,
    );
    const closer = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, closer.signal]) : closer.signal;
    const pidsBefore = this.pids.read();
    const pending = execInContainer(this.container, this.docker, {
      argv,
      workdir,
      env: opts.env ?? {},
      timeoutSec,
      signal,
      killGraceMs: this.cfg.killGraceMs,
      capture,
      execId,
      signalGroup: (sig, pgid) => this.signalGroup(sig, pgid),
      oom: this.cfg.oom,
    });
    this.running.set(closer, pending);
    const outcome = await pending.finally(() => this.running.delete(closer));

    const footer = logFooterLines(outcome, outcome.harnessError);
    if (outcome.oomKilled) footer.push("killed by the container's memory limit (OOM)");
    const pidsAfter = this.pids.read();
    // Counted for the whole container: an exec running beside this one may have hit it (said as such).
    const pidsLimitHit = pidsBefore !== null && pidsAfter !== null && pidsAfter > pidsBefore;
    const pidsLine = `process limit reached: the container refused ${pidsAfter! - pidsBefore!} fork(s) during this command (--pids-limit)`;
    if (pidsLimitHit) footer.push(pidsLine);
    const captured = await capture.finish(footer);
    if (outcome.timedOut || outcome.oomKilled || outcome.harnessError) {
      this.cfg.logger.warn(
        { container: this.containerName, argv0: argv[0], timedOut: outcome.timedOut, oomKilled: outcome.oomKilled, harnessError: outcome.harnessError },
        "docker exec ended abnormally",
      );
    }
    const sandboxLogPath = captured.logPath ? posix.join(CONTAINER_LOG_DIR, basename(captured.logPath)) : undefined;
    const result = execResultFrom(outcome, captured, { isolated: true, sandboxLogPath, harnessError: outcome.harnessError });
    if (outcome.oomKilled) result.oomKilled = true;
    if (pidsLimitHit) {
      result.pidsLimitHit = true;
      result.warning = result.warning ? `${result.warning}; ${pidsLine}` : pidsLine;
    }
    return result;
  }

  /** Hands a process-group signal to the container's init loop (see INIT_LOOP in docker-spec.ts). */
  private signalGroup(sig: GroupSignal, pgid: number): boolean {
    const stdin = this.cfg.initStdin;
    if (stdin.destroyed || !stdin.writable) return false;
    stdin.write(`${sig} ${pgid}\n`);
    return true;
  }

  toHostPath(sandboxPath: string): string {
    if (sandboxPath.includes("\0")) throw new PathOutsideRootError(CONTAINER_WORKSPACE, sandboxPath, "it contains a NUL byte");
    const abs = posix.resolve(CONTAINER_WORKSPACE, sandboxPath);
    if (!isPathInside(CONTAINER_WORKSPACE, abs)) throw new PathOutsideRootError(CONTAINER_WORKSPACE, sandboxPath, "it is outside the workspace");
    // Through resolveInside: a symlink the command planted in the workspace cannot lead the host out.
    return resolveInside(this.hostRepoDir, posix.relative(CONTAINER_WORKSPACE, abs) || ".");
  }

  /** The container's view of a host path inside the workspace, or null when the container cannot see it. */
  toSandboxPath(hostPath: string): string | null {
    const abs = resolve(hostPath);
    if (!isPathInside(this.hostRepoDir, abs)) return null;
    const rel = relative(this.hostRepoDir, abs);
    return rel === "" ? CONTAINER_WORKSPACE : posix.join(CONTAINER_WORKSPACE, ...rel.split("/"));
  }

  /** Cancels every running exec (their trees are killed), then removes the container. Idempotent. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const closer of this.running.keys()) closer.abort();
    await Promise.allSettled(this.running.values());
    this.cfg.oom.stop();
    this.cfg.initStdin.destroy();
    try {
      await this.container.remove({ force: true, v: true });
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    } finally {
      releaseLogDir(this.cfg.logDir);
    }
  }
}
