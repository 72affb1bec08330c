/**
 * The `local` backend: every exec is one bubblewrap sandbox — read-only system folders, the workspace
 * read-write at /workspace, a private /tmp, no network but loopback, no capabilities, and every hidden
 * path that would be visible through a bind masked by an empty mount. Exec logs are written by the
 * host in a folder outside the workspace, read-only inside at /infradev/logs; read-only overlays
 * (contract C) sit at /workspace/<rel>; each exec runs in its own pids cgroup (a process limit).
 *
 * What the sandbox can learn of the host layout: bwrap gets its options (every host path) on fd 4
 * (`--args 4`), so neither its own command line nor pid 1's inside names a host path, and the
 * environment is built from scratch (PATH, LANG, HOME, TMPDIR, INFRADEV_SANDBOX and the caller's).
 * /proc/self/mountinfo, though, lists each bind's source path relative to its filesystem (the
 * workspace's runs/<run-id>/workspace, the logs folder, the session temp; the python helpers are a
 * private copy, so the package's root is not among them), and bwrap cannot hide that: a bind mount's root is what the kernel reports. Knowing those
 * paths gives nothing: none of them is reachable from inside (not mounted, or masked), the run id
 * and the session temp carry random parts, and the host never follows a path the sandbox controls
 * (logs outside the workspace, created O_EXCL|O_NOFOLLOW; overlay mount points checked with lstat
 * and their parents bound from fds opened without following links).
 */
import { accessSync, closeSync, constants, cpSync, lstatSync, mkdirSync, openSync, realpathSync, rmSync, statSync } from "node:fs";
import { spawnSync, type ChildProcess } from "node:child_process";
import { basename, delimiter, join, posix, relative, resolve } from "node:path";
import { silentLogger, type Logger } from "../../lib/logger.js";
import { PathOutsideRootError, isPathInside, resolveInside } from "../../lib/path-validation.js";
import { mkdirInside } from "../../lib/safe-fs.js";
import { sandboxPythonDir } from "../../lib/paths.js";
import {
  ARGS_FD,
  DEFAULT_KILL_GRACE_MS,
  EXTRA_FD_BASE,
  DEFAULT_TIMEOUT_SEC,
  SandboxUnavailableError,
  effectiveTimeoutSec,
  execResultFrom,
  logFooterLines,
  logHeaderLines,
  runHostProcess,
  spawnHostChild,
} from "../exec-common.js";
import {
  type Bind,
  type ReadOnlyMount,
  type ReadOnlyOverlay,
  checkOverlayRel,
  hiddenForbidding,
  maskArgs,
  nestedOverlay,
  nvidiaDevices,
  overlayParents,
  planLocalMounts,
  realpathOrNull,
} from "./mounts.js";
import { SANDBOX_LOG_DIR, prepareLogDir, privateTempDir, releaseLogDir, type HostLogDir } from "../log-dir.js";
import { PRE_EXEC_SCRIPT, PidsLimiter, shellQuote, type PidsMechanism } from "./pids-limit.js";
import { DEFAULT_MAX_OUTPUT_BYTES, OutputCapture } from "../output-capture.js";
import { sandboxHiddenPaths } from "../host-secrets.js";
import type { ExecOptions, ExecResult, Sandbox } from "../types.js";

export type { ReadOnlyMount, ReadOnlyOverlay } from "./mounts.js";

export const LOCAL_WORKSPACE = "/workspace";
export const LOCAL_PYTHON_HELPERS = "/opt/infradev/python";
const SANDBOX_HOME = "/tmp/home"; // created by planLocalMounts (tmpfs) or create() (session folder)
const SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

const INSTALL_HINT =
  "Install bubblewrap: `apt-get install -y bubblewrap` (Debian/Ubuntu) or `dnf install -y bubblewrap` (Fedora/RHEL); " +
  "or choose another backend (--sandbox docker; --sandbox none isolates nothing).";
const NAMESPACE_HINT =
  "bwrap needs user namespaces: on Ubuntu 23.10+ allow them for bwrap (`sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` " +
  "or an AppArmor profile); elsewhere check `sysctl user.max_user_namespaces` > 0 and `kernel.unprivileged_userns_clone=1`; " +
  "inside a Docker container start it with `--security-opt seccomp=unconfined --security-opt apparmor=unconfined` (or --privileged). " +
  "Or choose --sandbox docker.";

/**
 * The sandbox's first process: reports on fd 3 that bwrap's set-up is done (then closes fd 3, and
 * fd 4 that carried bwrap's arguments, so the command inherits neither), enters the working
 * directory, and becomes the command. A run that never reported was a bwrap failure, not the command's.
 */
const WRAPPER =
  '{ printf x >&3; } 2>/dev/null; exec 3>&- 4<&-; cd -- "$0" 2>/dev/null || ' +
  "{ printf 'infradev: cannot cd to %s: no such folder in the sandbox\\n' \"$0\" >&2; exit 1; }; exec \"$@\"";

export interface LocalSandboxOptions {
  /** The workspace on the host; bound read-write at /workspace. */
  hostRepoDir: string;
  /** Python inside the sandbox. Default /usr/bin/python3. */
  python?: string;
  /** Extra read-only binds (the harness, caches). */
  readOnlyMounts?: ReadOnlyMount[];
  /**
   * Host paths that must never be readable inside (a task's hidden/, other sessions' runs). The
   * package's own tasks/ and runs/ folders are always added. One that lies inside a bound folder is
   * masked. Binding something inside one is refused, except inside a hidden folder that also holds
   * the workspace (a runs folder: the session's own base checkout may be bound from it).
   */
  hiddenPaths?: string[];
  /**
   * Host folder for the exec logs, outside the workspace (the server: runs/<run-id>/logs); bound
   * read-only at /infradev/logs. Default: a private temp folder, removed by close().
   */
  logDir?: string;
  /** The stored log keeps the first and the last this many bytes of an exec's output (default 8 MiB each). */
  logHeadBytes?: number;
  logTailBytes?: number;
  /**
   * Host folders bound read-only at /workspace/<rel>, over the workspace (contract C). The mount
   * points are made by the host (each component a real folder, never a link) and checked again
   * before every exec.
   */
  readOnlyOverlays?: ReadOnlyOverlay[];
  /**
   * Processes + threads one exec may hold (a fresh pids cgroup per exec; RLIMIT_NPROC where no
   * cgroup is writable). Default 4096; false: no limit.
   */
  pidsLimit?: number | false;
  /** Environment of every exec, over the base (PATH, LANG, HOME=/tmp/home, TMPDIR=/tmp). */
  env?: Record<string, string>;
  /** The bwrap binary. Default: `bwrap` on PATH. */
  bwrapPath?: string;
  /** Default output cap per exec (bytes). Default 64 KiB. */
  maxOutputBytes?: number;
  /** Timeout of an exec that names none. Default 3600 s. */
  defaultTimeoutSec?: number;
  /** SIGTERM → SIGKILL delay when a tree is killed. Default 2000 ms. */
  killGraceMs?: number;
  /** Pass NVIDIA devices through (and /sys read-only). "auto" (default): when /dev/nvidiactl exists. */
  gpu?: boolean | "auto";
  /**
   * "session" (default): /tmp (and HOME) persist across the execs of this sandbox in a private host
   * folder removed by close(). "exec": a fresh tmpfs per exec.
   */
  tmp?: "session" | "exec";
  /** Prove at creation that no hidden path is readable inside (and no capability is left); throw otherwise. */
  selfCheck?: boolean;
  logger?: Logger;
}

export interface HiddenPathCheck {
  ok: boolean;
  /** Paths readable inside the sandbox that should not be (plus "capabilities: ..." if any remain). */
  leaks: string[];
  /** Every sandbox path that was tried. */
  checked: string[];
}

/** The next exec's first process, already in its pids cgroup, waiting for its command on stdin. */
interface Standby {
  child: ChildProcess;
  pids: ReturnType<PidsLimiter["prepare"]>;
}

interface LocalConfig {
  bwrapPath: string;
  hostRepoDir: string;
  python: string;
  staticArgs: string[];
  /** After the masks (which need the root still writable to create mount points). */
  finalArgs: string[];
  binds: Bind[];
  hidden: string[];
  env: Record<string, string>;
  logDir: HostLogDir;
  logHeadBytes?: number;
  logTailBytes?: number;
  /** A private copy of the package's python/sandbox (so no mount names the package), removed by close(). */
  helpersCopy: string;
  overlays: ReadOnlyOverlay[];
  /** `--ro-bind <host> /workspace/<rel>` for each overlay. */
  overlayArgs: string[];
  /** Folders between the workspace and the overlays' mount points, bound onto themselves (see overlayParents). */
  overlayParents: string[];
  pids: PidsLimiter;
  sessionTmp: string | null;
  maxOutputBytes: number;
  defaultTimeoutSec: number;
  killGraceMs: number;
  logger: Logger;
}

/**
 * Copies the package's python helpers (a few small files) into a fresh private folder with a random
 * name, bound read-only at /opt/infradev/python: the sandbox's mountinfo then shows that folder, not
 * the package's root. Timestamps are kept so the compiled bytecode stays valid.
 */
function privateHelpersCopy(src: string): string {
  const dir = privateTempDir("infradev-helpers-");
  try {
    cpSync(src, dir, { recursive: true, preserveTimestamps: true, filter: (p) => !lstatSync(p).isSymbolicLink() });
    return dir;
  } catch (e) {
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

/** Finds bwrap, or throws SandboxUnavailableError saying how to install it. */
export function findBwrap(explicit?: string): string {
  const candidates = explicit
    ? [explicit]
    : [...(process.env.PATH ?? "").split(delimiter).filter(Boolean).map((d) => join(d, "bwrap")), "/usr/bin/bwrap", "/usr/local/bin/bwrap"];
  for (const c of candidates) {
    try {
      accessSync(c, constants.X_OK);
      if (statSync(c).isFile()) return c;
    } catch {
      // try the next one
    }
  }
  const where = explicit ? `at ${explicit}` : "on PATH";
  throw new SandboxUnavailableError("local", `local sandbox: bubblewrap (bwrap) was not found ${where}. ${INSTALL_HINT}`);
}

function bwrapHardening(bwrapPath: string): string[] {
  const help = spawnSync(bwrapPath, ["--help"], { encoding: "utf8", timeout: 10_000 });
  if (help.error) throw new SandboxUnavailableError("local", `local sandbox: cannot run ${bwrapPath}: ${help.error.message}. ${INSTALL_HINT}`);
  const text = `${help.stdout}${help.stderr}`;
  const args: string[] = [];
  // No nested user namespace: inside one a process would hold capabilities again.
  if (text.includes("--disable-userns")) args.push("--unshare-user", "--disable-userns");
  // As root, bwrap keeps every capability in the sandbox unless told not to — enough to unmount the
  // masks over hidden paths. A setuid bwrap refuses --cap-drop for non-root users but drops them itself.
  const setuid = (statSync(bwrapPath).mode & 0o4000) !== 0;
  if (text.includes("--cap-drop") && (!setuid || process.getuid?.() === 0)) args.push("--cap-drop", "ALL");
  // No bwrap init inside: the command itself is the sandbox's pid 1. bwrap's init would be a process
  // of the sandbox's user, dumpable, holding every --setenv value and every bind's host path in its
  // memory, and the pipes to the host: a test could ptrace it, read /proc/1/environ or pidfd_getfd
  // the launcher's stdout from it. The launcher (pid 1 for runRanks) makes itself non-dumpable first.
  if (text.includes("--as-pid-1")) args.push("--as-pid-1");
  else throw new SandboxUnavailableError("local", `local sandbox: ${bwrapPath} has no --as-pid-1 (bubblewrap >= 0.5 needed): without it the sandbox's pid 1 would hold the host's secrets. ${INSTALL_HINT}`);
  return args;
}

export class LocalSandbox implements Sandbox {
  readonly kind = "local" as const;
  readonly repoDir = LOCAL_WORKSPACE;
  readonly pythonHelpersDir = LOCAL_PYTHON_HELPERS;
  readonly hostRepoDir: string;
  readonly python: string;
  /** Host folder where each exec's log goes (read-only at /infradev/logs inside). */
  readonly logDir: string;
  private readonly running = new Map<AbortController, Promise<unknown>>();
  private closed = false;
  private standby: Standby | null = null;

  private constructor(private readonly cfg: LocalConfig) {
    this.hostRepoDir = cfg.hostRepoDir;
    this.python = cfg.python;
    this.logDir = cfg.logDir.hostDir;
  }

  /** How the process limit is enforced here (cgroup v1 / v2, RLIMIT_NPROC, or off) and its value. */
  get processLimit(): { mechanism: PidsMechanism; limit: number; warning?: string } {
    const p = this.cfg.pids;
    return { mechanism: p.mechanism, limit: p.limit, ...(p.warning ? { warning: p.warning } : {}) };
  }

  /** Builds the sandbox and proves bwrap works here (a harness fault is thrown now, not at first use). */
  /**
   * A sandbox over `hostRepoDir`: the request checked (workspace, GPUs, overlays), the host-side
   * resources made (log folder, pids limiter, session temp, private helpers copy, the mount plan),
   * then one `true` run through bwrap to prove it works here (and the hidden paths, on request).
   */
  static async create(opts: LocalSandboxOptions): Promise<LocalSandbox> {
    const logger = opts.logger ?? silentLogger();
    const bwrapPath = findBwrap(opts.bwrapPath);
    const hardening = bwrapHardening(bwrapPath);
    const req = checkRequest(opts);
    const made = await makeHostResources(opts, req, logger);
    const sandbox = new LocalSandbox({
      bwrapPath,
      hostRepoDir: req.repo,
      python: opts.python ?? "/usr/bin/python3",
      staticArgs: ["--unshare-all", ...hardening, "--die-with-parent", "--new-session", ...made.mounts.args],
      // The sandbox's own root (a tmpfs bwrap made) read-only too, after the masks have made their
      // mount points: nothing outside /workspace, /tmp and /dev/shm takes a write.
      finalArgs: ["--remount-ro", "/"],
      binds: made.mounts.binds,
      hidden: req.hidden,
      env: {
        PATH: SAFE_PATH,
        LANG: "C.UTF-8",
        HOME: SANDBOX_HOME,
        TMPDIR: "/tmp",
        INFRADEV_SANDBOX: "local",
        // The GPUs a campaign engine handed this process (campaign/engines/local.ts holds them per job):
        // forwarded so the tests use those and not every device bound here. Scheduling, not isolation.
        ...(req.devices.length > 0 && process.env.CUDA_VISIBLE_DEVICES !== undefined ? { CUDA_VISIBLE_DEVICES: process.env.CUDA_VISIBLE_DEVICES } : {}),
        ...opts.env,
      },
      logDir: made.logDir,
      logHeadBytes: opts.logHeadBytes,
      logTailBytes: opts.logTailBytes,
      helpersCopy: made.helpersCopy,
      overlays: req.overlays,
      overlayArgs: made.mounts.overlayArgs,
      overlayParents: overlayParents(req.overlays),
      pids: made.pids,
      sessionTmp: made.sessionTmp,
      maxOutputBytes: opts.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES,
      defaultTimeoutSec: opts.defaultTimeoutSec ?? DEFAULT_TIMEOUT_SEC,
      killGraceMs: opts.killGraceMs ?? DEFAULT_KILL_GRACE_MS,
      logger,
    });
    await LocalSandbox.proveItWorks(sandbox, bwrapPath, opts.selfCheck === true);
    logger.debug({ bwrap: bwrapPath, workspace: req.repo, hidden: req.hidden.length, pids: made.pids.mechanism, pidsLimit: made.pids.limit }, "local sandbox ready");
    return sandbox;
  }

  /** One `true` through bwrap: a machine where bwrap cannot build this sandbox says so now, with a hint. */
  private static async proveItWorks(sandbox: LocalSandbox, bwrapPath: string, selfCheck: boolean): Promise<void> {
    const probe = await sandbox.run(["true"], LOCAL_WORKSPACE, { timeoutSec: 30 }, false);
    if (probe.harnessError || probe.exitCode !== 0) {
      await sandbox.close();
      const why = probe.harnessError ?? `probe exited ${probe.exitCode}: ${probe.stderr.trim()}`;
      const hint = /namespace|uid map|not permitted|permission denied/i.test(why)
        ? NAMESPACE_HINT
        : /bwrap: /.test(why)
          ? "Check the sandbox's mounts (hostRepoDir, readOnlyMounts) against the message above."
          : INSTALL_HINT;
      throw new SandboxUnavailableError("local", `local sandbox: bwrap (${bwrapPath}) cannot build a sandbox on this machine: ${why}. ${hint}`);
    }
    if (selfCheck) {
      const check = await sandbox.checkHiddenPaths();
      if (!check.ok) {
        await sandbox.close();
        throw new Error(`local sandbox self-check failed, readable inside: ${check.leaks.join(", ")}`);
      }
    }
  }

  /**
   * The full bwrap command line for `argv` (for benchmarks and debugging; fd 3 is optional). exec()
   * runs the same arguments, but hands them to bwrap on fd 4 (`--args 4`) so that no host path
   * shows in the sandbox's /proc/<pid>/cmdline.
   */
  bwrapCommand(argv: string[], opts: { cwd?: string } = {}): string[] {
    const cwd = posix.resolve(LOCAL_WORKSPACE, opts.cwd ?? ".");
    return [this.cfg.bwrapPath, ...this.bwrapOptions(undefined, this.cfg.env), "--", ...this.sandboxCommand(argv, cwd)];
  }

  /**
   * bwrap's options: every host path of the sandbox is in here (passed on fd 4 by exec()). With
   * `parentFds` (exec), the overlays' parent folders are bound from fds the host opened without
   * following any link; without (bwrapCommand), by path.
   */
  private bwrapOptions(parentFds: number[] | undefined, env: Record<string, string>): string[] {
    const masks = maskArgs(this.cfg.hidden, this.cfg.binds).args;
    const parents = this.cfg.overlayParents.flatMap((rel, i) =>
      parentFds ? ["--bind-fd", String(EXTRA_FD_BASE + i), posix.join(LOCAL_WORKSPACE, rel)] : ["--bind", join(this.hostRepoDir, rel), posix.join(LOCAL_WORKSPACE, rel)],
    );
    const setenv = Object.entries(env).flatMap(([k, v]) => ["--setenv", k, v]);
    return [...this.cfg.staticArgs, ...parents, ...this.cfg.overlayArgs, ...masks, ...this.cfg.finalArgs, "--chdir", "/", "--clearenv", ...setenv];
  }

  /** How the host-side first process of an exec is started (see PRE_EXEC_SCRIPT). */
  private preExecSpawn(pidsArgs: [string, string], extraFds: number[] = []) {
    return {
      // cwd "/" and a bare env: nothing of the server's own (its folder as PWD) reaches bwrap.
      cwd: "/",
      env: { PATH: SAFE_PATH },
      argv: ["/bin/sh", "-c", PRE_EXEC_SCRIPT, "infradev-pre", ...pidsArgs],
      readyFd: true,
      argsFdData: Buffer.alloc(0),
      stdinData: Buffer.alloc(1),
      extraFds,
    };
  }

  /**
   * Takes the standby: the next exec's first process, started ahead of time so that its move into
   * a fresh pids cgroup (cgroup v1 waits for an RCU grace period, ~10-20 ms) is not on the exec's
   * path. Null when there is none alive (the exec then starts its own).
   */
  private takeStandby(): Standby | null {
    const sb = this.standby;
    this.standby = null;
    if (!sb) return null;
    if (sb.child.pid === undefined || sb.child.exitCode !== null || sb.child.signalCode !== null) {
      void sb.pids.group?.remove();
      return null;
    }
    return sb;
  }

  /** Starts a standby for the next exec, when the limit is a cgroup (the only case where it saves time). */
  private refillStandby(): void {
    if (this.closed || this.standby || !this.cfg.pids.mechanism.startsWith("cgroup") || this.cfg.overlayParents.length) return;
    let pids: ReturnType<PidsLimiter["prepare"]>;
    try {
      pids = this.cfg.pids.prepare();
    } catch {
      return; // the next exec will say why
    }
    const child = spawnHostChild(this.preExecSpawn(pids.args));
    child.once("error", () => undefined);
    this.standby = { child, pids };
  }

  /** Gives back the standby: its stdin closed unread (it exits 0), its cgroup removed. */
  private async dropStandby(): Promise<void> {
    const sb = this.standby;
    this.standby = null;
    if (!sb) return;
    if (sb.child.pid !== undefined && sb.child.exitCode === null && sb.child.signalCode === null) {
      const exited = new Promise<void>((r) => sb.child.once("exit", () => r()));
      sb.child.stdin?.end();
      sb.child.stdio[ARGS_FD]?.destroy();
      const timer = setTimeout(() => sb.child.kill("SIGKILL"), 2000);
      await exited;
      clearTimeout(timer);
    }
    for (const s of sb.child.stdio) s?.destroy();
    await sb.pids.group?.remove();
  }

  /**
   * Opens the overlays' parent folders for --bind-fd, each component with O_NOFOLLOW|O_DIRECTORY
   * relative to the one above it (through /proc/self/fd), so a link the sandbox planted is never
   * followed: a host path resolved by bwrap could be swapped for a link to anywhere on the host by
   * a command running at the same time.
   */
  private openOverlayParents(): number[] {
    const flags = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW;
    const opened = new Map<string, number>();
    try {
      for (const rel of this.cfg.overlayParents) {
        const parts = rel.split("/");
        const up = parts.length > 1 ? opened.get(parts.slice(0, -1).join("/")) : undefined;
        const path = up === undefined ? join(this.hostRepoDir, parts[0]!) : `/proc/self/fd/${up}/${parts[parts.length - 1]}`;
        opened.set(rel, openSync(path, flags));
      }
    } catch (e) {
      for (const fd of opened.values()) closeSync(fd);
      throw new Error(`local sandbox: a read-only overlay's folder changed while the exec was set up (${(e as Error).message})`);
    }
    return this.cfg.overlayParents.map((rel) => opened.get(rel)!);
  }

  /** The command bwrap starts: sandbox paths only (it stays on bwrap's command line). */
  private sandboxCommand(argv: string[], cwd: string): string[] {
    return ["/bin/sh", "-c", WRAPPER, cwd, ...argv];
  }

  /**
   * Puts back every overlay's mount point before an exec: a component that an earlier command
   * replaced by a link or a file is removed (never followed) and made a real folder again, so the
   * overlay is mounted at /workspace/<rel> and nowhere else.
   */
  private restoreOverlayMountPoints(): void {
    for (const o of this.cfg.overlays) mkdirInside(this.hostRepoDir, o.rel, { replace: true });
  }

  /** The environment every exec starts from (exec options' env goes over it). */
  get baseEnv(): Record<string, string> {
    return { ...this.cfg.env };
  }

  async exec(argv: string[], opts: ExecOptions = {}): Promise<ExecResult> {
    if (this.closed) throw new Error("local sandbox: exec after close()");
    if (argv.length === 0 || argv[0] === "") throw new Error("local sandbox: exec needs a non-empty argv");
    if (argv.some((a) => a.includes("\0"))) throw new Error("local sandbox: an argv element contains a NUL byte");
    for (const [k, v] of Object.entries(opts.env ?? {})) {
      if (k === "" || k.includes("=") || k.includes("\0") || v.includes("\0")) throw new Error(`local sandbox: env ${JSON.stringify(k)}: a name must be non-empty without "=" or NUL, a value without NUL`);
    }
    if (opts.cwd?.includes("\0")) throw new Error("local sandbox: cwd contains a NUL byte");
    const cwd = posix.resolve(LOCAL_WORKSPACE, opts.cwd ?? ".");
    return this.run(argv, cwd, opts, true);
  }

  private async run(argv: string[], cwd: string, opts: ExecOptions, keepLog: boolean): Promise<ExecResult> {
    const timeoutSec = effectiveTimeoutSec(opts.timeoutSec, this.cfg.defaultTimeoutSec);
    if (this.cfg.overlays.length) this.restoreOverlayMountPoints();
    const capture = new OutputCapture({
      maxOutputBytes: opts.maxOutputBytes ?? this.cfg.maxOutputBytes,
      logDir: keepLog ? this.cfg.logDir.hostDir : undefined,
      logHeadBytes: this.cfg.logHeadBytes,
      logTailBytes: this.cfg.logTailBytes,
      logHeader: logHeaderLines("local", argv, cwd),
      onOutput: opts.onOutput,
    });
    const closer = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, closer.signal]) : closer.signal;
    const parentFds = this.cfg.overlayParents.length ? this.openOverlayParents() : [];
    // The environment goes in bwrap's options (--clearenv, --setenv), so a standby started before
    // this exec's env was known can run it, and nothing of the host process's env reaches inside.
    const options = this.bwrapOptions(parentFds, { ...this.cfg.env, ...opts.env });
    // A standby (already in its own pids cgroup) unless the exec needs fds it cannot have.
    const standby = parentFds.length ? null : this.takeStandby();
    const pids = standby?.pids ?? this.cfg.pids.prepare();
    const pending = runHostProcess({
      // sh joins the exec's pids cgroup (or sets RLIMIT_NPROC), then becomes the command it reads on
      // stdin: bwrap, which reads its options from fd 4, so its command line (pid 1's inside) is
      // `bwrap --args 4 -- /bin/sh -c <wrapper> <cwd> <argv>`: no host path.
      ...this.preExecSpawn(pids.args, parentFds),
      child: standby?.child,
      stdinData: Buffer.from(`${[this.cfg.bwrapPath, "--args", String(ARGS_FD), "--", ...this.sandboxCommand(argv, cwd)].map(shellQuote).join(" ")}\n`),
      argsFdData: Buffer.from(options.map((a) => `${a}\0`).join("")),
      capture,
      timeoutSec,
      signal,
      killGraceMs: this.cfg.killGraceMs,
      supervisorDepth: 2,
      readyFd: true,
      extraFds: parentFds,
    });
    // The child holds its own copies now.
    for (const fd of parentFds) closeSync(fd);
    this.running.set(closer, pending);
    const outcome = await pending.finally(() => this.running.delete(closer));
    // The next exec's standby, started once this result is on its way (a spawn blocks the event loop for a moment).
    if (!this.standby) setTimeout(() => this.refillStandby(), 0);

    let harnessError: string | undefined;
    if (outcome.spawnError) harnessError = `cannot start bwrap (${this.cfg.bwrapPath}): ${outcome.spawnError.message}`;
    else if (!outcome.ready && !outcome.timedOut && !outcome.cancelled) harnessError = "bwrap could not set up the sandbox";
    else if (outcome.survivors.length) harnessError = `processes survived the kill: ${outcome.survivors.join(", ")}`;
    const pidsLimitHit = pids.group?.limitHit() ?? false;
    void pids.group?.remove();
    let warning: string | undefined;
    if (pidsLimitHit) {
      warning = `process limit ${this.cfg.pids.limit} reached (pids.events max > 0): the sandbox refused new processes or threads`;
      capture.write("stderr", `\ninfradev: ${warning}\n`);
    }
    const captured = await capture.finish([...logFooterLines(outcome, harnessError), ...(warning ? [warning] : [])]);
    if (harnessError && !outcome.ready) {
      const said = captured.stderr.split("\n").filter((l) => l.startsWith("bwrap:")).join(" | ");
      harnessError = `${harnessError} (exit ${outcome.exitCode})${said ? `: ${said}` : ""}`;
    }
    if (harnessError || outcome.timedOut) {
      this.cfg.logger.warn({ argv0: argv[0], exitCode: outcome.exitCode, timedOut: outcome.timedOut, harnessError }, "local exec ended abnormally");
    }
    const sandboxLogPath = captured.logPath ? posix.join(SANDBOX_LOG_DIR, basename(captured.logPath)) : undefined;
    const result = execResultFrom(outcome, captured, { isolated: true, sandboxLogPath, harnessError, warning });
    if (pidsLimitHit) result.pidsLimitHit = true;
    return result;
  }

  toHostPath(sandboxPath: string): string {
    if (sandboxPath.includes("\0")) throw new PathOutsideRootError(LOCAL_WORKSPACE, sandboxPath, "it contains a NUL byte");
    const abs = posix.resolve(LOCAL_WORKSPACE, sandboxPath);
    if (!isPathInside(LOCAL_WORKSPACE, abs)) throw new PathOutsideRootError(LOCAL_WORKSPACE, sandboxPath, "it is outside the workspace");
    // Through resolveInside: a symlink the command planted in the workspace cannot lead the host out.
    return resolveInside(this.hostRepoDir, posix.relative(LOCAL_WORKSPACE, abs) || ".");
  }

  /** The sandbox's view of a host path inside the workspace, or null when the sandbox cannot see it. */
  toSandboxPath(hostPath: string): string | null {
    const abs = resolve(hostPath);
    if (!isPathInside(this.hostRepoDir, abs)) return null;
    const rel = relative(this.hostRepoDir, abs);
    return rel === "" ? LOCAL_WORKSPACE : posix.join(LOCAL_WORKSPACE, ...rel.split("/"));
  }

  /**
   * Tries to read every hidden path inside the sandbox — at its host path, its real path and every
   * place a bind would show it — and checks that no capability is left (with one, a mask could be
   * unmounted). A folder leaks when it lists anything, a file when a byte can be read.
   */
  async checkHiddenPaths(): Promise<HiddenPathCheck> {
    const candidates = new Set<string>();
    for (const h of this.cfg.hidden) {
      candidates.add(h);
      const real = realpathOrNull(h);
      if (real) candidates.add(real);
    }
    for (const dest of maskArgs(this.cfg.hidden, this.cfg.binds).masked) candidates.add(dest);
    const script = [
      'for p in "$@"; do',
      '  if [ -d "$p" ]; then [ -n "$(ls -A -- "$p" 2>/dev/null)" ] && echo "LEAK $p";',
      '  elif [ -e "$p" ]; then n=$(head -c 1 -- "$p" 2>/dev/null | wc -c); [ "$n" -gt 0 ] && echo "LEAK $p"; fi',
      "done",
      "grep '^CapEff:' /proc/self/status",
      "true",
    ].join("\n");
    const checked = [...candidates];
    const r = await this.run(["/bin/sh", "-c", script, "check", ...checked], "/", { timeoutSec: 60, maxOutputBytes: 1 << 20 }, false);
    if (r.harnessError || r.exitCode !== 0) return { ok: false, leaks: [`self-check could not run: ${r.harnessError ?? r.stderr.trim()}`], checked };
    const leaks = r.stdout
      .split("\n")
      .filter((l) => l.startsWith("LEAK "))
      .map((l) => l.slice(5));
    const caps = /CapEff:\s*([0-9a-f]+)/.exec(r.stdout)?.[1];
    if (!caps || /[1-9a-f]/.test(caps)) leaks.push(`capabilities: CapEff=${caps ?? "unknown"}`);
    return { ok: leaks.length === 0, leaks, checked };
  }

  /** Kills every running exec's tree, waits for them, and removes the session's /tmp. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    for (const closer of this.running.keys()) closer.abort();
    await Promise.allSettled([...this.running.values(), this.dropStandby()]);
    if (this.cfg.sessionTmp) rmSync(this.cfg.sessionTmp, { recursive: true, force: true });
    rmSync(this.cfg.helpersCopy, { recursive: true, force: true });
    releaseLogDir(this.cfg.logDir);
    await this.cfg.pids.close();
  }
}

/** What a request asks for, checked before anything is made on the host. */
interface CheckedRequest {
  repo: string;
  hidden: string[];
  devices: string[];
  overlays: ReadOnlyOverlay[];
}

function checkRequest(opts: LocalSandboxOptions): CheckedRequest {
  const repo = realpathOrNull(resolve(opts.hostRepoDir));
  if (repo === null || !statSync(repo).isDirectory()) throw new Error(`local sandbox: hostRepoDir ${opts.hostRepoDir} is not an existing folder`);
  const hidden = sandboxHiddenPaths(opts.hiddenPaths);
  const wantGpu = opts.gpu ?? "auto";
  const devices = wantGpu === false ? [] : nvidiaDevices();
  if (wantGpu === true && devices.length === 0) throw new SandboxUnavailableError("local", "local sandbox: gpu: true but no /dev/nvidia* device exists on this host");
  const overlays = opts.readOnlyOverlays ?? [];
  for (const o of overlays) {
    const bad = checkOverlayRel(o.rel);
    if (bad) throw new Error(`local sandbox: read-only overlay ${o.host}: ${bad}`);
  }
  const nested = nestedOverlay(overlays);
  if (nested) throw new Error(`local sandbox: ${nested}`);
  return { repo, hidden, devices, overlays };
}

/** The host side of one sandbox; on any failure, what was already made is removed again. */
async function makeHostResources(opts: LocalSandboxOptions, req: CheckedRequest, logger: Logger) {
  const { repo, hidden, devices, overlays } = req;
  const logDir = prepareLogDir(opts.logDir, repo, "local");
  let pids: PidsLimiter;
  try {
    pids = new PidsLimiter(opts.pidsLimit);
  } catch (e) {
    releaseLogDir(logDir);
    throw e;
  }
  if (pids.warning) logger.warn({ mechanism: pids.mechanism, limit: pids.limit }, pids.warning);
  const sessionTmp = (opts.tmp ?? "session") === "session" ? privateTempDir("infradev-local-", 0o700) : null;
  if (sessionTmp) mkdirSync(join(sessionTmp, "home"), { mode: 0o700 });
  let mounts: { args: string[]; binds: Bind[]; overlayArgs: string[] };
  let helpersCopy: string | null = null;
  try {
    // The overlays' mount points, made by the host one checked component at a time.
    for (const o of overlays) mkdirInside(repo, o.rel);
    const helpers = realpathSync(sandboxPythonDir());
    const inHidden = hiddenForbidding(hidden, helpers, repo);
    if (inHidden) throw new Error(`the python helpers ${helpers} lie inside hidden path ${inHidden}`);
    helpersCopy = privateHelpersCopy(helpers);
    mounts = planLocalMounts({
      workspace: repo,
      helpers: helpersCopy,
      readOnlyMounts: opts.readOnlyMounts ?? [],
      hidden,
      devices,
      sessionTmp,
      logDir: logDir.hostDir,
      overlays,
    });
  } catch (e) {
    if (sessionTmp) rmSync(sessionTmp, { recursive: true, force: true });
    if (helpersCopy) rmSync(helpersCopy, { recursive: true, force: true });
    releaseLogDir(logDir);
    await pids.close();
    throw new Error(`local sandbox: ${(e as Error).message}`);
  }
  return { logDir, pids, sessionTmp, mounts, helpersCopy: helpersCopy! };
}


/** Creates a `local` (bubblewrap) sandbox; throws SandboxUnavailableError when bwrap cannot work here. */
export function createLocalSandbox(opts: LocalSandboxOptions): Promise<LocalSandbox> {
  return LocalSandbox.create(opts);
}
