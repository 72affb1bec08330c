import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { curate } from "../../src/author/curate.js";
import { runCandidate } from "../../src/author/curate-run.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";
import { checkTaskStatic } from "../../src/grader/check/task-check.js";
import { writeJsonAtomic } from "../../src/lib/json.js";
import { REPO_ROOT } from "../helpers/paths.js";
import { makeSyntheticRepo, type SyntheticRepo } from "../helpers/synthetic-repo.js";

/**
 * `infradev task new` on the synthetic repository's merge commit (PR #1) with a real `curate --run`
 * result: the folder it writes, that it loads through the grader's door, and that the static half of
 * `task check` passes on it (run by the command itself, and again here in-process).
 */

const URL = "https://example.invalid/mini.git";
const tsx = join(REPO_ROOT, "node_modules", ".bin", "tsx");
let scratch: string;
let repo: SyntheticRepo;
let env: NodeJS.ProcessEnv;
const cli = (args: string[]) => spawnSync(tsx, [join(REPO_ROOT, "src", "cli", "main.ts"), ...args], { encoding: "utf8", env });
const saved = process.env.INFRADEV_GIT_CACHE;

beforeAll(async () => {
  scratch = mkdtempSync(join(tmpdir(), "infradev-task-new-"));
  repo = makeSyntheticRepo(join(scratch, "repo"));
  mkdirSync(join(scratch, "tasks"));
  env = { ...process.env, INFRADEV_GIT_CACHE: join(scratch, "cache") };
  process.env.INFRADEV_GIT_CACHE = join(scratch, "cache");
  const gitDir = join(repo.dir, ".git");
  const res = await curate({ gitDir, repoLabel: repo.dir, only: [repo.sha.bucketMerge] });
  res.candidates[0]!.run = await runCandidate(res.candidates[0]!, { gitDir, python: "/usr/bin/python3", sandbox: "local", testTimeoutSec: 60, runTimeoutSec: 300 });
  writeJsonAtomic(join(scratch, "run.json"), res);
});
afterAll(() => {
  if (saved === undefined) delete process.env.INFRADEV_GIT_CACHE;
  else process.env.INFRADEV_GIT_CACHE = saved;
  rmSync(scratch, { recursive: true, force: true });
});

describe("task new", () => {
  let out: ReturnType<typeof cli>;
  const dir = () => join(scratch, "tasks", "mini-buckets");
  beforeAll(() => {
    out = cli(["task", "new", "--repo", repo.dir, "--base", repo.sha.root, "--merge", repo.sha.bucketMerge, "--id", "mini-buckets", "--category", "training", "--type", "feature",
      "--url", URL, "--tasks-dir", join(scratch, "tasks"), "--run-results", join(scratch, "run.json")]);
  });

  it("writes the folder and passes the static half of task check (exit 0)", () => {
    expect(out.status, out.stderr + out.stdout).toBe(0);
    for (const f of ["task.yaml", "prompt.md", "README.md", "hidden/promises.yaml", "hidden/probes/test_probes.py", "hidden/hollow.patch", "hidden/upstream/mini-buckets.bundle"]) {
      expect(existsSync(join(dir(), f)), f).toBe(true);
    }
    expect(out.stdout).toMatch(/static check: passed \(0 error\(s\), \d+ warning\(s\)\)/);
    expect(out.stdout).toMatch(/warning placeholders: .*prompt\.md:\d+: \d+ TODO\(author\) mark\(s\) left to write/);
    // Nothing of the upstream code is copied: golden and post-PR tests come from the cache.
    expect(existsSync(join(dir(), "hidden", "golden.patch"))).toBe(false);
    expect(existsSync(join(dir(), "hidden", "tests"))).toBe(false);
  });

  it("task.yaml: the git source, test_dirs and official_tests from merge's changed tests, the deselect list from the run with its reason", () => {
    const spec = parseYaml(readFileSync(join(dir(), "task.yaml"), "utf8"));
    expect(spec.source).toEqual({ kind: "git", url: URL, base: repo.sha.root, merge: repo.sha.bucketMerge });
    expect(spec.test_dirs).toEqual(["tests"]);
    expect(spec.official_tests.paths).toEqual(["tests/test_bucket.py", "tests/test_comm.py"]);
    expect(spec.official_tests.deselect).toHaveLength(1);
    expect(spec.official_tests.deselect[0].id).toBe("tests/test_comm.py::test_needs_two_ranks");
    expect(spec.official_tests.deselect[0].reason).toMatch(/^needs more GPUs than the grading node \(curate --run at merge: AssertionError: requires 2 GPUs/);
    expect(spec).toMatchObject({ category: "training", type: "feature", ranks: 1, requires_gpu: false, env: { python: "/usr/bin/python3" } });
  });

  it("prompt.md has the Appendix B sections, the interface contract from the golden diff, and the author's places marked", () => {
    const prompt = readFileSync(join(dir(), "prompt.md"), "utf8");
    const sections = [...prompt.matchAll(/^## (.*)$/gm)].map((m) => m[1]);
    expect(sections).toEqual(["What", "Why", "Impact", "Data flow", "Change scope", "Behaviour that must hold", "What you design yourself", "Definition of done", "Interface contract"]);
    const contract = prompt.slice(prompt.indexOf("## Interface contract"));
    expect(contract).toMatch(/^# mini\/bucket\.py \(new\)$/m);
    expect(contract).toMatch(/^class Bucket {2}# new: A contiguous group of parameter sizes reduced together\.$/m);
    expect(contract).toMatch(/^ {4}def add\(self, size\) {2}# new: Adds a parameter of this many elements; False when the bucket is full\.$/m);
    expect(contract).toMatch(/^def make_buckets\(sizes, capacity\) {2}# new: Splits parameter sizes/m);
    expect(prompt).toMatch(/^- mini\/bucket\.py \(new\): TODO\(author\): what changes here$/m);
    expect(prompt).toMatch(/Bucketed gradient sums: one all_reduce per bucket\./); // the PR's description, for the author
    expect(prompt).toMatch(/^The tests in tests \(test_bucket\.py, test_comm\.py\) pass on CPU; the 1 case\(s\) that need more than this are out of scope\.$/m);
    // A draft promise per new or changed official test, not the deselected one.
    expect(prompt).toMatch(/^- bucket refuses overflow \(TODO\(author\): restate as a behaviour/m);
    expect(prompt).not.toMatch(/needs two ranks \(TODO/);
  });

  it("the hidden part loads through the grader's door: promises quote the prompt, each has a placeholder probe, the hollow stubs what golden adds", () => {
    const task = loadGraderTask("mini-buckets", join(scratch, "tasks"));
    expect(task.hidden.promises!.map((p) => p.id)).toEqual(["bucket-refuses-overflow", "make-buckets-counts", "split-evenly-existing"]);
    const golden = readFileSync(task.hidden.goldenPatch, "utf8");
    expect(golden).toMatch(/^diff --git a\/mini\/bucket\.py b\/mini\/bucket\.py$/m);
    expect(golden).not.toMatch(/tests\/test_bucket\.py/);
    const probes = readFileSync(join(task.hidden.probesDir, "test_probes.py"), "utf8");
    expect(probes).toMatch(/@pytest\.mark\.probe\(promise="make-buckets-counts", kind="state"\)\ndef test_make_buckets_counts\(\):\n {4}pytest\.fail\("TODO\(author\)/);
    const hollow = readFileSync(task.hidden.hollowPatch!, "utf8");
    expect(hollow).toMatch(/raise NotImplementedError\("make_buckets"\)/);
    expect(hollow).toMatch(/raise NotImplementedError\("Bucket\.add"\)/);
    expect(hollow).not.toMatch(/^\+\+\+ b\/tests\//m);
    // The hollow applies to base and is not golden.
    const ws = join(scratch, "apply");
    execFileSync("git", ["clone", "-q", repo.dir, ws]);
    execFileSync("git", ["-C", ws, "checkout", "-q", repo.sha.root]);
    execFileSync("git", ["-C", ws, "apply", task.hidden.hollowPatch!]);
    expect(readFileSync(join(ws, "mini", "bucket.py"), "utf8")).toMatch(/def make_buckets\(sizes, capacity\):\n {4}"""Splits parameter sizes into buckets of at most capacity elements \(in order\)\."""\n {4}raise NotImplementedError/);
  });

  it("the static half of task check passes in-process too, and names the contract it checked", async () => {
    const task = loadGraderTask("mini-buckets", join(scratch, "tasks"));
    const report = await checkTaskStatic({ task, outDir: join(scratch, "check"), sandboxFactory: () => Promise.reject(new Error("not used")) });
    expect(report.findings.filter((f) => f.level === "error")).toEqual([]);
    expect(report.passed).toBe(true);
    expect(report.stage).toBe("static");
    expect(report.contract.map((c) => c.name).sort()).toEqual(expect.arrayContaining(["Bucket", "make_buckets"]));
    expect(report.contract.every((c) => c.in_prompt)).toBe(true);
    expect(report.coverage.map((c) => c.probes.length)).toEqual([1, 1, 1]);
  });

  it("refuses a PR without tests, an existing folder and a bad id, each in one line (exit 2), and leaves nothing behind", () => {
    const noTests = cli(["task", "new", "--repo", repo.dir, "--base", repo.sha.bucketMerge, "--merge", repo.sha.util, "--id", "mini-util", "--url", URL, "--tasks-dir", join(scratch, "tasks")]);
    expect(noTests.status).toBe(2);
    expect(noTests.stderr.trim().split("\n").pop()).toMatch(/^infradev: task new: [0-9a-f]{12} changes no test file against [0-9a-f]{12}/);
    expect(existsSync(join(scratch, "tasks", "mini-util"))).toBe(false);
    const again = cli(["task", "new", "--repo", repo.dir, "--base", repo.sha.root, "--merge", repo.sha.bucketMerge, "--id", "mini-buckets", "--url", URL, "--tasks-dir", join(scratch, "tasks")]);
    expect(again.status).toBe(2);
    expect(again.stderr).toMatch(/mini-buckets already exists/);
    const badId = cli(["task", "new", "--repo", repo.dir, "--base", repo.sha.root, "--merge", repo.sha.bucketMerge, "--id", "Bad_Id", "--url", URL]);
    expect(badId.status).toBe(2);
    expect(badId.stderr).toMatch(/--id "Bad_Id": expected lowercase letters, digits and '-'/);
  });
});
