import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { execa } from "execa";
import { hostPythonDir } from "../../lib/paths.js";
import { DIFFERENTIAL_RUNNER } from "../../task/hidden/differential.js";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { applyPatch } from "../workspace/apply.js";
import { freshWorkspace, removeWorkspace, stagedDirs, type GradingWorkspace } from "../workspace/workspace.js";

/**
 * The host side of python/host/infradev_mutate.py: two trees of a task (base, and base with the
 * golden patch applied) and the analyses that read them. Everything here reads the task author's
 * trusted files only (base, golden patch, hidden tests, probes, prompt); never a submission.
 */

export interface AnalysisOptions {
  /** Interpreter for the stdlib-only helper, on this machine: this, else $INFRADEV_HOST_PYTHON, else python3 on PATH (not $INFRADEV_PYTHON: that is the tests' interpreter, maybe a path inside an image). */
  python?: string;
  /**
   * The caller's scratch folder. Each tree records its temporary location in a subfolder of it
   * (freshWorkspace's `recordIn`), so a run killed midway has its orphan trees removed by the next.
   */
  workDir: string;
  /** Trees built by an earlier withTaskTrees call, to run several analyses on one pair. */
  trees?: TaskTrees;
}

export interface TaskTrees {
  base: GradingWorkspace;
  /** Base with the golden patch applied, every new file marked intent-to-add (so `git diff <base>` shows it). */
  post: GradingWorkspace;
}

export function analysisPython(opts: Pick<AnalysisOptions, "python">): string {
  return opts.python ?? process.env.INFRADEV_HOST_PYTHON ?? "python3";
}

/** The task's test dirs: the golden patch's tests are not code to mutate or stub. */
export function taskTestDirs(task: GraderTask): string[] {
  return stagedDirs(task.fullSpec.test_dirs);
}

export function testDirArgs(task: GraderTask): string[] {
  return taskTestDirs(task).flatMap((d) => ["--exclude-dir", d]);
}

/** Builds the two trees, runs `fn` on them, and removes them whatever happens. */
export async function withTaskTrees<T>(task: GraderTask, opts: AnalysisOptions, fn: (trees: TaskTrees) => Promise<T>): Promise<T> {
  if (opts.trees) return fn(opts.trees);
  const records = { base: join(opts.workDir, "trees", "base"), post: join(opts.workDir, "trees", "post") };
  for (const dir of Object.values(records)) mkdirSync(dir, { recursive: true });
  const made: Array<[GradingWorkspace, string]> = [];
  try {
    const base = await freshWorkspace(task, { recordIn: records.base });
    made.push([base, records.base]);
    const post = await freshWorkspace(task, { recordIn: records.post });
    made.push([post, records.post]);
    const applied = await applyPatch(post.repoDir, task.hidden.goldenPatch, post.baseCommit);
    if (!applied.applied) throw new Error(`${task.label}: the golden patch ${task.hidden.goldenPatch} does not apply to the base: ${applied.reason}`);
    await git(post.repoDir, ["add", "-A", "--intent-to-add"]);
    return await fn({ base, post });
  } finally {
    for (const [ws, record] of made) removeWorkspace(ws, { recordIn: record });
  }
}

export async function git(cwd: string, args: string[]): Promise<string> {
  const r = await execa("git", args, { cwd, reject: false, stripFinalNewline: false });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")} (in ${cwd}) failed: ${String(r.stderr).trim()}`);
  return String(r.stdout);
}

/** The working tree against base as a patch git apply takes; `pathspec` limits it (e.g. excludes). */
export async function diffAgainstBase(ws: GradingWorkspace, pathspec: string[] = []): Promise<string> {
  return git(ws.repoDir, ["-c", "core.quotePath=false", "diff", "--no-color", "--no-ext-diff", "--no-renames", "--binary", "--src-prefix=a/", "--dst-prefix=b/", ws.baseCommit, "--", ...pathspec]);
}

/**
 * Runs one command of infradev_mutate.py and returns its JSON. -I -S: nothing from the
 * environment or a site folder can change what the stdlib-only helper imports.
 */
export async function runMutateHelper<T>(opts: Pick<AnalysisOptions, "python">, args: string[]): Promise<T> {
  const python = analysisPython(opts);
  const script = join(hostPythonDir(), "infradev_mutate.py");
  const r = await execa(python, ["-I", "-S", script, ...args], { reject: false, maxBuffer: 512 * 1024 * 1024, env: { PATH: process.env.PATH ?? "/usr/bin:/bin" }, extendEnv: false });
  if ((r as { code?: string }).code === "ENOENT" || (r.exitCode === undefined && r.failed)) {
    throw new Error(`task analysis: cannot run the Python interpreter "${python}" (${(r.shortMessage ?? "").split("\n")[0]}); pass --host-python, or set INFRADEV_HOST_PYTHON to a Python >= 3.9`);
  }
  if (r.exitCode !== 0) throw new Error(`task analysis: infradev_mutate.py ${args[0]} failed (exit ${r.exitCode ?? r.signal}): ${String(r.stderr).trim() || r.shortMessage}`);
  return JSON.parse(String(r.stdout)) as T;
}

export interface ContractSymbol {
  /** What a reader names it by: a module's dotted path, else the identifier. */
  name: string;
  kind: "module" | "function" | "class" | "constant" | "method" | "property" | "attribute" | "parameter";
  /** Dotted path; a parameter as `mod.func(param)`. */
  qualname: string;
  /** `file:line` in the post tree. */
  definedAt: string;
  /** Up to 5 `file:line`, official tests first (repo-relative), then probes (relative to the probes folder, prefixed `probes/`). */
  referencedAt: string[];
}

/** Symbols the golden patch adds that the official tests (post-PR) or the probes reference. */
export async function interfaceContract(task: GraderTask, opts: AnalysisOptions): Promise<ContractSymbol[]> {
  return withTaskTrees(task, opts, async ({ base, post }) => {
    const tests = await runMutateHelper<{ symbols: RawSymbol[] }>(opts, ["contract", "--base", base.repoDir, "--post", post.repoDir, "--refs", task.hidden.testsDir, ...testDirArgs(task)]);
    const probes = await runMutateHelper<{ symbols: RawSymbol[] }>(opts, ["contract", "--base", base.repoDir, "--post", post.repoDir, "--refs", task.hidden.probesDir, ...testDirArgs(task)]);
    // Two runs so that each reference says which folder it is in (both hold test_*.py files).
    const byQual = new Map<string, ContractSymbol>();
    for (const [raw, prefix] of [[tests.symbols, ""], [probes.symbols, "probes/"]] as const) {
      for (const s of raw) {
        // The differential recorder is the grader's own code staged with the probes, not the author's:
        // a name it uses (struct's pack / unpack) says nothing about what the probes test.
        const refs = prefix ? s.referenced_at.filter((at) => !at.startsWith(`${DIFFERENTIAL_RUNNER}:`)) : s.referenced_at;
        if (!refs.length) continue;
        const sym = byQual.get(s.qualname) ?? { name: s.name, kind: s.kind, qualname: s.qualname, definedAt: s.defined_at, referencedAt: [] };
        for (const at of refs) if (sym.referencedAt.length < 5) sym.referencedAt.push(prefix + at);
        byQual.set(s.qualname, sym);
      }
    }
    return [...byQual.values()].sort((a, b) => compareDefined(a.definedAt, b.definedAt));
  });
}

interface RawSymbol {
  name: string;
  kind: ContractSymbol["kind"];
  qualname: string;
  defined_at: string;
  referenced_at: string[];
}

function compareDefined(a: string, b: string): number {
  const [fa, la] = [a.slice(0, a.lastIndexOf(":")), Number(a.slice(a.lastIndexOf(":") + 1))];
  const [fb, lb] = [b.slice(0, b.lastIndexOf(":")), Number(b.slice(b.lastIndexOf(":") + 1))];
  return fa < fb ? -1 : fa > fb ? 1 : la - lb;
}

export interface PromptLeak {
  /** File of the golden patch and the first of the copied lines there. */
  file: string;
  line: number;
  /** How many consecutive lines (1 for a single long line). */
  lines: number;
  /** prompt.md's line where the copy starts. */
  promptLine: number;
  text: string;
}

/** Long verbatim overlaps between prompt.md and the code (.py files) the golden patch adds. */
export async function promptLeaks(task: GraderTask, opts: AnalysisOptions): Promise<PromptLeak[]> {
  return withTaskTrees(task, opts, async ({ base, post }) => {
    const r = await runMutateHelper<{ leaks: Array<{ file: string; line: number; lines: number; prompt_line: number; text: string }> }>(opts, [
      "leaks", "--base", base.repoDir, "--post", post.repoDir, "--prompt", join(task.taskDir, "prompt.md"),
    ]);
    return r.leaks.map((l) => ({ file: l.file, line: l.line, lines: l.lines, promptLine: l.prompt_line, text: l.text }));
  });
}

export interface CollectiveTimeout {
  file: string;
  line: number;
  /** null when the timeout is not a timedelta of constants (module constants and parameter defaults count). */
  seconds: number | null;
  /** Set when `seconds` rests on a parameter's default, e.g. "the default of timeout_sec". */
  assumes?: string;
  call: string;
}

/** `timeout=` of every init_process_group / new_group call in the post-PR tree. */
export async function collectiveTimeouts(task: GraderTask, opts: AnalysisOptions): Promise<CollectiveTimeout[]> {
  return withTaskTrees(task, opts, async ({ post }) => (await runMutateHelper<{ timeouts: CollectiveTimeout[] }>(opts, ["timeouts", "--repo", post.repoDir])).timeouts);
}
