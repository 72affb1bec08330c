import { cpSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { execa } from "execa";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { createSnapshot } from "../../task/public/snapshot.js";
import { changedPaths } from "./apply.js";
import { CANARIES_REAL_DIR, TWINS_PER_LOCATION, canariesOf, hashTree, randomFolderName, runInstaller, writeCanarySources, type Canary, type InstallJob, type InstallMap } from "./test-renaming.js";
import { PROBES_DIR, ROOT_CONFIG_NAMES, planConfigReverts, planPytestPin, pytestConcern, type ChangedFile, type ConfigRevert, type PytestPin } from "./harness-files.js";

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
  staged: StagedTests;
}

/** The grading tests of one run, staged on the host outside the workspace. */
export interface StagedTests {
  /** Host folder (inside the run's private temp root, outside the repo) holding the staged dirs. */
  root: string;
  /** Bound read-only over the workspace's test dirs (Contract C). */
  overlays: Array<{ host: string; rel: string }>;
  /** Installed official test dirs (repo-relative), in task order. */
  officialDirs: string[];
  /**
   * The probe sessions' test modules (repo-relative, installed names): the probes and their canaries,
   * beside the official tests in the first test dir (same folder, same depth, same conftest chain).
   */
  probeFiles: string[];
  /** Every file the probes brought into that folder (modules, helpers, the plugin): what official sessions leave out. */
  probeOnly: string[];
  /** The probes' conftest as a plugin module (repo-relative), loaded by the probe sessions only; null without one. */
  probePlugin: string | null;
  map: InstallMap;
  canaries: Canary[];
  /** sha256 per staged file, keyed `<rel>/<path>` as the workspace sees it; taken right after staging. */
  hashes: Record<string, string>;
}

/** Test dirs of a task, without trailing slashes, and without one that lies inside another. */
export function stagedDirs(testDirs: readonly string[]): string[] {
  const dirs = [...new Set(testDirs.map((d) => d.replace(/\/+$/, "")))];
  return dirs.filter((d) => !dirs.some((o) => o !== d && isUnder(d, o)));
}

/**
 * Before anything is removed or created at a test dir's path: every ancestor of it inside the repo
 * must be a real folder (lstat). One that is a link (a patch can turn `tests` into a link to `/`) or
 * a file is removed and restored from base (or made a plain folder when base has none there).
 */
export async function guardAncestors(ws: GradingWorkspace, rel: string): Promise<string[]> {
  const fixed: string[] = [];
  const parts = rel.split("/");
  for (let i = 1; i <= parts.length - 1; i++) {
    const anc = parts.slice(0, i).join("/");
    const abs = join(ws.repoDir, anc);
    let st;
    try {
      st = lstatSync(abs);
    } catch {
      continue; // absent: mkdir below creates real folders
    }
    if (st.isDirectory()) continue;
    removePath(abs);
    const inBase = await execa("git", ["--literal-pathspecs", "cat-file", "-e", `${ws.baseCommit}:${anc}`], { cwd: ws.repoDir, reject: false });
    if (inBase.exitCode === 0) await execa("git", ["--literal-pathspecs", "checkout", ws.baseCommit, "--", anc], { cwd: ws.repoDir });
    if (!lstatSync(abs, { throwIfNoEntry: false })?.isDirectory()) {
      removePath(abs);
      mkdirSync(abs);
    }
    fixed.push(anc);
  }
  return fixed;
}

/** Extracts base's version of a folder into `dest` (git archive of the base commit: trusted bytes). */
async function baseTree(ws: GradingWorkspace, rel: string, dest: string): Promise<boolean> {
  const inBase = await execa("git", ["--literal-pathspecs", "cat-file", "-e", `${ws.baseCommit}:${rel}`], { cwd: ws.repoDir, reject: false });
  if (inBase.exitCode !== 0) return false;
  mkdirSync(dest, { recursive: true });
  const tar = join(dest, "..", `${basename(dest)}.tar`);
  await execa("git", ["--literal-pathspecs", "archive", "--format=tar", `--output=${tar}`, ws.baseCommit, "--", rel], { cwd: ws.repoDir });
  await execa("tar", ["-x", "-f", tar, "-C", dest, "--no-same-owner", "--no-same-permissions"]);
  rmSync(tar, { force: true });
  return true;
}

/**
 * Puts the grading tests in place. The submission's edits under each test dir are undone — the dir
 * is removed outright (files it added there go too) — and the tests that run are staged in a host
 * folder outside the workspace: per test dir, the post-PR tests (hidden/tests/<dir>) or base's
 * version of it; the hidden probes in a folder with a fresh random name inside the first test dir;
 * this run's canaries beside the official tests and beside the probes. Every test module, test
 * function and test class gets a random name (python/host/infradev_grading.py; the map turns
 * them back into real ids), so nothing in a path, module or test name says which is which.
 *
 * The staged dirs are bound read-only over the workspace's test dirs (`overlays`); a copy also goes
 * into the workspace itself, for a backend that binds nothing (`none`), and is what the mounts hide.
 * `changed`: the paths the patch changed, when known.
 */
export async function installGradingTests(task: GraderTask, ws: GradingWorkspace, changed?: string[]): Promise<TestInstall> {
  const dirs = stagedDirs(task.fullSpec.test_dirs);
  const reverted = (changed ?? (await changedPaths(ws.repoDir))).filter((p) => dirs.some((d) => isUnder(p, d)));
  const priv = join(ws.root, "grading");
  rmSync(priv, { recursive: true, force: true });
  mkdirSync(priv);
  const stageRoot = join(priv, "staged");
  const sources = join(priv, "sources");
  mkdirSync(stageRoot);
  mkdirSync(sources);
  const jobs: InstallJob[] = [];
  const overlays: StagedTests["overlays"] = [];
  const officialDirs: string[] = [];
  let probeRel = "";
  for (const [i, d] of dirs.entries()) {
    const postPr = join(task.hidden.testsDir, d);
    let src: string | null = existsSync(postPr) ? postPr : join(sources, `base${i}`);
    if (src !== postPr && !(await baseTree(ws, d, src))) src = null;
    if (src !== null) src = src === postPr ? src : join(src, d);
    if (src === null && i > 0) continue;
    const dest = join(stageRoot, String(i));
    mkdirSync(dest);
    if (src !== null) {
      jobs.push({ src, dest, rel: d, real: d, suite: "official", twins: i === 0 ? TWINS_PER_LOCATION : 0 });
      officialDirs.push(d);
    }
    overlays.push({ host: dest, rel: d });
    if (i === 0) {
      // The probes go beside the official tests, in the same folder under random module names: a
      // probe's file is as deep as an official test's and has the same conftest chain above it (a
      // submission that behaves only for callers one folder deeper is not told which is which). Their
      // own conftest.py becomes a plugin module with a random name (conftest_plugin).
      probeRel = d;
      const canaries = writeCanarySources(join(sources, "canaries"));
      jobs.push({ src: task.hidden.probesDir, dest, rel: d, real: PROBES_DIR, suite: "probe", rename_helpers: true, conftest_plugin: true, twins: TWINS_PER_LOCATION });
      // Beside the official tests when this dir holds some (else the official run would never collect them).
      if (src !== null) jobs.push({ src: canaries.official, dest, rel: d, real: `${CANARIES_REAL_DIR}/official`, suite: "canary" });
      jobs.push({ src: canaries.probe, dest, rel: d, real: `${CANARIES_REAL_DIR}/probe`, suite: "canary" });
    }
  }
  const map = await runInstaller(task.fullSpec.env.python, jobs);
  rmSync(sources, { recursive: true, force: true });
  // The workspace side: whatever the submission left at the test dirs goes, then a plain copy of the
  // staged dirs (hidden under the read-only mounts where the backend binds them).
  for (const o of overlays) {
    await guardAncestors(ws, o.rel);
    removePath(join(ws.repoDir, o.rel));
    mkdirSync(dirname(join(ws.repoDir, o.rel)), { recursive: true });
    cpSync(o.host, join(ws.repoDir, o.rel), { recursive: true, dereference: false, verbatimSymlinks: true });
  }
  const hashes: Record<string, string> = {};
  for (const o of overlays) for (const [p, h] of Object.entries(hashTree(o.host))) hashes[`${o.rel}/${p}`] = h;
  return { reverted, staged: { root: stageRoot, overlays, officialDirs, ...probeLayout(map, probeRel), map, canaries: canariesOf(map), hashes } };
}

/** Where the probes' files went (installed, repo-relative), from the install map. */
export function probeLayout(map: InstallMap, probeRel: string): Pick<StagedTests, "probeFiles" | "probeOnly" | "probePlugin"> {
  const probeCanary = (real: string) => real.startsWith(`${CANARIES_REAL_DIR}/probe/`);
  const probeFiles = Object.entries(map.files)
    .filter(([, f]) => f.suite === "probe" || (f.suite === "canary" && probeCanary(f.real)))
    .map(([installed]) => installed)
    .sort();
  const helpers = Object.entries(map.helpers ?? {})
    .filter(([, real]) => isUnder(real, PROBES_DIR))
    .map(([installed]) => installed);
  const plugins = (map.plugins ?? []).filter((p) => isUnder(p, probeRel));
  return { probeFiles, probeOnly: [...new Set([...probeFiles, ...helpers, ...plugins])].sort(), probePlugin: plugins[0] ?? null };
}

/** Hashes of the staged files now, keyed as StagedTests.hashes is. */
export function stagedHashesNow(staged: StagedTests): Record<string, string> {
  const out: Record<string, string> = {};
  for (const o of staged.overlays) for (const [p, h] of Object.entries(hashTree(o.host))) out[`${o.rel}/${p}`] = h;
  return out;
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
