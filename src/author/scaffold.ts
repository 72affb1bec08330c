/**
 * `infradev task new`: a task folder from a merged PR (a base and a merge commit of a repository).
 * task.yaml with the git source, `test_dirs` and `official_tests` from merge's changed test files,
 * the deselect list from a `curate --run` result (with its reasons); prompt.md drafted in the paper's
 * Appendix B shape with the interface contract filled from the golden diff; a promises.yaml and a
 * probe skeleton; the generated hollow patch; the upstream bundle (hidden/upstream/<id>.bundle: it
 * holds merge, the answer, so it lives with the other grader-only files), imported into the git cache
 * so that the task loads and `task check` runs at once. Nothing of the upstream code is copied into
 * the folder: the golden patch and the post-PR tests are derived from the cache, as for every git task.
 */
import { existsSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { UsageError } from "../lib/errors.js";
import { importBundle, type BundleImport } from "../task/public/snapshot.js";
import { makeBundle, type MadeBundle } from "./bundle.js";
import { changedPaths, checkoutTree, gitIn, listTree, scratchDir } from "./git.js";
import { isCodePath, isTestModule, isTestPath } from "./classify.js";
import { testDirsFor } from "./test-dirs.js";
import { runAuthorHelper, runHostScript, type InterfaceSymbol, type SelectedTests } from "./python.js";
import { draftPrompt, draftPromises, draftPromisesYaml, draftProbes } from "./drafts.js";
import { taskYaml, taskReadme } from "./task-files.js";
import type { CandidateRun } from "./curate-run.js";

export interface ScaffoldOptions {
  gitDir: string;
  repoLabel: string;
  base: string;
  merge: string;
  id: string;
  category: "training" | "inference" | "rl";
  type: "feature" | "performance" | "refactor" | "bugfix";
  /** The upstream URL task.yaml names (the git cache's key). */
  url: string;
  tasksDir: string;
  title?: string;
  run?: CandidateRun | null;
  gpus?: number;
  ranks?: number;
  python?: string;
  timeoutSec?: number;
  env?: Record<string, string>;
  hostPython?: string;
  /** Seed the git cache from the bundle (default true). */
  importToCache?: boolean;
  onProgress?: (msg: string) => void;
}

export interface ScaffoldResult {
  taskDir: string;
  files: string[];
  bundle: MadeBundle;
  cache: BundleImport | null;
  testDirs: string[];
  officialModules: string[];
  deselected: Array<{ id: string; reason: string }>;
  symbols: InterfaceSymbol[];
  hollow: { stubbed: string[]; reverted: string[] };
  notes: string[];
}

/** Deselect entries from a run: cases merge fails there, each with why (the schema wants <file>.py::<name>). */
function deselectFrom(run: CandidateRun, modules: readonly string[]): { entries: Array<{ id: string; reason: string }>; skipped: string[] } {
  const entries: Array<{ id: string; reason: string }> = [];
  const skipped: string[] = [];
  const inModules = (id: string) => modules.some((m) => id.startsWith(`${m}::`));
  const add = (id: string, reason: string) => {
    if (!inModules(id)) return;
    if (!/^[^:\s]+\.py::\S+$/.test(id)) skipped.push(id);
    else entries.push({ id, reason: reason.length >= 10 ? reason : `${reason} (curate --run)` });
  };
  for (const n of run.needs_more_gpus) add(n.id, `needs more GPUs than the grading node (curate --run at merge: ${n.message})`);
  for (const n of run.merge_failures) add(n.id, `fails at merge on the node curate --run used (${n.message})`);
  return { entries, skipped };
}

/** Builds a tree from merge with the hollow versions of the changed Python files; its diff against base, test folders left out. */
async function hollowPatch(gitDir: string, base: string, merge: string, files: Array<{ path: string; source: string }>, testDirs: string[]): Promise<string> {
  const scratch = scratchDir("infradev-hollow-");
  try {
    const repo = join(scratch.dir, "repo.git");
    await gitIn(repo, ["init", "--bare", "--quiet"]);
    // Objects of the author's repository are read through alternates: nothing is copied or written there.
    writeFileSync(join(repo, "objects", "info", "alternates"), `${join(gitDir, "objects")}\n`);
    const env = { GIT_INDEX_FILE: join(scratch.dir, "index") };
    await gitIn(repo, ["read-tree", merge], { env });
    for (const f of files) {
      const blob = (await gitIn(repo, ["hash-object", "-w", "--stdin"], { input: f.source })).trim();
      const mode = (await gitIn(repo, ["ls-files", "-s", "--", f.path], { env })).split(" ")[0] || "100644";
      await gitIn(repo, ["update-index", "--add", "--cacheinfo", `${mode},${blob},${f.path}`], { env });
    }
    const tree = (await gitIn(repo, ["write-tree"], { env })).trim();
    return await gitIn(repo, ["diff", "--binary", "--full-index", "--no-renames", base, tree, "--", ".", ...testDirs.map((d) => `:(exclude,literal)${d}`)]);
  } finally {
    scratch.remove();
  }
}

export async function scaffoldTask(o: ScaffoldOptions): Promise<ScaffoldResult> {
  const say = o.onProgress ?? (() => undefined);
  const taskDir = join(o.tasksDir, o.id);
  if (existsSync(taskDir)) throw new UsageError(`task new: ${taskDir} already exists (pick another --id, or remove it)`);
  const changed = await changedPaths(o.gitDir, o.base, o.merge);
  const tests = changed.filter((f) => isTestPath(f.path));
  if (!tests.length) throw new UsageError(`task new: ${o.merge.slice(0, 12)} changes no test file against ${o.base.slice(0, 12)}: nothing would tell a correct patch from base (curate's "tests" filter)`);
  const testDirs = testDirsFor(tests.map((f) => f.path));
  if (tests.some((f) => !f.path.includes("/"))) throw new UsageError(`task new: test files at the repository root (${tests.filter((f) => !f.path.includes("/")).map((f) => f.path).join(", ")}): test_dirs must be folders`);
  const modules = tests.filter((f) => f.status !== "D" && isTestModule(f.path)).map((f) => f.path).sort();
  const code = changed.filter((f) => isCodePath(f.path) && !testDirs.some((d) => f.path.startsWith(`${d}/`)));
  const codePy = code.filter((f) => f.path.endsWith(".py"));
  const notes: string[] = [];
  // Official modules: those with a passing case at merge in the run, else every changed one.
  let officialModules = modules;
  let deselected: Array<{ id: string; reason: string }> = [];
  if (o.run && o.run.verdict !== "not-run") {
    const passing = new Set([...o.run.fail_to_pass, ...o.run.pass_to_pass].map((id) => id.split("::")[0]!));
    officialModules = modules.filter((m) => passing.has(m));
    for (const m of modules.filter((x) => !passing.has(x))) notes.push(`${m}: left out of official_tests (no case passed at merge in the run)`);
    const d = deselectFrom(o.run, officialModules);
    deselected = d.entries;
    for (const id of d.skipped) notes.push(`${id}: fails at merge but its id has a space or a colon the deselect list cannot hold: deselect it by hand or leave it (gold failing a case only drops it)`);
  } else notes.push("no curate --run result: official_tests lists every changed test module and deselects nothing (run `infradev curate --only <merge> --run --out F` and pass --run-results F)");
  if (!officialModules.length) throw new UsageError(`task new: no changed test module passes at merge in the run: this PR cannot be graded by its tests`);

  const scratch = scratchDir("infradev-task-new-");
  try {
    say(`reading ${codePy.length} changed Python file(s) and ${testDirs.join(", ")} at base and merge`);
    const [mini, refs, testBase, testPost] = ["mini-base", "refs", "tests-base", "tests-post"].map((d) => join(scratch.dir, d)) as [string, string, string, string];
    const miniPost = join(scratch.dir, "mini-post");
    const atBase = new Set(await listTree(o.gitDir, o.base, codePy.map((f) => f.path)));
    for (const d of [mini, miniPost, testBase]) mkdirSync(d, { recursive: true });
    await checkoutTree(o.gitDir, o.base, mini, codePy.map((f) => f.path).filter((p) => atBase.has(p)));
    await checkoutTree(o.gitDir, o.merge, miniPost, codePy.filter((f) => f.status !== "D").map((f) => f.path));
    await checkoutTree(o.gitDir, o.merge, refs, await listTree(o.gitDir, o.merge, testDirs));
    const modsAtBase = new Set(await listTree(o.gitDir, o.base, officialModules));
    await checkoutTree(o.gitDir, o.base, testBase, officialModules.filter((m) => modsAtBase.has(m)));
    await checkoutTree(o.gitDir, o.merge, testPost, officialModules);
    const symbols = codePy.length ? (await runAuthorHelper<{ symbols: InterfaceSymbol[] }>(o.hostPython, ["interface", "--base", mini, "--post", miniPost, "--refs", refs])).symbols : [];
    const hollow = codePy.length
      ? await runHostScript<{ files: Array<{ path: string; source: string }>; stubbed: string[]; reverted: string[] }>("infradev_mutate.py", o.hostPython, ["hollow", "--base", mini, "--post", miniPost])
      : { files: [], stubbed: [], reverted: [] };
    const selection = (await runAuthorHelper<{ files: SelectedTests[] }>(o.hostPython, ["select", "--base", testBase, "--post", testPost, ...officialModules])).files;
    const deselectedIds = new Set(deselected.map((d) => d.id));
    const draftTests = selection.flatMap((s) => s.tests).filter((t) => !deselectedIds.has(t.node));
    const subject = (await gitIn(o.gitDir, ["log", "-1", "--format=%s", o.merge])).trim();
    const body = (await gitIn(o.gitDir, ["log", "-1", "--format=%b", o.merge])).trim();
    const pr = /\(#(\d+)\)\s*$/.exec(subject)?.[1];
    const prUrl = pr && /github\.com/.test(o.url) ? `${o.url.replace(/\.git$/, "")}/pull/${pr}` : null;
    const title = o.title ?? `${o.url.replace(/\.git$/, "").split("/").pop()}${pr ? ` #${pr}` : ""}: ${subject.replace(/\s*\(#\d+\)\s*$/, "")}`;
    const promises = draftPromises(draftTests);
    const gpus = o.gpus ?? 0;

    mkdirSync(join(taskDir, "hidden", "probes"), { recursive: true });
    mkdirSync(join(taskDir, "hidden", "upstream"), { recursive: true });
    const written: string[] = [];
    const write = (rel: string, text: string) => {
      writeFileSync(join(taskDir, rel), text);
      written.push(rel);
    };
    try {
      say(`cutting the upstream bundle (base's tree and merge; history cut below base)`);
      const bundle = await makeBundle(o.gitDir, o.base, o.merge, join(taskDir, "hidden", "upstream", `${o.id}.bundle`));
      written.push(`hidden/upstream/${o.id}.bundle`);
      if (bundle.bytes > 15 * 1024 * 1024) notes.push(`the bundle is ${(bundle.bytes / 1048576).toFixed(1)} MiB, above the ~15 MiB a task folder should carry`);
      const cache = o.importToCache === false ? null : await importBundle(bundle.file, o.url, { shallow: bundle.shallow });
      const yamlInput = { ...o, title, gpus, testDirs, officialModules, deselected, runVerdict: o.run?.why ?? null };
      write("task.yaml", taskYaml(yamlInput));
      write("prompt.md", draftPrompt({ id: o.id, title, repoName: o.url.replace(/\.git$/, "").split("/").slice(-2).join("/"), subject, body, prUrl, codeFiles: code, testDirs, officialModules, deselected, gpus, ranks: o.ranks ?? 1, symbols, tests: draftTests }, promises));
      write("hidden/promises.yaml", draftPromisesYaml(promises));
      write("hidden/probes/test_probes.py", draftProbes(promises, ["behaviour"]));
      write("hidden/hollow.patch", await hollowPatch(o.gitDir, o.base, o.merge, hollow.files, testDirs));
      const removed = tests.filter((f) => f.status === "D").map((f) => f.path);
      if (removed.length) write("hidden/removed_tests.txt", `# Base test files the PR deletes (task check's dropped-files trap reads this).\n${removed.join("\n")}\n`);
      write("README.md", taskReadme({ ...yamlInput, subject, bundle, shallow: bundle.shallow, run: o.run ?? null, notes, hollow }));
      return { taskDir, files: written, bundle, cache, testDirs, officialModules, deselected, symbols, hollow: { stubbed: hollow.stubbed, reverted: hollow.reverted }, notes };
    } catch (e) {
      rmSync(taskDir, { recursive: true, force: true });
      throw e;
    }
  } finally {
    scratch.remove();
  }
}
