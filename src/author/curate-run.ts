/**
 * `curate --run`: the step that decides whether a PR can be a task. The tests the PR adds or changes
 * (python/host/infradev_author.py `select`) run twice through the grader's own rank launcher
 * (runner/runRanks, in a sandbox): on the base with merge's test folders swapped in, as the grader
 * installs post-PR tests, and on merge. Per case: fail→pass, pass→pass, pass→fail; the cases merge
 * fails with a message about world size, GPUs or divisibility are counted as needing more GPUs (a
 * heuristic the deselect reasons quote, for the author to confirm).
 */
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { createSandbox } from "../sandbox/picker.js";
import { runRanks, type RunRanksResult } from "../runner/ranks.js";
import type { CaseOutcome } from "../runner/merge.js";
import { checkoutTree, listTree, scratchDir } from "./git.js";
import { runAuthorHelper, type SelectedTests } from "./python.js";
import { testDirsFor } from "./test-dirs.js";

export interface RunOptions {
  gitDir: string;
  /** The tests' interpreter (default python3). */
  python?: string;
  ranks?: number;
  sandbox?: "local" | "none";
  env?: Record<string, string>;
  /** Host folders put first on the tests' PYTHONPATH, read-only (a task's env.pythonpath stand-ins, before the task exists). */
  pythonPath?: string[];
  testTimeoutSec?: number;
  runTimeoutSec?: number;
  launcher?: "builtin" | "torchrun";
  /** Run base and merge at the same time. */
  parallel?: boolean;
  /** Scratch folder for the trees (default: the system's temp folder); kept with `keep`. */
  workDir?: string;
  keep?: boolean;
  hostPython?: string;
  onProgress?: (msg: string) => void;
}

export interface SessionSummary {
  status: string;
  wall_s: number;
  counts: Record<string, number>;
  /** Set when no result came back (the launcher's or the sandbox's failure). */
  lost?: string;
}

export interface CaseNote {
  id: string;
  message: string;
}

export interface CandidateRun {
  python: string;
  ranks: number;
  sandbox: string;
  test_dirs: string[];
  selection: SelectedTests[];
  base: SessionSummary;
  merge: SessionSummary;
  fail_to_pass: string[];
  pass_to_pass: string[];
  pass_to_fail: CaseNote[];
  /** Cases merge fails whose message names world size, GPUs or divisibility. */
  needs_more_gpus: CaseNote[];
  /** Other cases merge does not pass (failed, error). */
  merge_failures: CaseNote[];
  skipped_at_merge: CaseNote[];
  verdict: "task-ready" | "no-fail-to-pass" | "breaks-tests" | "not-run";
  why: string;
}

/** Failure messages that say the case needs a larger world than this node's. */
export const NEEDS_MORE_GPUS = /\b(world[_ ]?size|data[- _]parallel size|divisible by|\d+\s*(?:or more\s*)?gpus?\b|not enough (?:gpus|devices|ranks)|requires? (?:at least )?\d+ (?:gpus|devices|ranks|processes)|device_count|invalid device ordinal|nproc_per_node)/i;

function counts(cases: RunRanksResult["cases"]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const c of cases) out[c.outcome] = (out[c.outcome] ?? 0) + 1;
  return out;
}

/** A failure's message on one line (pytest's crash message: "AssertionError: why | assert …"), capped. */
function messageOf(c: RunRanksResult["cases"][number]): string {
  const r = c.ranks.find((x) => x.outcome !== "passed") ?? c.ranks[0];
  const text = (r?.message || r?.excerpt || c.reason || "").split("\n").map((l) => l.trim()).filter(Boolean).join(" | ");
  return text.length > 300 ? `${text.slice(0, 297)}...` : text;
}

async function session(tree: string, nodes: string[], o: RunOptions, label: string): Promise<{ summary: SessionSummary; outcomes: Map<string, { outcome: CaseOutcome; message: string }> }> {
  const started = Date.now();
  const sandbox = await createSandbox({ kind: o.sandbox ?? "local", hostRepoDir: tree, python: o.python ?? "python3", env: o.env ?? {}, pythonPath: (o.pythonPath ?? []).map((host) => ({ host })), purpose: "grader" });
  try {
    const res = await runRanks(sandbox, {
      ranks: o.ranks ?? 1,
      // addopts off: a repository's -x or --maxfail would stop at the first failure of the base.
      pytestArgs: [...nodes, "-o", "addopts=", "-q", "-rfE"],
      outDir: join(".infradev", "curate", label),
      perTestTimeoutSec: o.testTimeoutSec ?? 300,
      runTimeoutSec: o.runTimeoutSec ?? 1800,
      launcher: o.launcher ?? "builtin",
      removeOutDir: true,
    });
    const outcomes = new Map(res.cases.map((c) => [c.id, { outcome: c.outcome, message: messageOf(c) }]));
    const lost = res.harnessError ?? res.lostRecords;
    const errs = (res.launch?.collection_errors ?? []).length;
    const summary: SessionSummary = { status: res.launch?.status ?? "lost", wall_s: Math.round((Date.now() - started) / 100) / 10, counts: { ...counts(res.cases), ...(errs ? { collection_errors: errs } : {}) }, ...(lost ? { lost } : {}) };
    return { summary, outcomes };
  } finally {
    await sandbox.close();
  }
}

/** Runs a candidate's changed tests at base (merge's test folders swapped in) and at merge. */
export async function runCandidate(c: { sha: string; base: string; test_files: string[]; test_modules: string[] }, o: RunOptions): Promise<CandidateRun> {
  const say = o.onProgress ?? (() => undefined);
  const empty: SessionSummary = { status: "not run", wall_s: 0, counts: {} };
  const testDirs = testDirsFor(c.test_files);
  const base: CandidateRun = {
    python: o.python ?? "python3", ranks: o.ranks ?? 1, sandbox: o.sandbox ?? "local", test_dirs: testDirs, selection: [], base: empty, merge: empty,
    fail_to_pass: [], pass_to_pass: [], pass_to_fail: [], needs_more_gpus: [], merge_failures: [], skipped_at_merge: [], verdict: "not-run", why: "",
  };
  if (!c.test_modules.length) return { ...base, why: "the change has no test module to run" };
  const scratch = scratchDir(`curate-${c.sha.slice(0, 10)}-`, o.workDir);
  try {
    // The selection reads the changed modules only, at base and at merge.
    const sel = join(scratch.dir, "select");
    const atBase = new Set(await listTree(o.gitDir, c.base, c.test_modules));
    await checkoutTree(o.gitDir, c.base, join(sel, "base"), c.test_modules.filter((m) => atBase.has(m)));
    mkdirSync(join(sel, "base"), { recursive: true });
    await checkoutTree(o.gitDir, c.sha, join(sel, "post"), c.test_modules);
    const { files: selection } = await runAuthorHelper<{ files: SelectedTests[] }>(o.hostPython, ["select", "--base", join(sel, "base"), "--post", join(sel, "post"), ...c.test_modules]);
    const nodes = selection.flatMap((s) => s.nodes);
    if (!nodes.length) return { ...base, selection, why: "the PR changes no test function of its test modules" };
    say(`${c.sha.slice(0, 10)}: ${nodes.length} selection(s) in ${selection.length} module(s); trees for base (merge's ${testDirs.join(", ")}) and merge`);
    const baseTree = join(scratch.dir, "base");
    await checkoutTree(o.gitDir, c.base, baseTree);
    for (const d of testDirs) rmSync(join(baseTree, d), { recursive: true, force: true });
    await checkoutTree(o.gitDir, c.sha, baseTree, await listTree(o.gitDir, c.sha, testDirs));
    const mergeTree = join(scratch.dir, "merge");
    await checkoutTree(o.gitDir, c.sha, mergeTree);
    say(`${c.sha.slice(0, 10)}: running the selected tests at base and at merge${o.parallel ? " (at once)" : ""}`);
    const runBase = () => session(baseTree, nodes, o, "base");
    const runMerge = () => session(mergeTree, nodes, o, "merge");
    const [b, m] = o.parallel ? await Promise.all([runBase(), runMerge()]) : [await runBase(), await runMerge()];
    const passedAt = (x: typeof b, id: string) => x.outcomes.get(id)?.outcome === "passed";
    const out: CandidateRun = { ...base, selection, base: b.summary, merge: m.summary };
    for (const [id, r] of m.outcomes) {
      if (r.outcome === "passed") (passedAt(b, id) ? out.pass_to_pass : out.fail_to_pass).push(id);
      else if (r.outcome === "skipped") out.skipped_at_merge.push({ id, message: r.message });
      else (NEEDS_MORE_GPUS.test(r.message) ? out.needs_more_gpus : out.merge_failures).push({ id, message: r.message });
    }
    for (const [id, r] of b.outcomes) if (r.outcome === "passed" && !passedAt(m, id)) out.pass_to_fail.push({ id, message: m.outcomes.get(id)?.message ?? "not run at merge" });
    const lost = b.summary.lost ?? m.summary.lost;
    out.verdict = lost ? "not-run" : out.pass_to_fail.length ? "breaks-tests" : out.fail_to_pass.length ? "task-ready" : "no-fail-to-pass";
    out.why = lost
      ? `no result: ${lost}`
      : `${out.fail_to_pass.length} fail→pass, ${out.pass_to_pass.length} pass→pass, ${out.pass_to_fail.length} pass→fail, ${out.needs_more_gpus.length} need more GPUs, ${out.merge_failures.length} other failures at merge, ${out.skipped_at_merge.length} skipped`;
    return out;
  } finally {
    if (!o.keep) scratch.remove();
  }
}
