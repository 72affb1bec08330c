/**
 * One command inside a running container through the Engine API (`POST /containers/{id}/exec`,
 * hijacked attach, stdout/stderr demultiplexed), with the local backend's semantics: a timeout or
 * an abort kills the command's whole process tree *inside the container*, not just the exec.
 *
 * How the tree is found: a small `sh` wrapper runs the argv under `setsid`, so the command leads a
 * fresh process group (and keeps its pid: the inner shell `exec`s it). The inner shell reports that
 * pgid on stderr (stripped before anyone sees it) and in a file under the container's /tmp. When the
 * command exits, the outer shell (its own stderr sent to /dev/null, so its job notices such as
 * "Killed" never mix into the command's output) kills whatever is left in its group — as the local backend's pid
 * namespace does — so a background child cannot outlive the command or hold its output open. Every
 * exec also carries a marker variable (INFRADEV_EXEC_ID) that descendants inherit. On timeout or
 * abort the group is killed first (one builtin, no fork: it works even when a fork bomb has used up
 * the pids limit), then /proc is swept for the marker until nothing of the command is left.
 */
import { randomUUID } from "node:crypto";
import { Writable } from "node:stream";
import type { Duplex } from "node:stream";
import type Docker from "dockerode";
import type { ExecOptions, ExecResult } from "./types.js";

export const EXEC_MARKER_VAR = "INFRADEV_EXEC_ID";
const PGID_RE = /^\x1einfradev-pgid:(\d+)\x1e\n/;
const REPORT_PGID = 'printf "\\036infradev-pgid:%s\\036\\n" "$$" >&2';
const WRAPPER_SCRIPT = `
if command -v setsid >/dev/null 2>&1; then
  f="/tmp/.infradev-exec.$${EXEC_MARKER_VAR}"
  exec 3>&2 2>/dev/null
  setsid /bin/sh -c 'exec 2>&3 3>&-; echo $$ >"$0" 2>/dev/null; ${REPORT_PGID}; exec "$@"' "$f" "$@"
  rc=$?
  if read g <"$f" 2>/dev/null; then kill -s KILL -- "-$g" 2>/dev/null; rm -f "$f"; fi
  exit $rc
fi
${REPORT_PGID}; exec "$@"
`;
const WRAPPER = ["/bin/sh", "-c", WRAPPER_SCRIPT, "infradev-exec"];

/** Kills the group named by $1 with the shell's builtin `kill`: no fork, so no free pid needed. */
const KILL_GROUP = ["/bin/sh", "-c", 'kill -s KILL -- "-$1" "$1" 2>/dev/null; exit 0', "infradev-kill"];

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
echo "left=unknown rounds=$round"; exit 1
`;

/** Where captured output goes (the shared cap: head + tail kept, full log on the host). */
export interface OutputSink {
  write(stream: "stdout" | "stderr", chunk: Buffer): void;
  finish(): Promise<{ stdout: string; stderr: string; truncated: boolean; logPath?: string }>;
}

export interface ContainerExecRequest extends ExecOptions {
  argv: string[];
  /** Absolute working directory inside the container. */
  workdir: string;
  sink: OutputSink;
  /** Asks the container's init loop to SIGKILL a process group; false when it cannot. */
  killGroup?: (pgid: number) => boolean;
  /** Tells an out-of-memory kill apart from other deaths (see docker-oom.ts). */
  oom?: { mark(): number; killedDuring(mark: number, exitCode: number | null): Promise<boolean> };
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
  const ended = await waitForEnd(stream, timeoutMs);
  if (!ended) stream.destroy();
  const exitCode = await exitCodeOf(exec);
  return { exitCode, stdout: Buffer.concat(out).toString("utf8"), stderr: Buffer.concat(err).toString("utf8") };
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
 * Kills the process tree of one exec: its group, then anything still carrying its marker.
 * `killGroup` asks the container's resident init loop to do the group kill (no new process needed:
 * the only way in when a fork bomb holds every pid); without it, a `docker exec` does it.
 */
export async function killExecTree(
  container: Docker.Container,
  docker: Docker,
  execId: string,
  pgid: number | undefined,
  killGroup?: (pgid: number) => boolean,
): Promise<{ left: string }> {
  const groupKill = async (): Promise<void> => {
    if (pgid === undefined || pgid <= 1) return;
    if (killGroup?.(pgid)) return;
    await execSimple(container, docker, [...KILL_GROUP, String(pgid)], 10_000).catch(() => undefined);
  };
  let left = "unknown";
  for (let attempt = 0; attempt < 10; attempt++) {
    await groupKill();
    const sweep = await execSimple(container, docker, ["/bin/sh", "-c", SWEEP_SCRIPT, "infradev-sweep", execId], 30_000).catch(
      (err: Error) => ({ exitCode: null, stdout: `left=unknown (${err.message})`, stderr: "" }),
    );
    left = /left=(\S+)/.exec(sweep.stdout)?.[1] ?? "unknown";
    if (sweep.exitCode === 0 && left === "0") break;
    // The engine could not start the sweep (no free pid yet) or it ran out of rounds: try again.
    await new Promise((r) => setTimeout(r, 200 * (attempt + 1)));
  }
  return { left };
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

function envArray(env: Record<string, string> | undefined, execId: string): string[] {
  const out = Object.entries(env ?? {}).map(([k, v]) => `${k}=${v}`);
  out.push(`${EXEC_MARKER_VAR}=${execId}`);
  return out;
}

/** Runs one command in the container; never throws for the command's own failures. */
export async function execInContainer(
  container: Docker.Container,
  docker: Docker,
  req: ContainerExecRequest,
): Promise<Omit<ExecResult, "isolated">> {
  const started = Date.now();
  const execId = randomUUID();
  const { sink } = req;
  const oomMark = req.oom?.mark() ?? 0;
  const base = { durationMs: 0, stdout: "", stderr: "", truncated: false };

  if (req.signal?.aborted) {
    return { ...base, exitCode: null, signal: null, timedOut: false, cancelled: true };
  }

  let exec: Docker.Exec;
  let stream: Duplex;
  try {
    exec = await container.exec({
      Cmd: [...WRAPPER, ...req.argv],
      Env: envArray(req.env, execId),
      WorkingDir: req.workdir,
      AttachStdin: false,
      AttachStdout: true,
      AttachStderr: true,
      Tty: false,
    });
    stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  } catch (err) {
    const final = await sink.finish();
    return {
      ...final,
      exitCode: null,
      signal: null,
      timedOut: false,
      cancelled: false,
      durationMs: Date.now() - started,
      harnessError: `docker sandbox: the engine refused the exec: ${(err as Error).message}`,
    };
  }

  const decoders = { stdout: new TextDecoder("utf-8"), stderr: new TextDecoder("utf-8") };
  const emit = (which: "stdout" | "stderr", chunk: Buffer): void => {
    sink.write(which, chunk);
    if (req.onOutput) {
      const text = decoders[which].decode(chunk, { stream: true });
      if (text) req.onOutput(text, which);
    }
  };
  const pgidReader = new PgidReader((c) => emit("stderr", c));
  docker.modem.demuxStream(stream, collector((c) => emit("stdout", c)), collector((c) => pgidReader.write(c)));

  // Either the stream ends by itself, or the timeout / abort fires and we kill the tree.
  let reason: "timeout" | "abort" | null = null;
  let killing: Promise<unknown> | null = null;
  let onKill: () => void = () => undefined;
  const killRequested = new Promise<"kill">((resolve) => (onKill = () => resolve("kill")));
  const kill = (why: "timeout" | "abort"): void => {
    if (reason !== null) return;
    reason = why;
    killing = killExecTree(container, docker, execId, pgidReader.pgid, req.killGroup);
    onKill();
  };
  const timer = req.timeoutSec !== undefined && req.timeoutSec > 0 ? setTimeout(() => kill("timeout"), req.timeoutSec * 1000) : undefined;
  const onAbort = (): void => kill("abort");
  req.signal?.addEventListener("abort", onAbort, { once: true });

  try {
    const first = await Promise.race([waitForEnd(stream), killRequested]);
    if (first === "kill") {
      await killing;
      // The tree is dead; whatever still holds the pipe cannot outlive a few seconds.
      if (!(await waitForEnd(stream, 5000))) stream.destroy();
    }
  } finally {
    clearTimeout(timer);
    req.signal?.removeEventListener("abort", onAbort);
  }
  if (killing) await killing;
  pgidReader.flush();

  let exitCode: number | null = null;
  let harnessError: string | undefined;
  try {
    exitCode = await exitCodeOf(exec);
  } catch (err) {
    harnessError = `docker sandbox: could not read the exit status: ${(err as Error).message}`;
  }
  const finalReason = reason as "timeout" | "abort" | null;
  let oomKilled = false;
  if (finalReason === null && exitCode !== 0 && req.oom) oomKilled = await req.oom.killedDuring(oomMark, exitCode).catch(() => false);

  const flushText = (which: "stdout" | "stderr"): void => {
    const tail = decoders[which].decode();
    if (tail && req.onOutput) req.onOutput(tail, which);
  };
  flushText("stdout");
  flushText("stderr");
  const final = await sink.finish();

  const result: Omit<ExecResult, "isolated"> = {
    ...final,
    exitCode: finalReason ? null : exitCode,
    signal: finalReason || oomKilled ? "SIGKILL" : null,
    timedOut: finalReason === "timeout",
    cancelled: finalReason === "abort",
    durationMs: Date.now() - started,
  };
  if (oomKilled) result.oomKilled = true;
  if (harnessError) result.harnessError = harnessError;
  return result;
}
