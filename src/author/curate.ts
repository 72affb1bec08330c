/**
 * `infradev curate`: the merged changes of a repository ranked by the InfraDev paper's filters, one
 * column each with its reason — merged into the main line and not reverted later; size (code lines,
 * files, share in the core package); adds or changes tests; touches distributed / parallel / memory
 * code paths; later changes build on it; and, given the list of installed packages, whether its tests'
 * imports are all there. Per candidate: the test files it changes and the commands to check it. The
 * first three (and the imports, when asked) are hard filters: a candidate failing one is rejected,
 * with that reason; the others rank the rest.
 */
import { gitIn } from "./git.js";
import { findReverts, mainlineChanges, shasTouching, type MainlineChange } from "./history.js";
import { infraPaths, infraWords, isCodePath, isTestModule, isTestPath, suggestedId } from "./classify.js";
import { runAuthorHelper, type ImportNeeds } from "./python.js";
import type { CandidateRun } from "./curate-run.js";

export interface Column {
  ok: boolean;
  reason: string;
}

export interface Candidate {
  rank: number;
  sha: string;
  /** The pre-PR commit: the first parent. */
  base: string;
  kind: "squash" | "merge";
  pr: number | null;
  date: string;
  subject: string;
  columns: { merged: Column; size: Column; tests: Column; infra: Column; built_on: Column; imports?: Column };
  size: { code_lines: number; code_files: number; core_lines: number; core_share: number; test_lines: number };
  /** Test-side files the change adds or changes that merge still has (modules, conftests, helpers). */
  test_files: string[];
  /** Of those, the test modules pytest collects. */
  test_modules: string[];
  verdict: "candidate" | "rejected";
  /** The first hard filter it fails, or what ranks it. */
  why: string;
  suggested_id: string;
  commands: string[];
  run?: CandidateRun;
}

export interface CurateOptions {
  gitDir: string;
  /** How the commands name the repository (what the author typed). */
  repoLabel: string;
  branch?: string;
  since?: string;
  /** Only changes touching these git glob pathspecs. */
  paths?: string[];
  /** The core package (default: the largest top-level package, or its `core/` when it has one). */
  core?: string;
  minLines?: number;
  maxLines?: number;
  maxFiles?: number;
  /** Days after a change in which later changes to its files count as building on it. */
  builtOnDays?: number;
  /** Only these commits (sha prefixes). */
  only?: string[];
  /** How many candidates to show (default 20; rejected ones count). */
  top?: number;
  /** A file of installed distribution names: the imports column. */
  have?: string;
  hostPython?: string;
  onProgress?: (msg: string) => void;
}

export const CURATE_DEFAULTS = { minLines: 30, maxLines: 1500, maxFiles: 25, builtOnDays: 90, top: 20 };

/** The core package: the top-level folder holding most .py files (not tests, docs, examples), or its `core/`. */
export async function detectCore(gitDir: string, branch: string): Promise<string> {
  const files = (await gitIn(gitDir, ["ls-tree", "-r", "--name-only", branch])).split("\n").filter((f) => f.endsWith(".py") && f.includes("/"));
  const counts = new Map<string, number>();
  for (const f of files) {
    const top = f.split("/")[0]!;
    if (/^(tests?|docs?|examples?|scripts?|tools|benchmarks?|\.\w+)$/.test(top)) continue;
    counts.set(top, (counts.get(top) ?? 0) + 1);
  }
  const top = [...counts].sort((a, b) => b[1] - a[1])[0]?.[0] ?? "";
  return top && files.some((f) => f.startsWith(`${top}/core/`)) ? `${top}/core` : top;
}

function inDir(path: string, dir: string): boolean {
  return dir === "" || path === dir || path.startsWith(`${dir}/`);
}

/** The columns of one change that need no further git call. */
function staticColumns(c: MainlineChange, reverted: ReturnType<typeof findReverts>, reverts: ReadonlyMap<string, string>, core: string, o: Required<Pick<CurateOptions, "minLines" | "maxLines" | "maxFiles">>) {
  const code = c.files.filter((f) => isCodePath(f.path));
  const codeLines = code.reduce((s, f) => s + f.added + f.deleted, 0);
  const coreLines = code.filter((f) => inDir(f.path, core)).reduce((s, f) => s + f.added + f.deleted, 0);
  const tests = c.files.filter((f) => isTestPath(f.path));
  const testFiles = tests.filter((f) => f.status !== "D").map((f) => f.path).sort();
  const testModules = testFiles.filter(isTestModule);
  const kind: Candidate["kind"] = c.parents.length > 1 ? "merge" : "squash";
  const rev = reverted.get(c.sha);
  const undoes = reverts.get(c.sha);
  const merged: Column = rev
    ? { ok: false, reason: `reverted later by ${rev.sha.slice(0, 10)} "${rev.subject.slice(0, 60)}"` }
    : undoes
      ? { ok: false, reason: `it is a revert (of ${undoes})` }
      : c.parents.length === 0
      ? { ok: false, reason: "the repository's first commit (no parent to diff against)" }
      : { ok: true, reason: `${kind === "merge" ? "merge commit" : "squash commit"} on the main line, not reverted later` };
  const share = codeLines ? coreLines / codeLines : 0;
  const sizeOk = codeLines >= o.minLines && codeLines <= o.maxLines && code.length <= o.maxFiles && code.length > 0;
  const sizeWhy = `${codeLines} code lines in ${code.length} file(s), ${Math.round(share * 100)}% in ${core || "the repository"}`;
  const size: Column = {
    ok: sizeOk,
    reason: sizeOk
      ? sizeWhy
      : `${sizeWhy}: ${code.length === 0 ? "no code change" : codeLines < o.minLines ? `below ${o.minLines} lines` : codeLines > o.maxLines ? `above ${o.maxLines} lines` : `more than ${o.maxFiles} files`}`,
  };
  const testLines = tests.reduce((s, f) => s + f.added + f.deleted, 0);
  const added = tests.filter((f) => f.status === "A" && isTestModule(f.path)).length;
  const testsCol: Column = testModules.length
    ? { ok: true, reason: `${added ? `adds ${added}, ` : ""}changes ${testModules.length} test module(s) (${testLines} lines): ${testModules.slice(0, 3).join(", ")}${testModules.length > 3 ? ", …" : ""}` }
    : { ok: false, reason: tests.length ? `changes test-side files only (${tests.map((f) => f.path).slice(0, 2).join(", ")}), no test module` : "changes no test" };
  return { kind, merged, size, tests: testsCol, testFiles, testModules, sizes: { code_lines: codeLines, code_files: code.length, core_lines: coreLines, core_share: Math.round(share * 1000) / 1000, test_lines: testLines } };
}

/** Later main-line changes (within `days`) to the code files this one changes, and whether any touches a file it added. */
function builtOn(c: MainlineChange, later: readonly MainlineChange[], days: number): Column {
  const mine = new Set(c.files.filter((f) => isCodePath(f.path) && f.status !== "D").map((f) => f.path));
  const addedByMe = new Set(c.files.filter((f) => isCodePath(f.path) && f.status === "A").map((f) => f.path));
  const until = Date.parse(c.date) + days * 86_400_000;
  const hits = later.filter((l) => Date.parse(l.date) <= until && l.files.some((f) => mine.has(f.path)));
  const onAdded = hits.filter((l) => l.files.some((f) => addedByMe.has(f.path)));
  if (!hits.length) return { ok: false, reason: `no later change touches its code files within ${days} days` };
  const first = hits[hits.length - 1]!;
  return { ok: true, reason: `${hits.length} later change(s) touch its code files within ${days} days${onAdded.length ? ` (${onAdded.length} a file it added)` : ""}; first ${first.sha.slice(0, 10)}${first.pr ? ` #${first.pr}` : ""}` };
}

async function infraColumn(gitDir: string, c: MainlineChange): Promise<Column> {
  const code = c.files.filter((f) => isCodePath(f.path)).map((f) => f.path);
  const paths = infraPaths(code);
  const diff = code.length ? await gitIn(gitDir, ["diff", "-U0", "--no-color", c.parents[0]!, c.sha, "--", ...code]) : "";
  const words = infraWords(diff);
  const hits = words.reduce((s, [, n]) => s + n, 0);
  const ok = paths.length > 0 || hits >= 3;
  const said = [paths.length ? `paths: ${paths.slice(0, 2).join(", ")}${paths.length > 2 ? ", …" : ""}` : "", words.length ? `diff: ${words.slice(0, 4).map(([w, n]) => `${w}×${n}`).join(", ")}` : ""].filter(Boolean).join("; ");
  return { ok, reason: ok ? said : `no distributed / parallel / memory path or call${said ? ` (${said})` : ""}` };
}

/** The conftest.py files pytest loads for these test modules (each ancestor folder's), present in `files`. */
export function conftestsFor(modules: readonly string[], files: ReadonlySet<string>): string[] {
  const out = new Set<string>();
  for (const m of modules) {
    const parts = m.split("/");
    for (let i = 0; i < parts.length; i++) {
      const c = [...parts.slice(0, i), "conftest.py"].join("/");
      if (files.has(c)) out.add(c);
    }
  }
  return [...out].sort();
}

async function importsColumn(gitDir: string, c: Candidate, have: string, hostPython?: string): Promise<Column> {
  const files = new Set((await gitIn(gitDir, ["ls-tree", "-r", "--name-only", c.sha])).split("\n").filter(Boolean));
  const starts = [...c.test_modules, ...conftestsFor(c.test_modules, files)];
  const needs = await runAuthorHelper<ImportNeeds>(hostPython, ["imports", "--git-dir", gitDir, "--commit", c.sha, "--have", have, ...starts]);
  const missing = needs.missing ?? [];
  return missing.length
    ? { ok: false, reason: `its tests import ${missing.map((m) => `${m} (${needs.hard[m]![0]})`).slice(0, 4).join(", ")}: not installed` }
    : { ok: true, reason: `every unguarded import of its tests is installed (${needs.visited} modules followed; ${Object.keys(needs.hard).length} third-party)` };
}

function hardFailure(col: Candidate["columns"]): string | null {
  for (const k of ["merged", "tests", "size", "imports"] as const) {
    const c = col[k];
    if (c && !c.ok) return `${k}: ${c.reason}`;
  }
  return null;
}

function rankKey(c: Candidate): number[] {
  const soft = [c.columns.infra.ok, c.columns.built_on.ok].filter(Boolean).length;
  // Then: more of it in the core package (in tenths), more test lines to check it by, newer.
  return [c.verdict === "candidate" ? 1 : 0, soft, Math.round(c.size.core_share * 10), Math.min(c.size.test_lines, 1000), Date.parse(c.date)];
}

function compareKeys(a: number[], b: number[]): number {
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return b[i]! - a[i]!;
  return 0;
}

export async function curate(opts: CurateOptions): Promise<{ core: string; scanned: number; candidates: Candidate[] }> {
  const o = { ...CURATE_DEFAULTS, ...Object.fromEntries(Object.entries(opts).filter(([, v]) => v !== undefined)) } as CurateOptions & typeof CURATE_DEFAULTS;
  const branch = o.branch ?? "HEAD";
  const say = o.onProgress ?? (() => undefined);
  const core = o.core ?? (await detectCore(o.gitDir, branch));
  say(`reading the main line of ${o.repoLabel}${o.since ? ` since ${o.since}` : ""}`);
  const all = await mainlineChanges(o.gitDir, { branch, since: o.since });
  const reverted = findReverts(all);
  // The reverting commits themselves: sha → what they revert (a revert is no task).
  const reverts = new Map<string, string>();
  for (const [target, r] of reverted) reverts.set(r.sha, [reverts.get(r.sha), target.slice(0, 10)].filter(Boolean).join(", "));
  for (const c of all) if (/^revert\b/i.test(c.subject) && !reverts.has(c.sha)) reverts.set(c.sha, "a change its subject names");
  const touching = o.paths?.length ? await shasTouching(o.gitDir, { branch, since: o.since, globs: o.paths }) : null;
  let pool = all.map((c, i) => ({ c, i })).filter(({ c }) => !touching || touching.has(c.sha));
  if (o.only?.length) pool = pool.filter(({ c }) => o.only!.some((p) => c.sha.startsWith(p.toLowerCase())));
  const candidates: Candidate[] = [];
  for (const { c, i } of pool) {
    const s = staticColumns(c, reverted, reverts, core, o);
    const later = all.slice(0, i);
    const cand: Candidate = {
      rank: 0, sha: c.sha, base: c.parents[0] ?? "", kind: s.kind, pr: c.pr, date: c.date, subject: c.subject,
      columns: { merged: s.merged, size: s.size, tests: s.tests, infra: { ok: false, reason: "not looked at (a hard filter fails)" }, built_on: builtOn(c, later, o.builtOnDays) },
      size: s.sizes, test_files: s.testFiles, test_modules: s.testModules, verdict: "candidate", why: "", suggested_id: suggestedId(/^Merge (pull request|branch)/.test(c.subject) && c.body ? c.body.split("\n")[0]! : c.subject), commands: [],
    };
    const fail = hardFailure(cand.columns);
    if (!fail) cand.columns.infra = await infraColumn(o.gitDir, c);
    cand.verdict = fail ? "rejected" : "candidate";
    cand.why = fail ?? "";
    candidates.push(cand);
  }
  candidates.sort((a, b) => compareKeys(rankKey(a), rankKey(b)));
  // The imports column costs a walk of the import graph: only for the candidates about to be shown.
  if (o.have) {
    let shown = 0;
    for (const c of candidates) {
      if (shown >= o.top) break;
      if (c.verdict !== "candidate") continue;
      say(`imports of ${c.sha.slice(0, 10)}'s tests`);
      c.columns.imports = await importsColumn(o.gitDir, c, o.have, o.hostPython);
      const fail = hardFailure(c.columns);
      if (fail) Object.assign(c, { verdict: "rejected", why: fail });
      else shown++;
    }
    candidates.sort((a, b) => compareKeys(rankKey(a), rankKey(b)));
  }
  for (const c of candidates) {
    if (c.verdict === "candidate") {
      const soft = [c.columns.infra.ok && "infra paths", c.columns.built_on.ok && "built upon"].filter(Boolean);
      c.why = `passes the hard filters${soft.length ? `; ${soft.join(", ")}` : ""}`;
    }
    c.commands = [
      `infradev curate --repo ${o.repoLabel} --only ${c.sha.slice(0, 12)} --run`,
      `infradev task new --repo ${o.repoLabel} --base ${c.base} --merge ${c.sha} --id ${c.suggested_id}`,
    ];
  }
  candidates.forEach((c, i) => (c.rank = i + 1));
  return { core, scanned: all.length, candidates: o.only?.length ? candidates : candidates.slice(0, o.top) };
}
