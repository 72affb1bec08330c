import { isPathInside } from "../../lib/path-validation.js";
import { lstatSync, readFileSync, realpathSync } from "node:fs";
import { join } from "node:path";
import { execa } from "execa";
import { checkPatch, patchSections, type PatchSection } from "./patch-check.js";
import type { ApplyMethod } from "../grade/types.js";

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

const inside = isPathInside;

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

async function blobOf(repoDir: string, path: string): Promise<string | null> {
  try {
    if (!lstatSync(join(repoDir, path)).isFile()) return null;
  } catch {
    return null;
  }
  const r = await execa("git", ["hash-object", "--no-filters", "--", path], { cwd: repoDir, reject: false });
  return r.exitCode === 0 ? r.stdout.trim() : null;
}

async function baseBlob(repoDir: string, baseCommit: string, path: string): Promise<string | null> {
  const r = await execa("git", ["rev-parse", "--verify", "--quiet", `${baseCommit}:${path}`], { cwd: repoDir, reject: false });
  return r.exitCode === 0 ? r.stdout.trim() : null;
}

/**
 * Applied whole, or not at all: `git apply --3way` was seen applying the text part of a patch and
 * skipping a corrupt binary section with exit 0. Every `diff --git` section must show in the tree: a
 * deleted file is gone, a binary file has exactly the blob its `index` line names, a created file
 * exists, and a file with hunks differs from base.
 */
async function wholeCheck(repoDir: string, baseCommit: string, sections: readonly PatchSection[]): Promise<string | null> {
  for (const s of sections) {
    if (!s.path) continue;
    const now = await blobOf(repoDir, s.path);
    if (s.deleted) {
      if (now !== null) return `the patch deletes "${s.path}" but it is still there after applying: applied in part`;
      continue;
    }
    if (s.binary) {
      const zero = s.newBlob !== null && /^0+$/.test(s.newBlob);
      if (zero ? now !== null : s.newBlob === null || now === null || !now.startsWith(s.newBlob)) {
        return `the binary section for "${s.path}" did not apply (corrupt or incomplete: expected blob ${s.newBlob ?? "unknown"}, got ${now ?? "no file"})`;
      }
      continue;
    }
    if (s.created && now === null) return `the patch creates "${s.path}" but no such file exists after applying: applied in part`;
    if (s.hunks > 0 && now !== null && now === (await baseBlob(repoDir, baseCommit, s.path))) {
      return `"${s.path}" is unchanged after applying although the patch has ${s.hunks} hunk(s) for it: applied in part`;
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
  const sections = patchSections(readFileSync(patchFile, "utf8"));
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
    const why = postCheck(repoDir, changed) ?? (await wholeCheck(repoDir, baseCommit, sections));
    if (why) {
      await resetToBase(repoDir, baseCommit);
      return { applied: false, reason: `inapplicable: ${why}`, log };
    }
    return { applied: true, method: attempt.method, paths: changed, log };
  }
  await resetToBase(repoDir, baseCommit);
  return { applied: false, reason: `inapplicable: does not apply to the base with git apply, git apply --3way or patch --fuzz (${lastError || "no detail"})`, log };
}
