import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { curate, type Candidate } from "../../src/author/curate.js";
import { runCandidate } from "../../src/author/curate-run.js";
import { findReverts, mainlineChanges } from "../../src/author/history.js";
import { REPO_ROOT } from "../helpers/paths.js";
import { makeSyntheticRepo, type SyntheticRepo } from "../helpers/synthetic-repo.js";

/**
 * `infradev curate` on a repository the test makes (test/helpers/synthetic-repo.ts): the ranking, each
 * filter's reason, and `--run` through the real rank launcher in the real bubblewrap sandbox with
 * Debian's Python (fail→pass, pass→pass, a case that needs two ranks).
 */

let scratch: string;
let repo: SyntheticRepo;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), "infradev-curate-"));
  repo = makeSyntheticRepo(join(scratch, "repo"));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const byName = (list: Candidate[], sha: string) => list.find((c) => c.sha === sha)!;

describe("the main line", () => {
  it("lists first-parent changes with their PR numbers and finds the revert", async () => {
    const changes = await mainlineChanges(join(repo.dir, ".git"), { branch: "HEAD" });
    expect(changes.map((c) => c.sha)).toEqual([repo.sha.tiny, repo.sha.capacity, repo.sha.revert, repo.sha.speedup, repo.sha.util, repo.sha.bucketMerge, repo.sha.root]);
    const merge = changes.find((c) => c.sha === repo.sha.bucketMerge)!;
    expect(merge.parents).toHaveLength(2);
    expect(merge.pr).toBe(1);
    // A merge commit's change is its diff against the first parent: the branch's files.
    expect(merge.files.map((f) => `${f.status} ${f.path}`).sort()).toEqual(["A mini/bucket.py", "A tests/test_bucket.py", "M tests/test_comm.py"]);
    const reverted = findReverts(changes);
    expect([...reverted.keys()]).toEqual([repo.sha.speedup]);
    expect(reverted.get(repo.sha.speedup)!.sha).toBe(repo.sha.revert);
  });
});

describe("curate", () => {
  let ranked: Candidate[];
  beforeAll(async () => {
    ranked = (await curate({ gitDir: join(repo.dir, ".git"), repoLabel: repo.dir, minLines: 10 })).candidates;
  });

  it("ranks the merge that adds tests and is built upon first, then the later PR, then every rejected change", () => {
    expect(ranked.map((c) => c.sha)).toHaveLength(7);
    expect(ranked[0]!.sha).toBe(repo.sha.bucketMerge);
    expect(ranked[1]!.sha).toBe(repo.sha.capacity);
    expect(ranked.slice(0, 2).map((c) => c.verdict)).toEqual(["candidate", "candidate"]);
    expect(ranked.slice(2).every((c) => c.verdict === "rejected")).toBe(true);
    expect(ranked.map((c) => c.rank)).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });

  it("says why, column by column", () => {
    const top = ranked[0]!;
    expect(top.kind).toBe("merge");
    // A GitHub merge commit's subject names the branch; the PR's title is the body's first line.
    expect(top.suggested_id).toBe("bucketed-gradient-sums-one-all");
    expect(top.columns.merged.reason).toMatch(/merge commit on the main line, not reverted later/);
    expect(top.columns.tests.reason).toMatch(/adds 1, changes 2 test module\(s\).*tests\/test_bucket\.py/);
    expect(top.columns.infra.ok).toBe(true);
    expect(top.columns.infra.reason).toMatch(/paths: mini\/bucket\.py/);
    expect(top.columns.built_on.reason).toMatch(new RegExp(`1 later change\\(s\\) touch its code files within 90 days \\(1 a file it added\\); first ${repo.sha.capacity.slice(0, 10)} #5`));
    expect(top.size).toMatchObject({ code_files: 1, core_share: 1 });
    expect(top.test_files).toEqual(["tests/test_bucket.py", "tests/test_comm.py"]);
    expect(top.commands).toEqual([
      `infradev curate --repo ${repo.dir} --only ${repo.sha.bucketMerge.slice(0, 12)} --run`,
      `infradev task new --repo ${repo.dir} --base ${repo.sha.root} --merge ${repo.sha.bucketMerge} --id bucketed-gradient-sums-one-all`,
    ]);
    expect(byName(ranked, repo.sha.capacity).columns.built_on).toMatchObject({ ok: false });
    expect(byName(ranked, repo.sha.util).why).toMatch(/^tests: changes no test$/);
    expect(byName(ranked, repo.sha.speedup).why).toMatch(new RegExp(`^merged: reverted later by ${repo.sha.revert.slice(0, 10)} "Revert "Speed up split \\(#3\\)""`));
    expect(byName(ranked, repo.sha.revert).why).toMatch(new RegExp(`^merged: it is a revert \\(of ${repo.sha.speedup.slice(0, 10)}\\)`));
    expect(byName(ranked, repo.sha.tiny).why).toMatch(/^size: 2 code lines in 1 file\(s\), 100% in mini: below 10 lines$/);
    expect(byName(ranked, repo.sha.root).why).toMatch(/first commit/);
  });

  it("--paths keeps the changes that touch the globs; the size limits are options", async () => {
    const only = (await curate({ gitDir: join(repo.dir, ".git"), repoLabel: "r", paths: ["mini/bucket*"] })).candidates;
    expect(only.map((c) => c.sha).sort()).toEqual([repo.sha.bucketMerge, repo.sha.capacity].sort());
    // Default minimum (30 lines): the capacity PR is now too small.
    expect(byName(only, repo.sha.capacity).why).toMatch(/^size: \d+ code lines .*below 30 lines/);
  });

  it("--run: the changed tests at base (with merge's tests) and at merge, through the launcher in bubblewrap", async () => {
    const top = ranked[0]!;
    const run = await runCandidate(top, { gitDir: join(repo.dir, ".git"), python: "/usr/bin/python3", sandbox: "local", testTimeoutSec: 60, runTimeoutSec: 300 });
    expect(run.test_dirs).toEqual(["tests"]);
    // test_bucket.py is new (whole); of test_comm.py only the two tests the PR adds.
    expect(run.selection.map((s) => [s.file, s.whole, s.nodes])).toEqual([
      ["tests/test_bucket.py", true, ["tests/test_bucket.py"]],
      ["tests/test_comm.py", false, ["tests/test_comm.py::test_split_evenly_existing", "tests/test_comm.py::test_needs_two_ranks"]],
    ]);
    expect(run.fail_to_pass.sort()).toEqual(["tests/test_bucket.py::test_bucket_refuses_overflow", "tests/test_bucket.py::test_make_buckets_counts[10-1]", "tests/test_bucket.py::test_make_buckets_counts[4-3]"]);
    expect(run.pass_to_pass).toEqual(["tests/test_comm.py::test_split_evenly_existing"]);
    expect(run.needs_more_gpus.map((n) => n.id)).toEqual(["tests/test_comm.py::test_needs_two_ranks"]);
    expect(run.needs_more_gpus[0]!.message).toMatch(/requires 2 GPUs/);
    expect(run.pass_to_fail).toEqual([]);
    expect(run.merge_failures).toEqual([]);
    expect(run.verdict).toBe("task-ready");
    expect(run.base.counts.collection_errors).toBe(1); // mini.bucket does not exist at base
  });

  it("the CLI prints the table and the reasons; --only names nothing that exists in one line", () => {
    const tsx = join(REPO_ROOT, "node_modules", ".bin", "tsx");
    const r = spawnSync(tsx, [join(REPO_ROOT, "src", "cli", "main.ts"), "curate", "--repo", repo.dir, "--min-lines", "10", "--top", "3"], { encoding: "utf8" });
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/7 main-line change\(s\) read; core package mini; 3 shown/);
    expect(r.stdout).toMatch(new RegExp(`^1 +${repo.sha.bucketMerge.slice(0, 10)} +#1 +2026-01-\\d\\d +yes +\\d+/1f +yes +yes +yes +- +- +candidate$`, "m"));
    expect(r.stdout).toMatch(/^ {4}built_on ok {2}1 later change/m);
    const bad = spawnSync(tsx, [join(REPO_ROOT, "src", "cli", "main.ts"), "curate", "--repo", repo.dir, "--only", "deadbeef"], { encoding: "utf8" });
    expect(bad.status).toBe(2);
    expect(bad.stderr.trim().split("\n").pop()).toMatch(/^infradev: curate: --only deadbeef: no main-line change of .* matches$/);
  });
});
