import { cpSync, existsSync, mkdirSync, readdirSync, writeFileSync, appendFileSync } from "node:fs";
import { join } from "node:path";
import { simpleGit } from "simple-git";
import type { PublicTask } from "./loader.js";

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
export async function createSnapshot(task: PublicTask, dest: string): Promise<Snapshot> {
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
    await simpleGit({ config: GIT_ENV_CONFIG }).clone(task.source.url, dest, ["--no-checkout"]);
    const g = git(dest);
    await g.checkout(["--detach", task.source.base]);
    appendFileSync(join(dest, ".git", "info", "exclude"), `${EXCLUDES.join("\n")}\n`);
  }
  const baseCommit = (await git(dest).revparse(["HEAD"])).trim();
  writeFileSync(join(dest, ".git", "infradev-base"), `${baseCommit}\n`);
  return { dir: dest, baseCommit };
}

/** The base commit recorded when the snapshot was made. */
export async function baseCommitOf(dir: string): Promise<string> {
  const { readFileSync } = await import("node:fs");
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
