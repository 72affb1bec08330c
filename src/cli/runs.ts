/**
 * `infradev runs prune`: the workspace and base checkout every `serve` leaves in runs/<run-id>/.
 * A dry run unless --yes. What counts (decided here, documented in the README):
 *
 *   finished  trace.jsonl's last event is `session_end` (the server shut down cleanly)
 *   stale     no session_end, and nothing written to the run (trace, session.json, patch) for
 *             --older-than seconds (default 24 h): a server killed or long gone
 *
 * With --older-than, finished runs must be that old too. A pruned run keeps its record —
 * session.json, trace.jsonl, patch.diff, logs/ (small; patch.diff is what `grade` needs) — and loses
 * workspace/ and base/ (it can no longer be resumed); --whole removes the run folder itself.
 */
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, fstatSync, lstatSync, openSync, readdirSync, readSync, rmSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { InvalidArgumentError, type Command } from "commander";
import { UsageError } from "../lib/errors.js";

/** An unfinished run is stale after this long without activity (unless --older-than says otherwise). */
export const STALE_AFTER_SEC = 24 * 3600;

export interface RunVerdict {
  run_id: string;
  dir: string;
  state: "finished" | "stale" | "active";
  /** Seconds since the run last wrote its trace, session file or patch. */
  idle_sec: number;
  /** What a prune removes (or removed): paths relative to the run folder; empty = nothing left to remove. */
  remove: string[];
  bytes: number;
}

export interface PruneRunsResult {
  runs_dir: string;
  dry_run: boolean;
  whole: boolean;
  pruned: RunVerdict[];
  kept: RunVerdict[];
}

/** The last `bytes` of a file, read through one descriptor of a regular file (never a link). */
function tail(file: string, bytes = 65536): string {
  let fd: number;
  try {
    if (!lstatSync(file).isFile()) return "";
    fd = openSync(file, "r");
  } catch {
    return "";
  }
  try {
    const size = fstatSync(fd).size;
    const len = Math.min(size, bytes);
    const buf = Buffer.alloc(len);
    readSync(fd, buf, 0, len, size - len);
    return buf.toString("utf8");
  } finally {
    closeSync(fd);
  }
}

function lastEvent(traceFile: string): string | null {
  const lines = tail(traceFile).trim().split("\n");
  try {
    return (JSON.parse(lines[lines.length - 1] ?? "") as { event?: string }).event ?? null;
  } catch {
    return null;
  }
}

function mtimeMs(p: string): number {
  try {
    return lstatSync(p).mtimeMs;
  } catch {
    return 0;
  }
}

/** Bytes under a folder (lstat: links count as themselves); unreadable parts count 0. */
function diskBytes(p: string): number {
  let st;
  try {
    st = lstatSync(p);
  } catch {
    return 0;
  }
  if (!st.isDirectory()) return st.size;
  let n = 0;
  let names: string[] = [];
  try {
    names = readdirSync(p);
  } catch {
    return 0;
  }
  for (const name of names) n += diskBytes(join(p, name));
  return n;
}

/** Every run folder of `runsDir` (a real folder holding session.json) and what a prune does to it. */
export function planRunsPrune(runsDir: string, opts: { olderThanSec?: number; whole?: boolean; now?: number } = {}): { prune: RunVerdict[]; keep: RunVerdict[] } {
  const now = opts.now ?? Date.now();
  const prune: RunVerdict[] = [];
  const keep: RunVerdict[] = [];
  for (const name of readdirSync(runsDir).sort()) {
    const dir = join(runsDir, name);
    if (!lstatSync(dir).isDirectory() || !existsSync(join(dir, "session.json"))) continue;
    const finished = lastEvent(join(dir, "trace.jsonl")) === "session_end";
    const idle = (now - Math.max(...["trace.jsonl", "session.json", "patch.diff"].map((f) => mtimeMs(join(dir, f))))) / 1000;
    const minAge = opts.olderThanSec ?? (finished ? 0 : STALE_AFTER_SEC);
    const state = finished ? "finished" : idle >= (opts.olderThanSec ?? STALE_AFTER_SEC) ? "stale" : "active";
    const remove = opts.whole ? ["."] : ["workspace", "base"].filter((p) => existsSync(join(dir, p)) || isLink(join(dir, p)));
    const v: RunVerdict = { run_id: name, dir, state, idle_sec: Math.round(idle), remove, bytes: remove.reduce((a, p) => a + diskBytes(join(dir, p)), 0) };
    (state !== "active" && idle >= minAge && remove.length ? prune : keep).push(v);
  }
  return { prune, keep };
}

function isLink(p: string): boolean {
  try {
    return lstatSync(p).isSymbolicLink();
  } catch {
    return false;
  }
}

/**
 * Removes a path the agent owned, never following a link in it: rmSync first; what it cannot remove
 * (folders without permissions, trees deeper than PATH_MAX) goes with chmod -R / rm -rf, which walk
 * with openat and do not follow links (GNU coreutils).
 */
function removeAgentTree(p: string): void {
  try {
    rmSync(p, { recursive: true, force: true });
  } catch {
    if (!isLink(p)) spawnSync("chmod", ["-R", "u+rwX", "--", p], { stdio: "ignore" });
    spawnSync("rm", ["-rf", "--", p], { stdio: "ignore" });
  }
  if (existsSync(p) || isLink(p)) throw new Error(`runs prune: could not remove ${p}`);
}

export function pruneRuns(runsDir: string, opts: { olderThanSec?: number; whole?: boolean; yes?: boolean } = {}): PruneRunsResult {
  const dir = resolve(runsDir);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new UsageError(`runs prune: ${dir} is not a folder (--runs-dir, default $INFRADEV_RUNS_DIR or ./runs)`);
  const plan = planRunsPrune(dir, opts);
  if (opts.yes) for (const v of plan.prune) for (const p of v.remove) removeAgentTree(p === "." ? v.dir : join(v.dir, p));
  return { runs_dir: dir, dry_run: !opts.yes, whole: !!opts.whole, pruned: plan.prune, kept: plan.keep };
}

function mib(bytes: number): string {
  return `${(bytes / 2 ** 20).toFixed(1)} MiB`;
}

export function formatRunsPrune(r: PruneRunsResult): string {
  const verb = r.dry_run ? "would remove" : "removed";
  const lines = r.pruned.map((v) => `${verb} ${v.remove.includes(".") ? v.dir : v.remove.map((p) => join(v.run_id, p)).join(", ")}  (${v.state}, idle ${Math.round(v.idle_sec / 60)} min, ${mib(v.bytes)})`);
  const total = r.pruned.reduce((a, v) => a + v.bytes, 0);
  lines.push(`${r.pruned.length} run(s) ${verb === "removed" ? "pruned" : "to prune"} (${mib(total)}), ${r.kept.length} kept (active, too young, or already pruned) in ${r.runs_dir}`);
  if (r.dry_run && r.pruned.length) lines.push("dry run: nothing was removed; run again with --yes to remove it");
  return lines.join("\n");
}

function seconds(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n)) throw new InvalidArgumentError("expected a whole number of seconds ≥ 0");
  return n;
}

export function registerRunsCommands(program: Command): void {
  const runs = program.command("runs").description("manage serve's run folders (runs/<run-id>/)");
  runs
    .command("prune")
    .description(
      "remove the workspace and base checkout of finished runs (the server ended them) and stale ones (no activity for 24 h); keeps session.json, trace.jsonl, patch.diff and logs/; a dry run unless --yes",
    )
    .option("--runs-dir <dir>", "the runs folder (default $INFRADEV_RUNS_DIR, else ./runs, as serve)", process.env.INFRADEV_RUNS_DIR ?? "runs")
    .option("--older-than <sec>", "only runs idle at least this long; an unfinished run counts as stale after this long instead of 24 h", seconds)
    .option("--whole", "remove the whole run folder (its record and patch.diff too)")
    .option("--yes", "really remove (without it: print what would be removed)")
    .option("--json", "print { runs_dir, dry_run, whole, pruned: [...], kept: [...] } as JSON on stdout")
    .action((opts: { runsDir: string; olderThan?: number; whole?: boolean; yes?: boolean; json?: boolean }) => {
      const r = pruneRuns(opts.runsDir, { olderThanSec: opts.olderThan, whole: opts.whole, yes: opts.yes });
      process.stdout.write(opts.json ? `${JSON.stringify(r, null, 2)}\n` : `${formatRunsPrune(r)}\n`);
    });
}
