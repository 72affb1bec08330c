/**
 * Git for the author's tools: every call an argv array through execa (never a shell string), on a
 * repository the author names (a clone or a bare mirror). Nothing here writes into that repository:
 * trees are read out with a private index file, bundles are cut in a scratch repository.
 */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { UsageError } from "../lib/errors.js";

/** Identity and settings for the commits and repositories the author's tools make (never the user's). */
const GIT_CONFIG = ["-c", "user.name=infradev", "-c", "user.email=infradev@localhost", "-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", "-c", "core.quotePath=false"];

export interface GitRunOptions {
  input?: string | Buffer;
  env?: Record<string, string>;
  /** Return stdout as a Buffer (blobs). */
  binary?: boolean;
}

/** `git --git-dir <repo> <args>`: stdout, or an error naming the command and git's own message. */
export async function gitIn(gitDir: string, args: string[], opts: GitRunOptions = {}): Promise<string> {
  const r = await execa("git", [...GIT_CONFIG, "--git-dir", gitDir, ...args], {
    reject: false,
    stripFinalNewline: false,
    maxBuffer: 1024 * 1024 * 1024,
    ...(opts.input !== undefined ? { input: opts.input } : {}),
    env: { GIT_TERMINAL_PROMPT: "0", ...opts.env },
  });
  if (r.exitCode !== 0) throw new Error(`git ${args.slice(0, 3).join(" ")}… (in ${gitDir}) failed: ${String(r.stderr).trim().split("\n").slice(-2).join(" ") || r.shortMessage}`);
  return String(r.stdout);
}

/** The git folder of a repository the author names: a work tree's `.git` (or its gitdir file), or a bare repository itself. */
export async function resolveGitDir(repo: string): Promise<string> {
  const r = await execa("git", ["-C", repo, "rev-parse", "--absolute-git-dir"], { reject: false });
  if (r.exitCode !== 0) throw new UsageError(`--repo ${repo}: not a git repository (${String(r.stderr).trim().split("\n")[0]})`);
  return String(r.stdout).trim();
}

/** The full sha of a revision, or a usage error naming the option it came from. */
export async function resolveCommit(gitDir: string, rev: string, label: string): Promise<string> {
  try {
    return (await gitIn(gitDir, ["rev-parse", "--verify", "--quiet", `${rev}^{commit}`])).trim();
  } catch {
    throw new UsageError(`${label}: "${rev}" is not a commit of ${gitDir}`);
  }
}

/**
 * Writes the tree of `commit` (or only `paths` of it) into `dest`, through a private index file: the
 * repository's own index and work tree are left alone (a bare repository has neither).
 */
export async function checkoutTree(gitDir: string, commit: string, dest: string, paths: string[] = []): Promise<void> {
  mkdirSync(dest, { recursive: true });
  const scratch = mkdtempSync(join(tmpdir(), "infradev-index-"));
  try {
    const env = { GIT_INDEX_FILE: join(scratch, "index"), GIT_WORK_TREE: dest };
    await gitIn(gitDir, ["read-tree", commit], { env });
    if (paths.length) await gitIn(gitDir, ["checkout-index", "-f", "-z", "--stdin"], { env, input: paths.map((p) => `${p}\0`).join("") });
    else await gitIn(gitDir, ["checkout-index", "-a", "-f"], { env });
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** Paths of `commit`'s tree under `dirs` (all of them when empty). */
export async function listTree(gitDir: string, commit: string, dirs: string[] = []): Promise<string[]> {
  const out = await gitIn(gitDir, ["ls-tree", "-r", "-z", "--name-only", commit, "--", ...dirs]);
  return out.split("\0").filter(Boolean);
}

export interface ChangedPath {
  path: string;
  status: "A" | "M" | "D" | "T";
  added: number;
  deleted: number;
  binary: boolean;
}

/** What `to` changes against `from`, file by file (no rename detection: a move is a delete and an add). */
export async function changedPaths(gitDir: string, from: string, to: string): Promise<ChangedPath[]> {
  const status = await gitIn(gitDir, ["diff", "--no-renames", "--name-status", "-z", from, to]);
  const parts = status.split("\0").filter(Boolean);
  const kinds = new Map<string, ChangedPath["status"]>();
  for (let i = 0; i + 1 < parts.length; i += 2) kinds.set(parts[i + 1]!, parts[i]!.charAt(0) as ChangedPath["status"]);
  const numstat = await gitIn(gitDir, ["diff", "--no-renames", "--numstat", "-z", from, to]);
  const out: ChangedPath[] = [];
  for (const rec of numstat.split("\0").filter(Boolean)) {
    const [a, d, ...rest] = rec.split("\t");
    const path = rest.join("\t");
    const binary = a === "-";
    out.push({ path, status: kinds.get(path) ?? "M", added: binary ? 0 : Number(a), deleted: binary ? 0 : Number(d), binary });
  }
  return out;
}

/** A scratch folder for one command, removed by the returned function. */
export function scratchDir(prefix: string, under?: string): { dir: string; remove: () => void } {
  const root = under ?? tmpdir();
  mkdirSync(root, { recursive: true });
  const dir = mkdtempSync(join(root, prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
