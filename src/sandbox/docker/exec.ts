/**
 * One command inside a running container through the Engine API (`POST /containers/{id}/exec`,
 * hijacked attach, stdout/stderr demultiplexed), with the local backend's semantics: a timeout or
 * an abort kills the command's whole process tree *inside the container*, not just the exec.
 *
 * How the tree is found: the engine's runtime starts every exec as a session leader, so the command's
 * process group is its tree (unless a descendant calls setsid). A one-line `sh` wrapper reports that
 * pgid on stderr (stripped before anyone sees it) and `exec`s the argv, so the command keeps the pid
 * and no extra process stays around. Every exec also carries a marker variable (INFRADEV_EXEC_ID)
 * that descendants inherit.
 *
 * When the command exits, whatever it left in its group is killed — as the local backend's pid
 * namespace does — so a background child cannot outlive the command or hold its output open (the
 * exec's state is polled, so an exit is seen even while such a child keeps the stream open).
 *
 * On timeout or abort: SIGTERM to the group, a grace period, then SIGKILL to the group and a sweep of
 * /proc for the marker until nothing of the command is left. The group signals go through the
 * container's resident init loop (see INIT_LOOP): a shell builtin, no new process, so they work even
 * when a fork bomb holds every pid and the engine cannot start an exec.
 */
import { constants } from "node:os";
import { Writable } from "node:stream";
import type { Duplex } from "node:stream";
import type Docker from "dockerode";
import { watchDeadline } from "../exec-common.js";
import type { OutputCapture } from "../output-capture.js";

export const EXEC_MARKER_VAR = "INFRADEV_EXEC_ID";
const PGID_RE = /^\x1einfradev-pgid:(\d+)\x1e\n/;
const WRAPPER_SCRIPT =
  'if [ -n "$HOME" ] && [ ! -d "$HOME" ]; then mkdir -p "$HOME" 2>/dev/null; fi; ' +
  'printf "\\036infradev-pgid:%s\\036\\n" "$$" >&2; exec "$@"';
const WRAPPER = ["/bin/sh", "-c", WRAPPER_SCRIPT, "infradev-exec"];

/** Signals the group named by $2 with the shell's builtin `kill` (fallback when there is no init loop). */
const SIGNAL_GROUP = ["/bin/sh", "-c", 'kill -s "$1" -- "-$2" 2>/dev/null; exit 0', "infradev-kill"];

/**
 * Kills every process whose environment carries the marker, until none is left (a process may fork
 * between the scan and the kill; the loop catches its children on the next round).
 */
const SWEEP_SCRIPT = `
m="${EXEC_MARKER_VAR}=$1"; round=0
if printf 'a\\0' | grep -qzx a 2>/dev/null; then fast=1; else fast=0; fi
while [ $round -lt 50 ]; do
  found=""
  if [ $fast = 1 ]; then
    for f in $(grep -lzxF -- "$m" /proc/[0-9]*/environ 2>/dev/null); do
      p=\${f#/proc/}; p=\${p%/environ}; found="$found $p"
    done
  else
    for f in /proc/[0-9]*/environ; do
      if tr '\\0' '\\n' <"$f" 2>/dev/null | grep -qxF -- "$m"; then p=\${f#/proc/}; p=\${p%/environ}; found="$found $p"; fi
    done
  fi
  [ -z "$found" ] && { echo "left=0 rounds=$round"; exit 0; }
  kill -s KILL $found 2>/dev/null
  round=$((round+1))
done
echo "left=$found rounds=$round"; exit 1
`;

export type GroupSignal = "TERM" | "KILL";

export interface ContainerExecRequest {
  argv: string[];
  /** Absolute working directory inside the container. */
  workdir: string;
  env: Record<string, string>;
  timeoutSec: number;
  signal?: AbortSignal;
  killGraceMs: number;
  /** Receives the output (the shared cap + full log + onOutput). */
  capture: OutputCapture;
  execId: string;
  /** Asks the container's init loop to signal a process group; false when it cannot. */
  signalGroup?: (sig: GroupSignal, pgid: number) => boolean;
  /** Tells an out-of-memory kill apart from other deaths (see docker-oom.ts). */
  oom?: { mark(): number; killedDuring(mark: number, exitCode: number | null): Promise<boolean> };
}

export interface ContainerExecOutcome {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  cancelled: boolean;
  durationMs: number;
  oomKilled: boolean;
  harnessError?: string;
}

function collector(onChunk: (chunk: Buffer) => void): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      onChunk(chunk);
      cb();
    },
  });
}

/** Resolves true when the stream ends, false after `ms` (never, without `ms`). */
function waitForEnd(stream: Duplex, ms?: number): Promise<boolean> {
  return new Promise((resolve) => {
    if (stream.readableEnded || stream.destroyed) return resolve(true);
    const timer = ms === undefined ? undefined : setTimeout(() => done(false), ms);
    const onEnd = (): void => done(true);
    function done(v: boolean): void {
      clearTimeout(timer);
      stream.off("end", onEnd);
      stream.off("close", onEnd);
      stream.off("error", onEnd);
      resolve(v);
    }
    stream.on("end", onEnd);
    stream.on("close", onEnd);
    stream.on("error", onEnd);
  });
}

/**
 * The exec's exit code. The attach stream can close a moment before the engine records the exit,
 * so poll briefly until `Running` is false.
 */
async function exitCodeOf(exec: Docker.Exec, maxWaitMs = 5000): Promise<number | null> {
  const start = Date.now();
  for (let delay = 2; ; delay = Math.min(delay * 2, 100)) {
    const info = await exec.inspect();
    if (!info.Running) return typeof info.ExitCode === "number" ? info.ExitCode : null;
    if (Date.now() - start > maxWaitMs) return null;
    await new Promise((r) => setTimeout(r, delay));
  }
}

/**
 * Resolves with the exit code once the exec's process has exited, polling from `firstDelayMs` and
 * backing off to 1 s; `stop()` ends the polling (the promise then never resolves).
 */
function watchExit(exec: Docker.Exec, firstDelayMs: number): { exited: Promise<{ exitCode: number | null }>; stop(): void } {
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  const exited = new Promise<{ exitCode: number | null }>((resolve) => {
    const poll = (delay: number): void => {
      timer = setTimeout(async () => {
        if (stopped) return;
        const info = await exec.inspect().catch(() => undefined);
        if (stopped) return;
        if (info && !info.Running) resolve({ exitCode: typeof info.ExitCode === "number" ? info.ExitCode : null });
        else poll(Math.min(delay * 2, 1000));
      }, delay);
    };
    poll(firstDelayMs);
  });
  return {
    exited,
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}

/** A plain exec with captured output and no wrapper; for the harness's own short commands. */
export async function execSimple(
  container: Docker.Container,
  docker: Docker,
  argv: string[],
  timeoutMs = 30_000,
): Promise<{ exitCode: number | null; stdout: string; stderr: string }> {
  const exec = await container.exec({ Cmd: argv, AttachStdout: true, AttachStderr: true, AttachStdin: false, Tty: false });
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  docker.modem.demuxStream(stream, collector((c) => out.push(c)), collector((c) => err.push(c)));
  if (!(await waitForEnd(stream, timeoutMs))) stream.destroy();
  const exitCode = await exitCodeOf(exec);
  return { exitCode, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") };
}

/** Strips the wrapper's pgid line from the head of stderr, passing everything else through. */
class PgidReader {
  pgid: number | undefined;
  private pending: Buffer | null = Buffer.alloc(0);
  constructor(private readonly forward: (chunk: Buffer) => void) {}
  write(chunk: Buffer): void {
    if (this.pending === null) return this.forward(chunk);
    this.pending = Buffer.concat([this.pending, chunk]);
    if (this.pending.indexOf(0x0a) < 0 && this.pending.length < 64) return;
    const all = this.pending;
    this.pending = null;
    const m = PGID_RE.exec(all.toString("latin1"));
    if (!m) return this.forward(all); // not our line (the wrapper could not run): pass it through
    this.pgid = Number(m[1]);
    if (all.length > m[0].length) this.forward(all.subarray(m[0].length));
  }
  flush(): void {
    if (this.pending && this.pending.length) this.forward(this.pending);
    this.pending = null;
  }
}

function signalName(exitCode: number | null): string | null {
  if (exitCode === null || exitCode <= 128) return null;
  const n = exitCode - 128;
  const name = Object.entries(constants.signals).find(([, v]) => v === n)?.[0];
  return name ?? null;
}

/** Sends `sig` to the group (init loop, else an exec); then, for KILL, sweeps the marker. */
async function signalTree(
  container: Docker.Container,
  docker: Docker,
  req: ContainerExecRequest,
  pgid: number | undefined,
  sig: GroupSignal,
): Promise<void> {
  if (pgid === undefined || pgid <= 1) return;
  if (req.signalGroup?.(sig, pgid)) return;
  await execSimple(container, docker, [...SIGNAL_GROUP, sig, String(pgid)], 10_000).catch(() => undefined);
}

/** SIGKILL to the group and a marker sweep, repeated until nothing is left; returns survivors ("" when none). */
async function killTreeHard(container: Docker.Container, docker: Docker, req: ContainerExecRequest, pgid: number | undefined): Promise<string> {
  let left = "unknown";
  for (let attempt = 0; attempt < 10; attempt++) {
    await signalTree(container, docker, req, pgid, "KILL");
    const sweep = await execSimple(container, docker, ["/bin/sh", "-c", SWEEP_SCRIPT, "infradev-sweep", req.execId], 30_000).catch(
      (err: Error) => ({ exitCode: null, stdout: `left=unknown (${err.message})`, stderr: "" }),
    );
    left = /left=(.*) rounds=/.exec(sweep.stdout)?.[1]?.trim() ?? "unknown";
    if (sweep.exitCode === 0 && left === "0") return "";
    // The engine could not start the sweep (no free pid yet) or it ran out of rounds: try again.
    await new Promise((r) => setTimeout(r, 200 * (attempt + 1)));
  }
  return left;
}

/** Runs one command in the container; never throws for the command's own failures. */
export async function execInContainer(container: Docker.Container, docker: Docker, req: ContainerExecRequest): Promise<ContainerExecOutcome> {
  const started = Date.now();
  const oomMark = req.oom?.mark() ?? 0;
  const none = { exitCode: null, signal: null, timedOut: false, oomKilled: false };
  if (req.signal?.aborted) return { ...none, cancelled: true, durationMs: 0 };

  let exec: Docker.Exec;
  let stream: Duplex;
  try {
    exec = await container.exec({
      Cmd: [...WRAPPER, ...req.argv],
      Env: [...Object.entries(req.env).map(([k, v]) => `${k}=${v}`), `${EXEC_MARKER_VAR}=${req.execId}`],
      WorkingDir: req.workdir,
      AttachStdin: false,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    });
    stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  } catch (err) {
    return {
      ...none,
      cancelled: false,
      durationMs: Date.now() - started,
      harnessError: `docker sandbox: the engine refused the exec: ${(err as Error).message}`,
    };
  }

  const pgidReader = new PgidReader((c) => req.capture.write("stderr", c));
  docker.modem.demuxStream(stream, collector((c) => req.capture.write("stdout", c)), collector((c) => pgidReader.write(c)));

  let killing: Promise<string> | null = null;
  let onFire: () => void = () => undefined;
  const fired = new Promise<"fired">((resolve) => (onFire = () => resolve("fired")));
  const deadline = watchDeadline({
    timeoutSec: req.timeoutSec,
    signal: req.signal,
    onFire: () => {
      killing = (async () => {
        await signalTree(container, docker, req, pgidReader.pgid, "TERM");
        await waitForEnd(stream, req.killGraceMs);
        return killTreeHard(container, docker, req, pgidReader.pgid);
      })();
      onFire();
    },
  });

  // Three ways on: the output closes (then the exit follows at once, or later for a command that
  // closed its output early), the process exits while a leftover child still holds the output open,
  // or the deadline fires.
  let survivors = "";
  let exitCode: number | null | undefined;
  let leftoverHoldsOutput = false;
  const slow = watchExit(exec, 100);
  try {
    const first = await Promise.race([waitForEnd(stream).then(() => "ended" as const), fired, slow.exited]);
    slow.stop();
    if (first === "ended") {
      const fast = watchExit(exec, 2);
      const second = await Promise.race([fast.exited, fired]);
      fast.stop();
      if (second !== "fired") exitCode = second.exitCode;
    } else if (first !== "fired") {
      exitCode = first.exitCode;
      leftoverHoldsOutput = true;
    }
  } finally {
    slow.stop();
    deadline.dispose();
  }

  const pgid = pgidReader.pgid;
  if (killing) {
    survivors = await killing;
    // The tree is dead; whatever still holds the pipe cannot outlive a few seconds.
    if (!(await waitForEnd(stream, 5000))) stream.destroy();
  } else if (pgid !== undefined && pgid > 1) {
    // The command is done: what it left in its group goes too. While a member lives the id cannot be
    // handed to another process; with none left it could only be reused after the container's pid
    // numbers wrapped around, in the moment between the exit and this signal.
    if (!req.signalGroup?.("KILL", pgid) && leftoverHoldsOutput) await signalTree(container, docker, req, pgid, "KILL");
    if (leftoverHoldsOutput && !(await waitForEnd(stream, 5000))) stream.destroy();
  }
  pgidReader.flush();

  let harnessError: string | undefined;
  if (exitCode === undefined) {
    try {
      exitCode = await exitCodeOf(exec);
    } catch (err) {
      exitCode = null;
      harnessError = `docker sandbox: could not read the exit status: ${(err as Error).message}`;
    }
  }
  if (survivors) harnessError = `processes survived the kill inside the container: ${survivors}`;
  const killedByUs = deadline.timedOut || deadline.cancelled;
  const oomKilled = !killedByUs && exitCode !== 0 && req.oom ? await req.oom.killedDuring(oomMark, exitCode).catch(() => false) : false;

  return {
    exitCode: killedByUs ? null : exitCode,
    signal: killedByUs ? (signalName(exitCode) ?? "SIGKILL") : oomKilled ? "SIGKILL" : null,
    timedOut: deadline.timedOut,
    cancelled: deadline.cancelled,
    durationMs: Date.now() - started,
    oomKilled,
    ...(harnessError ? { harnessError } : {}),
  };
}
