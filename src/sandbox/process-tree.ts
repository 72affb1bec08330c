/**
 * Host process trees, read from /proc (Linux). Used to stop a command with everything it started:
 * a process group alone misses children that called setsid(), and the pid of a child that has
 * already been reparented cannot be found from its old parent, so we snapshot the tree before
 * killing and keep the union of every snapshot.
 */
import { readFileSync, readdirSync } from "node:fs";

export interface ProcStat {
  pid: number;
  ppid: number;
  pgid: number;
  /** One-letter state: R, S, D, Z (zombie), ... */
  state: string;
}

/** Parses /proc/<pid>/stat; the command name is in parentheses and may itself contain ") ". */
export function readProcStat(pid: number): ProcStat | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  const close = text.lastIndexOf(")");
  const fields = text.slice(close + 2).split(" ");
  return { pid, state: fields[0] ?? "?", ppid: Number(fields[1]), pgid: Number(fields[2]) };
}

function allProcesses(): ProcStat[] {
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return [];
  }
  const out: ProcStat[] = [];
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue;
    const st = readProcStat(Number(name));
    if (st) out.push(st);
  }
  return out;
}

/** Every live descendant of the root(s) with its depth (children: 1), not the roots themselves. */
export function listDescendants(rootPids: number | number[]): Array<{ pid: number; depth: number }> {
  const children = new Map<number, number[]>();
  for (const p of allProcesses()) {
    if (p.state === "Z") continue;
    const list = children.get(p.ppid);
    if (list) list.push(p.pid);
    else children.set(p.ppid, [p.pid]);
  }
  const out: Array<{ pid: number; depth: number }> = [];
  const roots = Array.isArray(rootPids) ? rootPids : [rootPids];
  const queue: Array<{ pid: number; depth: number }> = roots.map((pid) => ({ pid, depth: 0 }));
  const seen = new Set<number>(roots);
  while (queue.length) {
    const { pid, depth } = queue.shift()!;
    for (const child of children.get(pid) ?? []) {
      if (seen.has(child)) continue;
      seen.add(child);
      out.push({ pid: child, depth: depth + 1 });
      queue.push({ pid: child, depth: depth + 1 });
    }
  }
  return out;
}

/** True while `pid` exists and is not a zombie (a zombie holds no resources and runs nothing). */
export function isAlive(pid: number): boolean {
  const st = readProcStat(pid);
  return st !== null && st.state !== "Z";
}

/** Sends a signal, ignoring processes that are already gone. Negative pid: a process group. */
export function sendSignal(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // ESRCH (gone) or EPERM (pid reused by someone else's process): nothing to do either way.
  }
}

/** Polls until none of `pids` is alive; false if some still are after `timeoutMs`. */
export async function waitUntilGone(pids: Iterable<number>, timeoutMs: number): Promise<boolean> {
  const left = new Set(pids);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const pid of left) if (!isAlive(pid)) left.delete(pid);
    if (left.size === 0) return true;
    if (Date.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, 20));
  }
}

export interface TreeKillPlan {
  rootPid: number;
  /**
   * Depth below which processes are supervisors that must not get SIGTERM: 0 for a plain command
   * (everything gets SIGTERM); 2 under bwrap, whose outer process would answer SIGTERM by SIGKILLing
   * the sandbox at once and whose inner one is the pid namespace's init (immune to SIGTERM).
   */
  supervisorDepth: number;
  /** The root leads its own process group (spawned detached), so the group is signalled too. */
  processGroup: boolean;
  graceMs: number;
  /** Resolves when the root has exited. */
  rootExited: Promise<void>;
}

/**
 * SIGTERM to the tree (below the supervisors), then after `graceMs` — or as soon as the root has
 * exited — SIGKILL to everything ever seen in it, then waits until all of it is gone.
 * Returns the pids still alive afterwards (empty on success).
 */
export async function killTree(plan: TreeKillPlan): Promise<number[]> {
  const seen = new Set<number>();
  const first = listDescendants(plan.rootPid);
  for (const d of first) seen.add(d.pid);
  for (const d of first) if (d.depth >= plan.supervisorDepth) sendSignal(d.pid, "SIGTERM");
  if (plan.supervisorDepth === 0) {
    sendSignal(plan.rootPid, "SIGTERM");
    if (plan.processGroup) sendSignal(-plan.rootPid, "SIGTERM");
  }

  let graceTimer: NodeJS.Timeout | undefined;
  const graceOver = new Promise<void>((r) => (graceTimer = setTimeout(r, plan.graceMs)));
  await Promise.race([plan.rootExited, graceOver]);
  clearTimeout(graceTimer);

  // The root may have exited on SIGTERM while a child that ignores it lives on, and processes keep
  // forking until they are killed: rescan from everything seen until a round finds nothing new.
  for (let round = 0; round < 10; round++) {
    const before = seen.size;
    for (const d of listDescendants([plan.rootPid, ...[...seen].filter(isAlive)])) seen.add(d.pid);
    sendSignal(plan.rootPid, "SIGKILL");
    if (plan.processGroup) sendSignal(-plan.rootPid, "SIGKILL");
    for (const pid of seen) sendSignal(pid, "SIGKILL");
    if (round > 0 && seen.size === before) break;
    await new Promise((r) => setTimeout(r, 10));
  }
  await Promise.race([plan.rootExited, new Promise((r) => setTimeout(r, 2000))]);
  await waitUntilGone(seen, 2000);
  return [...seen].filter(isAlive);
}
