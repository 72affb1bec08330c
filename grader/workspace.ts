import { cpSync, existsSync, lstatSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { execa } from "execa";
import type { GraderTask } from "../tasks/loader.js";
import { createSnapshot } from "../tasks/snapshot.js";
import { changedPaths } from "./apply.js";
import { PROBES_DIR, ROOT_CONFIG_NAMES, planConfigReverts, planPytestPin, pytestConcern, type ChangedFile, type ConfigRevert, type PytestPin } from "./test-config.js";

export { PROBES_DIR };

export interface GradingWorkspace {
  /** Host folder holding the repo (and nothing an agent ever had). */
  root: string;
  repoDir: string;
  baseCommit: string;
}

/**
 * A fresh workspace from the task's source at base, in a new temporary folder: never an agent's
 * workspace, so the grader's sandbox cannot share a writable mount with one.
 */
export async function freshWorkspace(task: GraderTask, opts: { recordIn?: string; onProgress?: (msg: string) => void } = {}): Promise<GradingWorkspace> {
  if (opts.recordIn) removeStaleWorkspace(opts.recordIn);
  const root = mkdtempSync(join(tmpdir(), `infradev-grade-${task.id}-`));
  if (opts.recordIn) writeFileSync(join(opts.recordIn, WORKSPACE_RECORD), `${root}\n`);
  const repoDir = join(root, "repo");
  const snap = await createSnapshot(task, repoDir, { onProgress: opts.onProgress });
  return { root, repoDir, baseCommit: snap.baseCommit };
}

export function removeWorkspace(ws: GradingWorkspace, opts: { recordIn?: string } = {}): void {
  rmSync(ws.root, { recursive: true, force: true });
  if (opts.recordIn) rmSync(join(opts.recordIn, WORKSPACE_RECORD), { force: true });
}

/** Names the live workspace of a run, so that a run killed midway leaves no orphan folder behind. */
const WORKSPACE_RECORD = "workspace.path";

function removeStaleWorkspace(recordIn: string): void {
  let stale: string;
  try {
    stale = readFileSync(join(recordIn, WORKSPACE_RECORD), "utf8").trim();
  } catch {
    return;
  }
  // Only ever a folder we made: directly in the temp dir, with our prefix.
  if (dirname(stale) === tmpdir() && basename(stale).startsWith("infradev-grade-")) rmSync(stale, { recursive: true, force: true });
}

function isUnder(path: string, dir: string): boolean {
  return path === dir || path.startsWith(`${dir}/`);
}

/** Removes a path without following a link the submission may have left there. */
function removePath(p: string): void {
  try {
    lstatSync(p);
  } catch {
    return;
  }
  rmSync(p, { recursive: true, force: true });
}

export interface TestInstall {
  /** Paths under test_dirs the submission had changed, added or deleted (all reverted). */
  reverted: string[];
}

/**
 * Puts the grading tests in place: the submission's edits under each test dir are undone — the dir
 * is removed outright (files it added there go too) and replaced by the post-PR tests
 * (hidden/tests/<dir>), or restored to base when the task has no post-PR version of it — and the
 * hidden probes go in as infradev_probes/. `changed`: the paths the patch changed, when known.
 */
export async function installGradingTests(task: GraderTask, ws: GradingWorkspace, changed?: string[]): Promise<TestInstall> {
  const dirs = task.fullSpec.test_dirs.map((d) => d.replace(/\/+$/, ""));
  const reverted = (changed ?? (await changedPaths(ws.repoDir))).filter((p) => dirs.some((d) => isUnder(p, d)));
  for (const d of dirs) {
    // Whatever the submission left there goes; then the post-PR tests, or base's version of the dir.
    removePath(join(ws.repoDir, d));
    const postPr = join(task.hidden.testsDir, d);
    if (existsSync(postPr)) {
      cpSync(postPr, join(ws.repoDir, d), { recursive: true, dereference: false, verbatimSymlinks: true });
      continue;
    }
    const inBase = await execa("git", ["cat-file", "-e", `${ws.baseCommit}:${d}`], { cwd: ws.repoDir, reject: false });
    if (inBase.exitCode === 0) await execa("git", ["checkout", ws.baseCommit, "--", d], { cwd: ws.repoDir });
  }
  removePath(join(ws.repoDir, PROBES_DIR));
  cpSync(task.hidden.probesDir, join(ws.repoDir, PROBES_DIR), { recursive: true, dereference: false, verbatimSymlinks: true });
  return { reverted };
}

const testDirsOf = (task: GraderTask) => task.fullSpec.test_dirs.map((d) => d.replace(/\/+$/, ""));

/** Every path tracked at base (NUL-separated, so any name works). */
async function baseFiles(ws: GradingWorkspace): Promise<Set<string>> {
  const r = await execa("git", ["ls-tree", "-r", "-z", "--name-only", ws.baseCommit], { cwd: ws.repoDir, stripFinalNewline: false });
  return new Set(r.stdout.split("\0").filter(Boolean));
}

/** A regular file's text, or null (absent, a folder, a link). */
function readRegular(p: string): string | null {
  try {
    return lstatSync(p).isFile() ? readFileSync(p, "utf8") : null;
  } catch {
    return null;
  }
}

/**
 * The I/O around planConfigReverts (test-config.ts): reads what the plan needs, then restores base's
 * version of (or removes) every pytest-affecting file the submission touched outside the test dirs.
 * `changed`: every path the patch named or git sees changed — headers too, so that a file hidden
 * from `git status` by a .gitignore the patch also edits is still seen.
 */
export async function revertTestConfig(task: GraderTask, ws: GradingWorkspace, changed: readonly string[]): Promise<ConfigRevert[]> {
  const dirs = testDirsOf(task);
  const concerned = [...new Set(changed)].filter((p) => pytestConcern(p, dirs) !== null);
  if (concerned.length === 0) return [];
  const inBase = await baseFiles(ws);
  const files: ChangedFile[] = [];
  for (const path of concerned) {
    const f: ChangedFile = { path, inBase: inBase.has(path) };
    if (pytestConcern(path, dirs)?.kind === "section") {
      f.after = readRegular(join(ws.repoDir, path));
      f.base = f.inBase ? (await execa("git", ["cat-file", "blob", `${ws.baseCommit}:${path}`], { cwd: ws.repoDir, stripFinalNewline: false })).stdout : null;
    }
    files.push(f);
  }
  const plan = planConfigReverts(files, dirs);
  for (const a of plan) {
    removePath(join(ws.repoDir, a.path));
    if (a.action === "restore") {
      // Literal pathspecs: a name with * or ? must not match other files.
      const r = await execa("git", ["--literal-pathspecs", "checkout", ws.baseCommit, "--", a.path], { cwd: ws.repoDir, reject: false, all: true });
      if (r.exitCode !== 0) throw new Error(`grading workspace: could not restore base's ${a.path}: ${r.all}`);
    }
  }
  return plan;
}

/** The pytest arguments that pin the sessions to the base's config (read after revertTestConfig). */
export function pytestPinFor(repoDir: string): PytestPin {
  const root: Record<string, string> = {};
  for (const name of ROOT_CONFIG_NAMES) {
    const text = readRegular(join(repoDir, name));
    if (text !== null) root[name] = text;
  }
  return planPytestPin(root);
}
