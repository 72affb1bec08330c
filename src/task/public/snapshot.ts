import { createHash, randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync, appendFileSync } from "node:fs";
import { join } from "node:path";
import { simpleGit } from "simple-git";
import { gitCacheDir } from "../../lib/paths.js";
import type { PublicTask } from "./loader.js";
import type { GitSource } from "./schema.js";

/** Identity for the commits infradev makes in workspaces (never the user's global config). */
const GIT_ENV_CONFIG = ["user.name=infradev", "user.email=infradev@localhost", "commit.gpgsign=false", "init.defaultBranch=main"];

export function git(dir: string) {
  return simpleGit({ baseDir: dir, config: GIT_ENV_CONFIG });
}

/** Paths every workspace ignores: our own logs and results, Python caches. */
const EXCLUDES = [".infradev/", "__pycache__/", "*.pyc", ".pytest_cache/"];

export interface Snapshot {
  dir: string;
  /** The commit holding the pre-PR base. */
  baseCommit: string;
}

/**
 * Materialises the task's pre-PR snapshot in `dest` as a git repo with the base committed, so that
 * `git diff <base>` is the agent's (or a submission's) patch. `dest` must not exist or be empty.
 */
export async function createSnapshot(task: PublicTask, dest: string, opts: { onProgress?: (msg: string) => void } = {}): Promise<Snapshot> {
  if (existsSync(dest) && readdirSync(dest).length > 0) throw new Error(`workspace ${dest} already exists and is not empty`);
  mkdirSync(dest, { recursive: true });
  if (task.source.kind === "dir") {
    // Follow no symlink out of the snapshot: copy links as links (dereference: false).
    cpSync(task.source.dir, dest, { recursive: true, dereference: false, verbatimSymlinks: true });
    const g = git(dest);
    await g.init();
    appendFileSync(join(dest, ".git", "info", "exclude"), `${EXCLUDES.join("\n")}\n`);
    await g.add(["-A"]);
    await g.commit(`base: ${task.id} (pre-PR snapshot)`, undefined, { "--allow-empty": null, "--no-verify": null });
  } else {
    await gitSnapshot(task.source, dest, opts.onProgress);
  }
  const baseCommit = (await git(dest).revparse(["HEAD"])).trim();
  writeFileSync(join(dest, ".git", "infradev-base"), `${baseCommit}\n`);
  return { dir: dest, baseCommit };
}

/**
 * A bare mirror of `url` in the cache that holds `base`: cloned once (into a temporary folder, then
 * renamed, so two sessions starting together cannot see half a clone), fetched again only when the
 * base commit is missing. Real sources (Megatron-LM, vLLM) are large; each session then copies only
 * what base needs, locally.
 */
/** The cache's bare mirror of `url` (it may not exist yet). */
export function mirrorDirFor(url: string): string {
  return join(gitCacheDir(), createHash("sha256").update(url).digest("hex").slice(0, 24) + ".git");
}

async function mirrorWith(url: string, base: string, say: (msg: string) => void): Promise<string> {
  const root = gitCacheDir();
  mkdirSync(root, { recursive: true });
  const dir = mirrorDirFor(url);
  const has = async () => (await simpleGit({ baseDir: dir }).raw(["cat-file", "-t", `${base}^{commit}`]).catch(() => "")).trim() === "commit";
  if (!existsSync(dir)) {
    const tmp = `${dir}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
    say(`cloning ${url} into ${root} (first use of this repository; a large one takes minutes)`);
    try {
      await simpleGit({ config: GIT_ENV_CONFIG }).clone(url, tmp, ["--mirror"]);
      // Sessions fetch base from the mirror by commit id (see gitSnapshot); the mirror is ours alone.
      // Set once here, on the private clone: a `git config` per session would also race on its lock.
      await simpleGit({ baseDir: tmp }).raw(["config", "uploadpack.allowAnySHA1InWant", "true"]);
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      throw new Error(`git source ${url}: clone failed: ${e instanceof Error ? e.message.trim() : String(e)}`);
    }
    try {
      renameSync(tmp, dir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another session's clone won the race
    }
  }
  if (!(await has())) {
    say(`fetching ${url}: base ${base} is not in the cached mirror yet`);
    try {
      await simpleGit({ baseDir: dir, config: GIT_ENV_CONFIG }).fetch(["--prune", "origin", "+refs/*:refs/*"]);
    } catch (e) {
      // Another session fetching into the same mirror holds its ref locks: what matters is base.
      if (!(await has())) throw new Error(`git source ${url}: fetch failed: ${e instanceof Error ? e.message.trim() : String(e)}`);
    }
    if (!(await has())) throw new Error(`git source ${url}: base commit ${base} is not in the repository`);
  }
  return dir;
}

/**
 * A workspace for a git source holds the base commit and its history, and nothing after it: no
 * remote, no branch or tag of the upstream repository, no object only later commits reach. A plain
 * clone would carry the merged PR (the golden patch) in its history, where `git log --all` finds it.
 */
async function gitSnapshot(source: GitSource, dest: string, onProgress?: (msg: string) => void): Promise<void> {
  const mirror = await mirrorWith(source.url, source.base, onProgress ?? (() => undefined));
  const g = git(dest);
  await g.init();
  // A mirror seeded from a bundle is shallow (its history is cut at some commit, base itself for a
  // task's bundle): the workspace shares the boundary, else git would look for parents it never got.
  const shallow = join(mirror, "shallow");
  if (existsSync(shallow)) writeFileSync(join(dest, ".git", "shallow"), readFileSync(shallow, "utf8"));
  // Only base and its ancestors come over: a local fetch by commit id from our mirror.
  await g.raw(["fetch", "--no-tags", mirror, source.base]);
  await g.raw(["checkout", "--detach", source.base]);
  // What the fetch left that names anything but base.
  await g.raw(["update-ref", "-d", "FETCH_HEAD"]).catch(() => undefined);
  rmSync(join(dest, ".git", "FETCH_HEAD"), { force: true });
  appendFileSync(join(dest, ".git", "info", "exclude"), `${EXCLUDES.join("\n")}\n`);
}

/** The base commit recorded when the snapshot was made. */
export async function baseCommitOf(dir: string): Promise<string> {
  const f = join(dir, ".git", "infradev-base");
  if (existsSync(f)) return readFileSync(f, "utf8").trim();
  return (await git(dir).revparse(["HEAD"])).trim();
}

/** The working tree's change against base, untracked files included (binary-safe, full index). */
export async function diffAgainstBase(dir: string): Promise<string> {
  const g = git(dir);
  const base = await baseCommitOf(dir);
  // intent-to-add makes new files appear in `git diff` without staging their content.
  await g.raw(["add", "-A", "-N", "."]);
  return g.raw(["diff", "--binary", "--full-index", base, "--", "."]);
}

export interface BundleImport {
  /** The mirror the bundle went into. */
  mirror: string;
  /** Whether the mirror was created by this import (else the bundle was fetched into it). */
  created: boolean;
  /** The refs the bundle brought, `<sha> <ref>` each. */
  refs: string[];
  shallow: string | null;
}

const SHA = /^[0-9a-f]{40}$/;

/**
 * Seeds the git cache's mirror of `url` from a bundle file, so that a git-sourced task can be built
 * and graded where `url` cannot be reached (CI, a cluster without internet). `shallow`: the commit
 * the bundle's history is cut at (a bundle made with `git bundle create --shallow-since` or from a
 * shallow clone cannot be fetched without it); it becomes the mirror's shallow boundary. The bundle's
 * refs go in as they are (refs/tags/*, refs/heads/*). A new mirror is built in a temporary folder and
 * renamed into place, as a clone is.
 */
export async function importBundle(bundle: string, url: string, opts: { shallow?: string | string[] } = {}): Promise<BundleImport> {
  return importBundleSync(bundle, url, opts);
}

/**
 * importBundle, synchronously (plain git): the grader's task loader seeds the cache from a task's own
 * bundle with it (task/hidden/golden.ts), and that loader is synchronous.
 */
export function importBundleSync(bundle: string, url: string, opts: { shallow?: string | string[] } = {}): BundleImport {
  if (!existsSync(bundle)) throw new Error(`bundle ${bundle}: no such file`);
  // A bundle of a two-parent merge cut at depth 1 has two boundaries: base and merge.
  const boundaries = opts.shallow === undefined ? [] : Array.isArray(opts.shallow) ? opts.shallow : [opts.shallow];
  for (const b of boundaries) if (!SHA.test(b)) throw new Error(`--shallow: expected a full 40-hex commit sha, got "${b}"`);
  const root = gitCacheDir();
  mkdirSync(root, { recursive: true });
  const dir = mirrorDirFor(url);
  const created = !existsSync(dir);
  const target = created ? `${dir}.tmp-${process.pid}-${randomBytes(4).toString("hex")}` : dir;
  const run = (args: string[]) => execFileSync("git", [...GIT_ENV_CONFIG.flatMap((c) => ["-c", c]), ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 64 * 1024 * 1024 });
  try {
    if (created) {
      run(["init", "--bare", "--quiet", target]);
      run(["-C", target, "config", "uploadpack.allowAnySHA1InWant", "true"]);
      // What `clone --mirror` would have set: the URL stays the origin, for a later online fetch.
      run(["-C", target, "remote", "add", "--mirror=fetch", "origin", url]);
    }
    if (boundaries.length) {
      const f = join(target, "shallow");
      const have = existsSync(f) ? readFileSync(f, "utf8").split("\n").filter(Boolean) : [];
      const add = boundaries.filter((b) => !have.includes(b));
      if (add.length) writeFileSync(f, `${[...have, ...add].join("\n")}\n`);
    }
    const heads = run(["-C", target, "bundle", "list-heads", bundle]).split("\n").filter(Boolean);
    run(["-C", target, "fetch", "--quiet", "--no-write-fetch-head", bundle, "+refs/*:refs/*"]);
    if (created) {
      try {
        renameSync(target, dir);
      } catch (e) {
        // Another process seeded the same mirror meanwhile: theirs stands, this copy goes.
        if (!existsSync(dir)) throw e;
        rmSync(target, { recursive: true, force: true });
      }
    }
    return { mirror: dir, created, refs: heads, shallow: boundaries.length ? boundaries.join(" ") : null };
  } catch (e) {
    if (created) rmSync(target, { recursive: true, force: true });
    const err = e as Error & { stderr?: string };
    const msg = `${err.stderr || err.message || String(e)}`.trim();
    const hint = /shallow|did not send all necessary objects|missing|bad object/i.test(msg) && !boundaries.length ? " (a bundle cut below its first commit needs --shallow <that commit>)" : "";
    throw new Error(`bundle ${bundle}: import into ${dir} failed: ${msg.split("\n")[0]}${hint}`);
  }
}

/** Runs git in a cache mirror, synchronously (the task loader is synchronous). */
/** A git command run synchronously (plain git, not simple-git: the cache's bare mirrors). */
export function gitSync(dir: string, args: string[], input?: string): string {
  return execFileSync("git", ["-C", dir, ...args], { encoding: "utf8", maxBuffer: 256 * 1024 * 1024, stdio: ["pipe", "pipe", "pipe"], ...(input !== undefined ? { input } : {}) });
}

/** Whether the cache's mirror of `url` holds `sha` as a commit. */
export function mirrorHasCommit(url: string, sha: string): boolean {
  const dir = mirrorDirFor(url);
  if (!existsSync(dir)) return false;
  try {
    return gitSync(dir, ["cat-file", "-t", `${sha}^{commit}`]).trim() === "commit";
  } catch {
    return false;
  }
}

/** Files of `sha`'s tree under `paths` in the cache's mirror of `url` (repo-relative). */
export function mirrorListFiles(url: string, sha: string, paths: string[]): string[] {
  const out = gitSync(mirrorDirFor(url), ["ls-tree", "-r", "-z", "--name-only", sha, "--", ...paths]);
  return out.split("\0").filter(Boolean);
}
