import { lstatSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { diffAgainstBase, runMutateHelper, taskTestDirs, testDirArgs, withTaskTrees, type AnalysisOptions, type TaskTrees } from "./task-analysis.js";

/**
 * Mutation adversaries and the hollow patch, generated from a task's golden patch (issue 11 items 2
 * and 5). python/host/infradev_mutate.py finds the sites and edits the text; this side turns each
 * mutated file back into a whole patch against base, which the check grades like any submission.
 */

export type MutantOperator =
  | "arith" | "cmp" | "boundary" | "bool" | "not" | "const" | "drop-stmt" | "drop-kw" | "negate" | "early-return"
  // wider (issue 22): a comprehension's `if` dropped, an integer dtype one step narrower / wider,
  // a tree walk swapped for its sibling (named_modules <-> named_children), a collective issued twice
  | "drop-filter" | "dtype" | "swap-call" | "dup-collective";

export interface Mutant {
  /** `<file>:<qualname or <module>>:<operator>#<n>` (stable while the enclosing def is unchanged). */
  id: string;
  file: string;
  line: number;
  endLine: number;
  operator: MutantOperator;
  /** e.g. `line 78: '<' -> '<='`. */
  description: string;
  original: string;
  replacement: string;
  /** Unified diff against base: the golden patch with this one change. */
  patch: string;
  /** Unified diff of the one file from golden to mutant (what to show an author for a survivor). */
  change: string;
}

export interface MutantSkips {
  /** Mutants whose AST equals the golden file's (a no-op edit). */
  same_ast: number;
  /** Mutants whose text equals an earlier one's. */
  duplicate: number;
  unparsable: number;
}

interface RawMutant {
  id: string;
  file: string;
  line: number;
  end_line: number;
  operator: MutantOperator;
  description: string;
  original: string;
  replacement: string;
  source: string;
  change: string;
}

/** A file of the post tree the helper named: a plain file inside the repo (the helper walks without following links). */
function postFile(trees: TaskTrees, rel: string): string {
  if (rel.startsWith("/") || rel.split("/").includes("..")) throw new Error(`mutants: the helper named a path outside the repo: ${rel}`);
  const abs = join(trees.post.repoDir, rel);
  if (!lstatSync(abs).isFile()) throw new Error(`mutants: ${rel} in the post-PR tree is not a plain file`);
  return abs;
}

/**
 * Every mutant of the code the golden patch adds or changes, each with its patch against base.
 * `seed` shuffles the order (a budgeted check takes a sample from the front); ids do not depend on it.
 */
export async function generateMutants(task: GraderTask, opts: AnalysisOptions & { seed?: number }): Promise<{ mutants: Mutant[]; skipped: MutantSkips }> {
  return withTaskTrees(task, opts, async (trees) => {
    const args = ["mutants", "--base", trees.base.repoDir, "--post", trees.post.repoDir, ...testDirArgs(task)];
    if (opts.seed !== undefined) args.push("--seed", String(opts.seed));
    const raw = await runMutateHelper<{ mutants: RawMutant[]; skipped: MutantSkips }>(opts, args);
    const mutants: Mutant[] = [];
    for (const m of raw.mutants) {
      const abs = postFile(trees, m.file);
      const golden = readFileSync(abs);
      writeFileSync(abs, m.source);
      try {
        mutants.push({
          id: m.id, file: m.file, line: m.line, endLine: m.end_line, operator: m.operator,
          description: m.description, original: m.original, replacement: m.replacement,
          patch: await diffAgainstBase(trees.post), change: m.change,
        });
      } finally {
        writeFileSync(abs, golden);
      }
    }
    return { mutants, skipped: raw.skipped };
  });
}

export interface HollowPatch {
  /** Diff against base of the hollow tree (test dirs left at base: the grader installs its own tests). */
  patch: string;
  /** `file:qualname` of each function the golden patch adds, now raising NotImplementedError. */
  stubbed: string[];
  /** `file:qualname` of each function the golden patch changes, back to base's body. */
  reverted: string[];
  /** Changed functions left as golden has them (a one-line body on one side only). */
  notReverted: string[];
}

/** The hollow version of the golden patch: its interface with no behaviour behind it. */
export async function generateHollow(task: GraderTask, opts: AnalysisOptions): Promise<HollowPatch> {
  return withTaskTrees(task, opts, async (trees) => {
    const raw = await runMutateHelper<{ files: Array<{ path: string; source: string }>; stubbed: string[]; reverted: string[]; not_reverted: string[] }>(opts, [
      "hollow", "--base", trees.base.repoDir, "--post", trees.post.repoDir, ...testDirArgs(task),
    ]);
    const saved = raw.files.map((f) => {
      const abs = postFile(trees, f.path);
      return { abs, golden: readFileSync(abs), hollow: f.source };
    });
    try {
      for (const f of saved) writeFileSync(f.abs, f.hollow);
      const exclude = taskTestDirs(task).map((d) => `:(exclude,literal)${d}`);
      return { patch: await diffAgainstBase(trees.post, [".", ...exclude]), stubbed: raw.stubbed, reverted: raw.reverted, notReverted: raw.not_reverted };
    } finally {
      for (const f of saved) writeFileSync(f.abs, f.golden);
    }
  });
}
