/**
 * The main line of a repository as a list of merged changes: every first-parent commit (a squash
 * merge has one parent, a merge commit two; either way its change is the diff against the first
 * parent), with its files and line counts, its PR number where the message names one, and the later
 * commits that revert it. Read with one `git log` (argv, no shell).
 */
import { gitIn } from "./git.js";

export interface ChangeFile {
  path: string;
  added: number;
  deleted: number;
  /** A: the change creates the file, D: deletes it, M: anything else. */
  status: "A" | "M" | "D";
}

export interface MainlineChange {
  sha: string;
  parents: string[];
  /** Committer date, ISO 8601 (when it reached the main line). */
  date: string;
  author: string;
  subject: string;
  body: string;
  /** The PR number the message names ("... (#1234)", "Merge pull request #1234"), else null. */
  pr: number | null;
  files: ChangeFile[];
}

const RS = "\x1e";
const US = "\x1f";
const GS = "\x1d";

/** A path as `git log --numstat` prints it: C-quoted when it holds a quote, a backslash or a control character. */
function unquote(p: string): string {
  if (!p.startsWith('"') || !p.endsWith('"')) return p;
  const body = p.slice(1, -1);
  const bytes: number[] = [];
  for (let i = 0; i < body.length; i++) {
    const c = body[i]!;
    if (c !== "\\") {
      bytes.push(...Buffer.from(c, "utf8"));
      continue;
    }
    const n = body[++i]!;
    if (/[0-7]/.test(n)) {
      bytes.push(parseInt(body.slice(i, i + 3), 8));
      i += 2;
    } else bytes.push(({ n: 10, t: 9, r: 13, '"': 34, "\\": 92, a: 7, b: 8, f: 12, v: 11 } as Record<string, number>)[n] ?? n.charCodeAt(0));
  }
  return Buffer.from(bytes).toString("utf8");
}

export function prNumberOf(subject: string): number | null {
  const all = [...subject.matchAll(/\(#(\d+)\)/g)];
  if (all.length) return Number(all[all.length - 1]![1]);
  const m = /^Merge pull request #(\d+)/.exec(subject) ?? /^Merge branch .* into .*!(\d+)/.exec(subject);
  return m ? Number(m[1]) : null;
}

/**
 * The first-parent commits of `branch` (newest first), each with its diff against its first parent.
 * `since`: a date git understands (2025-06-01, "6 months ago").
 */
export async function mainlineChanges(gitDir: string, opts: { branch: string; since?: string }): Promise<MainlineChange[]> {
  const out = await gitIn(gitDir, [
    "log", "--first-parent", "--diff-merges=first-parent", "--no-renames", "--numstat", "--summary",
    `--format=${RS}%H${US}%P${US}%cI${US}%an${US}%s${US}%b${GS}`,
    ...(opts.since ? [`--since=${opts.since}`] : []),
    opts.branch, "--",
  ]);
  const changes: MainlineChange[] = [];
  for (const rec of out.split(RS).slice(1)) {
    const end = rec.indexOf(GS);
    const [sha, parents, date, author, subject, ...body] = rec.slice(0, end).split(US);
    const files = new Map<string, ChangeFile>();
    for (const line of rec.slice(end + 1).split("\n")) {
      const num = /^(\d+|-)\t(\d+|-)\t(.*)$/.exec(line);
      if (num) {
        const path = unquote(num[3]!);
        files.set(path, { path, added: num[1] === "-" ? 0 : Number(num[1]), deleted: num[2] === "-" ? 0 : Number(num[2]), status: "M" });
        continue;
      }
      const mode = /^ (create|delete) mode \d+ (.*)$/.exec(line);
      if (mode) {
        const f = files.get(unquote(mode[2]!));
        if (f) f.status = mode[1] === "create" ? "A" : "D";
      }
    }
    changes.push({ sha: sha!, parents: parents!.split(" ").filter(Boolean), date: date!, author: author!, subject: subject!, body: body.join(US).trim(), pr: prNumberOf(subject!), files: [...files.values()] });
  }
  return changes;
}

/**
 * The shas of first-parent commits of `branch` that touch any of `globs` (git pathspecs with glob
 * magic: `megatron/core/inference/**`), since `since`.
 */
export async function shasTouching(gitDir: string, opts: { branch: string; since?: string; globs: string[] }): Promise<Set<string>> {
  const out = await gitIn(gitDir, ["rev-list", "--first-parent", ...(opts.since ? [`--since=${opts.since}`] : []), opts.branch, "--", ...opts.globs.map((g) => `:(glob)${g}`)]);
  return new Set(out.split("\n").filter(Boolean));
}

export interface Revert {
  /** The reverting commit. */
  sha: string;
  subject: string;
}

/**
 * Which changes a later change reverts: by the sha git's own revert message names ("This reverts
 * commit <sha>"), by the reverted subject (`Revert "<subject>"`), or by PR number in a subject that
 * starts with "revert" ("revert: … (#3779) (#4404)" reverts #3779). A change reverted and then
 * re-applied stays reverted; its re-application is a change of its own.
 */
export function findReverts(changes: readonly MainlineChange[]): Map<string, Revert> {
  const bySubject = new Map<string, MainlineChange>();
  const byPr = new Map<number, MainlineChange>();
  for (const c of changes) {
    bySubject.set(c.subject.trim(), c);
    if (c.pr !== null) byPr.set(c.pr, c);
  }
  const reverted = new Map<string, Revert>();
  const at = new Map(changes.map((c, i) => [c.sha, i]));
  for (const r of changes) {
    if (!/^revert\b/i.test(r.subject) && !/This reverts commit [0-9a-f]{7,40}/.test(r.body)) continue;
    const targets: MainlineChange[] = [];
    for (const m of r.body.matchAll(/This reverts commit ([0-9a-f]{7,40})/g)) {
      const t = changes.find((c) => c.sha.startsWith(m[1]!));
      if (t) targets.push(t);
    }
    const quoted = /^Revert "(.*)"/.exec(r.subject);
    if (quoted && bySubject.has(quoted[1]!)) targets.push(bySubject.get(quoted[1]!)!);
    if (/^revert\b/i.test(r.subject)) {
      for (const m of r.subject.matchAll(/#(\d+)/g)) {
        const n = Number(m[1]);
        const t = byPr.get(n);
        if (t && n !== r.pr) targets.push(t);
      }
    }
    for (const t of targets) {
      // Only a later commit reverts (changes are newest first: a smaller index is later).
      if (t.sha !== r.sha && (at.get(r.sha) ?? 0) < (at.get(t.sha) ?? 0) && !reverted.has(t.sha)) reverted.set(t.sha, { sha: r.sha, subject: r.subject });
    }
  }
  return reverted;
}
