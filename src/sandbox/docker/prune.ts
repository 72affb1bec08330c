/**
 * `infradev sandbox prune`: removes containers left behind by sessions whose process is gone
 * (a crashed or killed server never reached `close()`).
 *
 * Ownership is the label pair (host, pid), plus the pid's start time where /proc has it, so a pid
 * reused by an unrelated process does not keep a dead session's container alive. Containers made by
 * another host are left alone unless `all` is set: their pid means nothing here.
 */
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import type Docker from "dockerode";
import { connectEngine, ensureEngineReachable } from "./engine.js";
import { LABEL } from "./spec.js";

export interface PruneOptions {
  /** Remove every infradev container, live owner or not. */
  all?: boolean;
  /** Only containers created at least this long ago. */
  olderThanSec?: number;
  docker?: Docker;
}

export interface PrunedContainer {
  id: string;
  name: string;
  session: string;
  kind: string;
  reason: "owner gone" | "all requested";
}

/** The kernel's start time of a process (field 22 of /proc/<pid>/stat), or undefined off Linux. */
export function processStartTime(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // comm (field 2) may hold spaces and parens: split after its closing paren
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return fields[19];
  } catch {
    return undefined;
  }
}

function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether the process that created a container (per its labels) still runs on this host. */
export function ownerAlive(labels: Record<string, string>, thisHost = hostname()): boolean | "unknown" {
  if (labels[LABEL.host] !== thisHost) return "unknown";
  const pid = Number(labels[LABEL.pid]);
  if (!Number.isInteger(pid) || pid <= 0) return false;
  if (!pidAlive(pid)) return false;
  const recorded = labels[LABEL.pidStart];
  if (recorded === undefined) return true;
  const now = processStartTime(pid);
  return now === undefined || now === recorded;
}

export interface PruneResult {
  removed: PrunedContainer[];
  /** infradev containers left in place (live owner, another host's, or too young). */
  kept: number;
}

/** Removes infradev containers whose owning process is gone (or all of them with `all`). */
export async function pruneSandboxes(opts: PruneOptions = {}): Promise<PruneResult> {
  const docker = opts.docker ?? connectEngine();
  await ensureEngineReachable(docker);
  const list = await docker.listContainers({ all: true, filters: { label: [`${LABEL.managed}=true`] } });
  const nowSec = Date.now() / 1000;
  const removed: PrunedContainer[] = [];
  let kept = 0;
  for (const c of list) {
    const labels = c.Labels ?? {};
    const created = Number(labels[LABEL.createdAt] ?? c.Created);
    if (opts.olderThanSec !== undefined && nowSec - created < opts.olderThanSec) {
      kept++;
      continue;
    }
    let reason: PrunedContainer["reason"] | null = null;
    if (opts.all) reason = "all requested";
    else if (ownerAlive(labels) === false) reason = "owner gone";
    if (!reason) {
      kept++;
      continue;
    }
    try {
      await docker.getContainer(c.Id).remove({ force: true, v: true });
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) throw err;
    }
    removed.push({
      id: c.Id,
      name: (c.Names?.[0] ?? "").replace(/^\//, ""),
      session: labels[LABEL.session] ?? "",
      kind: labels[LABEL.kind] ?? "",
      reason,
    });
  }
  return { removed, kept };
}
