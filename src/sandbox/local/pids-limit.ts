/**
 * A process limit for the `local` backend: each exec's bwrap tree runs in a fresh child cgroup whose
 * `pids.max` caps the processes and threads it may hold (a fork bomb stops there), removed after the
 * exec. cgroup v1's `pids` hierarchy or cgroup v2's `pids.max`, whichever this host lets us write.
 * Where neither is writable, RLIMIT_NPROC (`ulimit -u`) is the fallback: weaker (it counts every
 * process of the user, and root is exempt from it), and said so in the warning.
 *
 * The tree joins its cgroup before anything of it runs: bwrap is started through a one-line `sh`
 * that writes its own pid to the cgroup's `cgroup.procs` (or sets the rlimit) and then `exec`s bwrap,
 * so every process bwrap forks is born inside.
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const DEFAULT_PIDS_LIMIT = 4096;

export type PidsMechanism = "cgroup-v1" | "cgroup-v2" | "rlimit" | "off";

/**
 * The host-side first process of an exec (`sh -c PRE_EXEC_SCRIPT infradev-pre <cgroup.procs|""> <nproc|"">`):
 * joins the cgroup named by $1 (if any), sets RLIMIT_NPROC to $2 (if any), then reads the command to
 * become from stdin — single-quoted words, as shellQuote writes them — and execs it with stdin
 * /dev/null. Reading the command last lets a process join its cgroup ahead of time (a standby, see
 * LocalSandbox): on cgroup v1 the move waits for an RCU grace period, ~10-20 ms after an idle spell.
 * An empty stdin (a standby given back) exits 0 without running anything.
 */
export const PRE_EXEC_SCRIPT =
  'if [ -n "$1" ]; then echo $$ > "$1" || { echo "infradev: cannot join the process-limit cgroup $1" >&2; exit 125; }; fi; ' +
  'if [ -n "$2" ]; then ulimit -u "$2" || { echo "infradev: cannot set RLIMIT_NPROC" >&2; exit 125; }; fi; ' +
  'go=; while IFS= read -r l; do go="$go$l\n"; done; [ -n "$go" ] || exit 0; exec </dev/null; eval "exec $go"';

/** One word for PRE_EXEC_SCRIPT's stdin: single-quoted, a `'` as `'\''` (sound for any text without NUL). */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", "'\\''")}'`;
}

export interface ExecPidsGroup {
  /** The cgroup's `cgroup.procs` (what the pre-exec step writes its pid to). */
  procsFile: string;
  /** True when a fork was refused because the limit was reached (pids.events `max` > 0). */
  limitHit(): boolean;
  /** Removes the cgroup once its processes are gone (retries briefly while they are being reaped). */
  remove(): Promise<void>;
}

interface CgroupBase {
  version: 1 | 2;
  /** The folder under which this sandbox's per-exec cgroups go (made by us, removed at close). */
  dir: string;
}

function parseMountinfo(): Array<{ root: string; mountPoint: string; fstype: string; superOptions: string[] }> {
  let text: string;
  try {
    text = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return [];
  }
  const out = [];
  for (const line of text.split("\n")) {
    const dash = line.indexOf(" - ");
    if (dash < 0) continue;
    const pre = line.slice(0, dash).split(" ");
    const post = line.slice(dash + 3).split(" ");
    const unescape = (s: string) => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
    out.push({ root: unescape(pre[3] ?? ""), mountPoint: unescape(pre[4] ?? ""), fstype: post[0] ?? "", superOptions: (post[2] ?? "").split(",") });
  }
  return out;
}

function ownCgroups(): { v1pids?: string; v2?: string } {
  let text: string;
  try {
    text = readFileSync("/proc/self/cgroup", "utf8");
  } catch {
    return {};
  }
  const out: { v1pids?: string; v2?: string } = {};
  for (const line of text.split("\n")) {
    const m = /^(\d+):([^:]*):(.*)$/.exec(line);
    if (!m) continue;
    if (m[1] === "0" && m[2] === "") out.v2 = m[3]!;
    else if (m[2]!.split(",").includes("pids")) out.v1pids = m[3]!;
  }
  return out;
}

function under(mount: { root: string; mountPoint: string }, cgPath: string): string | null {
  const root = mount.root === "/" ? "" : mount.root;
  if (root && cgPath !== root && !cgPath.startsWith(`${root}/`)) return null;
  return join(mount.mountPoint, cgPath.slice(root.length));
}

/** Removes the (empty) folders a server that died left here: `infradev-<pid>-*` of a pid no longer alive. */
function pruneStale(parent: string): void {
  let names: string[];
  try {
    names = readdirSync(parent);
  } catch {
    return;
  }
  for (const name of names) {
    const m = /^infradev-(\d+)-[0-9a-f]+$/.exec(name);
    if (!m || Number(m[1]) === process.pid) continue;
    try {
      process.kill(Number(m[1]), 0);
      continue; // its owner lives
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === "EPERM") continue;
    }
    const dir = join(parent, name);
    try {
      for (const child of readdirSync(dir, { withFileTypes: true })) if (child.isDirectory()) rmdirSync(join(dir, child.name));
      rmdirSync(dir);
    } catch {
      // still in use or not ours to remove: leave it
    }
  }
}

/** Makes `dir` and checks that a limit can be set in it; returns false (and removes it) otherwise. */
function tryBase(dir: string, version: 1 | 2): boolean {
  try {
    mkdirSync(dir);
  } catch {
    return false;
  }
  try {
    if (version === 2) {
      // Per-exec children need the pids controller delegated to them.
      const controllers = readFileSync(join(dir, "cgroup.controllers"), "utf8").split(/\s+/);
      if (!controllers.includes("pids")) throw new Error("no pids controller");
      writeFileSync(join(dir, "cgroup.subtree_control"), "+pids");
    }
    const probe = join(dir, "probe");
    mkdirSync(probe);
    try {
      writeFileSync(join(probe, "pids.max"), "16");
      readFileSync(join(probe, "pids.events"), "utf8");
    } finally {
      rmdirSync(probe);
    }
    return true;
  } catch {
    try {
      rmdirSync(dir);
    } catch {
      // leave it; it is empty and named as ours
    }
    return false;
  }
}

/** Finds a writable pids cgroup for this process's children, or null. */
function findCgroupBase(): CgroupBase | null {
  const own = ownCgroups();
  const mounts = parseMountinfo();
  const name = `infradev-${process.pid}-${randomBytes(4).toString("hex")}`;
  if (own.v1pids !== undefined) {
    for (const m of mounts.filter((x) => x.fstype === "cgroup" && x.superOptions.includes("pids"))) {
      const at = under(m, own.v1pids);
      if (at) pruneStale(at);
      if (at && tryBase(join(at, name), 1)) return { version: 1, dir: join(at, name) };
    }
  }
  if (own.v2 !== undefined) {
    for (const m of mounts.filter((x) => x.fstype === "cgroup2")) {
      const at = under(m, own.v2);
      if (at) pruneStale(at);
      if (at && tryBase(join(at, name), 2)) return { version: 2, dir: join(at, name) };
    }
  }
  return null;
}

function maxEvents(file: string): number {
  try {
    const m = /^max (\d+)/m.exec(readFileSync(file, "utf8"));
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

async function rmdirRetry(dir: string, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  for (let delay = 2; ; delay = Math.min(delay * 2, 50)) {
    try {
      rmdirSync(dir);
      return true;
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return true;
      if (code !== "EBUSY" || Date.now() > deadline) return false;
    }
    await new Promise((r) => setTimeout(r, delay));
  }
}

/** One sandbox's process limit: how it is enforced here, and a fresh group per exec. */
export class PidsLimiter {
  readonly mechanism: PidsMechanism;
  readonly limit: number;
  /** Set when the limit is weaker than asked (RLIMIT_NPROC) or absent. */
  readonly warning?: string;
  private readonly base: CgroupBase | null;
  private seq = 0;
  private readonly removing = new Set<Promise<unknown>>();

  constructor(limit: number | false | undefined) {
    if (limit === false) {
      this.mechanism = "off";
      this.limit = 0;
      this.base = null;
      return;
    }
    const n = limit ?? DEFAULT_PIDS_LIMIT;
    if (!Number.isSafeInteger(n) || n < 1) throw new Error(`local sandbox: pidsLimit must be a whole number >= 1 (got ${limit})`);
    this.limit = n;
    this.base = findCgroupBase();
    if (this.base) {
      this.mechanism = this.base.version === 1 ? "cgroup-v1" : "cgroup-v2";
    } else {
      this.mechanism = "rlimit";
      const root = process.getuid?.() === 0;
      this.warning =
        `process limit: no writable pids cgroup on this host (cgroup v1 pids or v2 pids.max); falling back to RLIMIT_NPROC=${n}, ` +
        "which counts every process of the user and does not bind root" +
        (root ? ": this server runs as root, so NO process limit applies in practice" : "");
    }
  }

  /** The pre-exec arguments ($1 = cgroup.procs or "", $2 = nproc or "") and the exec's group, if any. */
  prepare(): { args: [string, string]; group: ExecPidsGroup | null } {
    if (this.mechanism === "off") return { args: ["", ""], group: null };
    if (!this.base) return { args: ["", String(this.limit)], group: null };
    const dir = join(this.base.dir, `e${++this.seq}-${randomBytes(3).toString("hex")}`);
    try {
      mkdirSync(dir);
      writeFileSync(join(dir, "pids.max"), String(this.limit));
    } catch (e) {
      try {
        rmdirSync(dir);
      } catch {
        // nothing to clean
      }
      throw new Error(`local sandbox: cannot create the exec's pids cgroup ${dir}: ${(e as Error).message}`);
    }
    const events = join(dir, "pids.events");
    const group: ExecPidsGroup = {
      procsFile: join(dir, "cgroup.procs"),
      limitHit: () => maxEvents(events) > 0,
      remove: () => {
        // Off the exec's path: removing a cgroup can take a few ms (it is empty; nothing waits for it but close()).
        const p = new Promise((r) => setTimeout(r, 0)).then(() => rmdirRetry(dir, 5000));
        this.removing.add(p);
        void p.finally(() => this.removing.delete(p));
        return p.then(() => undefined);
      },
    };
    return { args: [group.procsFile, ""], group };
  }

  /** Waits for pending removals and removes the sandbox's own cgroup folder. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.removing]);
    if (this.base) await rmdirRetry(this.base.dir, 2000);
  }
}
