/**
 * One harness invocation as a process group of its own: its JSON event lines are appended to
 * harness-events.jsonl and folded into the tally as they come, its stderr to harness-stderr.log.
 * At the deadline (or on abort) the whole group — the harness, the MCP server it started, the
 * sandboxed commands under that — gets SIGTERM, then SIGKILL; after a normal exit whatever the
 * harness left behind in its group is ended the same way, so no process of the run outlives it.
 */
import { spawn } from "node:child_process";
import { appendFileSync } from "node:fs";
import { createInterface } from "node:readline";
import type { EventTally, PreparedHarness } from "./types.js";

export interface AttemptResult {
  pid: number | null;
  exitCode: number | null;
  signal: string | null;
  /** Ended by the time limit. */
  timedOut: boolean;
  /** Ended by abort (the run itself was told to stop). */
  aborted: boolean;
  spawnError: string | null;
  /** The last stderr lines (for the run's error message). */
  stderrTail: string;
  started_at: string;
  ended_at: string;
}

/** How long a group gets between SIGTERM and SIGKILL. */
const KILL_GRACE_MS = 3_000;
/** After a normal exit: how long the harness's leftovers (its MCP server saving state) get before they are ended. */
const LEFTOVER_GRACE_MS = 1_500;

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
}

function signalGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch {
    // ESRCH: nothing left in the group.
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Ends every process of group `pgid`: SIGTERM, a grace period, SIGKILL; resolves when none is left (or after the kill). */
export async function endGroup(pgid: number, graceMs = KILL_GRACE_MS): Promise<void> {
  if (!groupAlive(pgid)) return;
  signalGroup(pgid, "SIGTERM");
  for (let waited = 0; waited < graceMs && groupAlive(pgid); waited += 50) await sleep(50);
  signalGroup(pgid, "SIGKILL");
  for (let waited = 0; waited < 2_000 && groupAlive(pgid); waited += 50) await sleep(50);
}

export async function runAttempt(
  harness: PreparedHarness,
  argv: string[],
  opts: { deadline: number; eventsFile: string; stderrFile: string; tally: EventTally; signal?: AbortSignal; onStop?: () => Promise<void> },
): Promise<AttemptResult> {
  const started_at = new Date().toISOString();
  // Both files exist after any attempt, even when the harness wrote nothing to one of them (OpenCode
  // writes no stderr at all): "no file" would read as "not captured".
  appendFileSync(opts.eventsFile, "");
  appendFileSync(opts.stderrFile, "");
  const child = spawn(argv[0]!, argv.slice(1), { cwd: harness.cwd, env: harness.env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  const pid = child.pid ?? null;
  let stderrTail = "";
  let timedOut = false;
  let aborted = false;
  const exited = new Promise<{ code: number | null; signal: string | null; error: string | null }>((res) => {
    child.once("error", (e) => res({ code: null, signal: null, error: e.message }));
    child.once("close", (code, signal) => res({ code, signal, error: null }));
  });
  const lines = createInterface({ input: child.stdout! });
  lines.on("line", (line) => {
    appendFileSync(opts.eventsFile, `${line}\n`);
    try {
      const e = JSON.parse(line) as unknown;
      if (e && typeof e === "object" && !Array.isArray(e)) harness.fold(opts.tally, e as Record<string, unknown>);
    } catch {
      // Not JSON (a harness banner): kept in the file, not counted.
    }
  });
  child.stderr!.on("data", (c: Buffer) => {
    appendFileSync(opts.stderrFile, c);
    stderrTail = (stderrTail + c.toString("utf8")).slice(-2000);
  });
  const stop = async (why: "limit" | "abort") => {
    if (pid === null) return;
    if (why === "limit") timedOut = true;
    else aborted = true;
    // Docker mode: the harness runs in a container; its local process is only the `docker exec` client.
    await opts.onStop?.().catch(() => undefined);
    await endGroup(pid);
  };
  const timer = setTimeout(() => void stop("limit"), Math.max(0, opts.deadline - Date.now()));
  const onAbort = () => void stop("abort");
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  const r = await exited;
  clearTimeout(timer);
  opts.signal?.removeEventListener("abort", onAbort);
  if (pid !== null && groupAlive(pid)) {
    for (let waited = 0; waited < LEFTOVER_GRACE_MS && groupAlive(pid); waited += 50) await sleep(50);
    await endGroup(pid);
  }
  return { pid, exitCode: r.code, signal: r.signal, timedOut, aborted, spawnError: r.error, stderrTail, started_at, ended_at: new Date().toISOString() };
}
