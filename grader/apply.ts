import { lstatSync, readFileSync, realpathSync } from "node:fs";
import { isAbsolute, join, relative } from "node:path";
import { execa } from "execa";
import { checkPatch } from "./patch-check.js";
import type { ApplyMethod } from "./types.js";

/**
 * Applies a submission to a fresh workspace at base: `git apply`, then `git apply --3way`, then
 * `patch -p1 --fuzz`, resetting to base between attempts and recording which one worked. A patch
 * that fails the pre-check (patch-check.ts), would write through a symlink, or leaves the tree with
 * a link or a path outside the repo is *inapplicable* and the tree is reset: never applied in part.
 */

export type ApplyResult =
  | { applied: true; method: ApplyMethod; paths: string[]; log: string }
  | { applied: false; reason: string; log: string };

interface Attempt {
  method: ApplyMethod;
  /** Commands run in order; the attempt succeeds when all exit 0 (and leave no conflict). */
  steps: string[][];
}

function attempts(patchFile: string): Attempt[] {
  return [
    { method: "git_apply", steps: [["git", "apply", "--check", "--whitespace=nowarn", patchFile], ["git", "apply", "--whitespace=nowarn", patchFile]] },
    { method: "git_apply_3way", steps: [["git", "apply", "--3way", "--whitespace=nowarn", patchFile]] },
    {
      method: "patch_fuzz",
      // -u: read it as a unified diff only (never an ed script); -f: never guess "reversed";
      // a dry run first so that a patch with a failing hunk is not applied in part.
      steps: [
        ["patch", "-p1", "-u", "-f", "--fuzz=3", "--dry-run", "--batch", "-i", patchFile],
        ["patch", "-p1", "-u", "-f", "--fuzz=3", "--no-backup-if-mismatch", "--reject-file=-", "--batch", "-i", patchFile],
      ],
    },
  ];
}

async function run(cwd: string, argv: string[]): Promise<{ ok: boolean; out: string }> {
  const r = await execa(argv[0]!, argv.slice(1), { cwd, reject: false, all: true, stdin: "ignore", timeout: 120_000 });
  return { ok: r.exitCode === 0, out: `$ ${argv.join(" ")}\n${r.all ?? ""}\n[exit ${r.exitCode ?? r.signal}]\n` };
}

/** Back to base: tracked files restored, everything untracked (and ignored) removed. */
export async function resetToBase(repoDir: string, baseCommit: string): Promise<void> {
  for (const argv of [
    ["git", "reset", "-q", "--hard", baseCommit],
    ["git", "clean", "-q", "-fdx"],
  ]) {
    const r = await run(repoDir, argv);
    if (!r.ok) throw new Error(`reset of grading workspace failed: ${r.out}`);
  }
}

/** Paths git sees as changed against base, untracked included (NUL-separated, so any name works). */
export async function changedPaths(repoDir: string): Promise<string[]> {
  const r = await execa("git", ["status", "--porcelain=v1", "-z", "-uall", "--no-renames"], { cwd: repoDir });
  return r.stdout
    .split("\0")
    .filter(Boolean)
    .map((entry) => entry.slice(3));
}

function inside(root: string, p: string): boolean {
  const rel = relative(root, p);
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
}

/** A symlink at `path` or at any folder on the way to it, in the tree as it is now. */
export function symlinkOnPath(repoDir: string, path: string): string | null {
  const parts = path.split("/").filter(Boolean);
  for (let i = 1; i <= parts.length; i++) {
    const sub = parts.slice(0, i).join("/");
    try {
      if (lstatSync(join(repoDir, sub)).isSymbolicLink()) return sub;
    } catch {
      return null; // does not exist (yet): nothing below it can be a link
    }
  }
  return null;
}

/** After applying: no changed path is (or lies under) a link, and each resolves inside the repo. */
function postCheck(repoDir: string, paths: string[]): string | null {
  const root = realpathSync(repoDir);
  for (const p of paths) {
    const link = symlinkOnPath(repoDir, p);
    if (link) return `the patched tree has a symlink at "${link}"; symlinks are refused in submissions`;
    try {
      if (!inside(root, realpathSync(join(repoDir, p)))) return `"${p}" resolves outside the repo`;
    } catch {
      // deleted by the patch
    }
  }
  return null;
}

export async function applyPatch(repoDir: string, patchFile: string, baseCommit: string): Promise<ApplyResult> {
  const check = checkPatch(readFileSync(patchFile));
  if (!check.ok) return { applied: false, reason: `inapplicable: ${check.reason}`, log: `pre-check: ${check.reason}\n` };
  for (const p of check.paths) {
    const link = symlinkOnPath(repoDir, p);
    if (link) return { applied: false, reason: `inapplicable: "${p}" would be written through the symlink "${link}" in the repo`, log: "" };
  }
  let log = "";
  let lastError = "";
  let dirty = false; // the workspace arrives fresh at base: only later attempts need a reset
  for (const attempt of attempts(patchFile)) {
    if (dirty) await resetToBase(repoDir, baseCommit);
    dirty = true;
    let ok = true;
    for (const step of attempt.steps) {
      const r = await run(repoDir, step);
      log += r.out;
      if (!r.ok) {
        ok = false;
        lastError = r.out.split("\n").slice(1, 4).join(" ").trim();
        break;
      }
    }
    if (!ok) continue;
    const changed = await changedPaths(repoDir);
    const why = postCheck(repoDir, changed);
    if (why) {
      await resetToBase(repoDir, baseCommit);
      return { applied: false, reason: `inapplicable: ${why}`, log };
    }
    return { applied: true, method: attempt.method, paths: changed, log };
  }
  await resetToBase(repoDir, baseCommit);
  return { applied: false, reason: `inapplicable: does not apply to the base with git apply, git apply --3way or patch --fuzz (${lastError || "no detail"})`, log };
}
