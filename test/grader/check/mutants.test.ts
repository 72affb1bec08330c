import { TEST_FIXTURES } from "../../helpers/paths.js";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { execa } from "execa";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { applyPatch } from "../../../src/grader/workspace/apply.js";
import { generateHollow, generateMutants, type Mutant, type MutantOperator } from "../../../src/grader/check/mutants.js";
import { collectiveTimeouts, interfaceContract, promptLeaks, withTaskTrees } from "../../../src/grader/check/task-analysis.js";
import { freshWorkspace, removeWorkspace, type GradingWorkspace } from "../../../src/grader/workspace/workspace.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const ALL: MutantOperator[] = ["arith", "cmp", "boundary", "bool", "not", "const", "drop-stmt", "drop-kw", "negate", "early-return"];

async function git(cwd: string, args: string[]): Promise<string> {
  const r = await execa("git", args, { cwd, reject: false });
  if (r.exitCode !== 0) throw new Error(`git ${args.join(" ")}: ${r.stderr}`);
  return r.stdout;
}

/**
 * A checker repo independent of the code under test: base, plus a commit holding the golden patch
 * applied, so that `git diff <golden>` after applying a mutant's patch shows what the mutant changes.
 */
async function checker(task: GraderTask): Promise<{ ws: GradingWorkspace; golden: string }> {
  const ws = await freshWorkspace(task);
  const r = await applyPatch(ws.repoDir, task.hidden.goldenPatch, ws.baseCommit);
  if (!r.applied) throw new Error(r.reason);
  await git(ws.repoDir, ["add", "-A"]);
  await git(ws.repoDir, ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--no-verify", "-m", "golden"]);
  const golden = (await git(ws.repoDir, ["rev-parse", "HEAD"])).trim();
  await git(ws.repoDir, ["reset", "-q", "--hard", ws.baseCommit]);
  return { ws, golden };
}

/** Files the applied patch leaves different from golden, and the golden-side lines of each hunk. */
async function differenceFromGolden(ws: GradingWorkspace, golden: string, patchFile: string): Promise<{ files: string[]; hunks: Array<[number, number]> }> {
  await git(ws.repoDir, ["apply", "--check", patchFile]);
  await git(ws.repoDir, ["apply", "--index", patchFile]);
  try {
    const diff = await git(ws.repoDir, ["-c", "core.quotePath=false", "diff", "-U0", "--no-color", "--no-renames", golden]);
    const files = [...diff.matchAll(/^diff --git a\/.* b\/(.*)$/gm)].map((m) => m[1]!);
    const hunks = [...diff.matchAll(/^@@ -(\d+)(?:,(\d+))? /gm)].map((m): [number, number] => [Number(m[1]), m[2] === undefined ? 1 : Number(m[2])]);
    return { files, hunks };
  } finally {
    await git(ws.repoDir, ["reset", "-q", "--hard", ws.baseCommit]);
  }
}

const count = (ms: Mutant[]) => Object.fromEntries(ALL.map((op) => [op, ms.filter((m) => m.operator === op).length]));

describe.each([
  { id: "tiny-mean", root: FIXTURES, mustHave: ["arith", "drop-stmt", "drop-kw", "early-return"] as MutantOperator[] },
  { id: "grad-bucketing", root: undefined, mustHave: ALL },
])("generateMutants on $id", ({ id, root, mustHave }) => {
  let task: GraderTask;
  let scratch: string;
  let first: Awaited<ReturnType<typeof generateMutants>>;
  let second: Awaited<ReturnType<typeof generateMutants>>;
  let check: Awaited<ReturnType<typeof checker>>;
  let seconds = 0;
  beforeAll(async () => {
    task = loadGraderTask(id, root);
    scratch = mkdtempSync(join(tmpdir(), "infradev-mutants-test-"));
    const t0 = Date.now();
    first = await generateMutants(task, { workDir: scratch, python: "/usr/bin/python3" });
    seconds = (Date.now() - t0) / 1000;
    second = await generateMutants(task, { workDir: scratch, python: "/usr/bin/python3", seed: 3 });
    check = await checker(task);
    console.log(`${id}: ${first.mutants.length} mutants in ${seconds.toFixed(1)} s; per operator ${JSON.stringify(count(first.mutants))}; skipped ${JSON.stringify(first.skipped)}`);
  });
  afterAll(() => {
    if (check) removeWorkspace(check.ws);
    rmSync(scratch, { recursive: true, force: true });
  });

  it("has mutants of every operator the golden code allows, none in the test dirs", () => {
    for (const op of mustHave) expect(count(first.mutants)[op], op).toBeGreaterThan(0);
    expect(first.mutants.filter((m) => m.file.startsWith("tests/") || !m.file.endsWith(".py"))).toEqual([]);
  });

  it("ids are unique and stable across calls (the seed only reorders)", () => {
    const ids = first.mutants.map((m) => m.id);
    expect(new Set(ids).size).toBe(ids.length);
    for (const i of ids) expect(i).toMatch(/^[\w/.-]+\.py:(<module>|[\w.]+):[a-z-]+#\d+$/);
    const again = new Map(second.mutants.map((m) => [m.id, m.patch]));
    expect([...again.keys()].sort()).toEqual([...ids].sort());
    for (const m of first.mutants) expect(again.get(m.id), m.id).toBe(m.patch);
    if (ids.length > 20) expect(second.mutants.map((m) => m.id)).not.toEqual(ids);
  });

  it("every patch applies to base and differs from golden in its one spot only", async () => {
    for (const m of first.mutants) {
      const file = join(scratch, "m.patch");
      writeFileSync(file, m.patch);
      const d = await differenceFromGolden(check.ws, check.golden, file);
      expect(d.files, m.id).toEqual([m.file]);
      expect(d.hunks.length, m.id).toBeGreaterThan(0);
      expect(m.change, m.id).toMatch(new RegExp(`^--- golden/${m.file}\n\\+\\+\\+ mutant/${m.file}\n@@ `));
      for (const [start, n] of d.hunks) {
        if (n === 0) {
          // a pure insertion (early-return; dup-collective's second copy of the call) goes after golden
          // line `start`, inside the function
          expect(["early-return", "dup-collective"], m.id).toContain(m.operator);
          expect(start, m.id).toBeGreaterThanOrEqual(m.line);
        } else {
          expect(start, m.id).toBeGreaterThanOrEqual(m.line);
          expect(start + n - 1, m.id).toBeLessThanOrEqual(m.endLine);
        }
      }
    }
  }, 300_000);

  if (id === "grad-bucketing") {
    it("drops group= and the all-reduce in the bucket reducer", () => {
      const inReduce = first.mutants.filter((m) => m.id.startsWith("nanoinfra/bucketing.py:GradBucketReducer.reduce:"));
      expect(inReduce.some((m) => m.operator === "drop-kw" && m.original.includes("group=self.process_group"))).toBe(true);
      expect(inReduce.some((m) => m.operator === "drop-stmt" && m.original.startsWith("dist.all_reduce("))).toBe(true);
      expect(first.mutants.some((m) => m.description === "line 42: '>' -> '>='")).toBe(true);
    });
  }
});

describe("generateHollow", () => {
  let scratch: string;
  beforeAll(() => {
    scratch = mkdtempSync(join(tmpdir(), "infradev-hollow-test-"));
  });
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  async function appliedFile(task: GraderTask, patch: string, rel: string): Promise<string> {
    const ws = await freshWorkspace(task);
    try {
      const file = join(scratch, `${task.id}-${Math.random().toString(36).slice(2)}.patch`);
      writeFileSync(file, patch);
      await git(ws.repoDir, ["apply", "--check", file]);
      await git(ws.repoDir, ["apply", file]);
      return readFileSync(join(ws.repoDir, rel), "utf8");
    } finally {
      removeWorkspace(ws);
    }
  }

  it("tiny-mean: the generated hollow patch gives the same ops.py as the hand-written one", async () => {
    const task = loadGraderTask("tiny-mean", FIXTURES);
    const h = await generateHollow(task, { workDir: scratch, python: "/usr/bin/python3" });
    expect(h.stubbed).toEqual(["tinyinfra/ops.py:all_mean"]);
    expect(h.reverted).toEqual([]);
    expect(h.notReverted).toEqual([]);
    expect(h.patch).not.toContain("tests/");
    const ours = await appliedFile(task, h.patch, "tinyinfra/ops.py");
    const theirs = await appliedFile(task, readFileSync(task.hidden.hollowPatch!, "utf8"), "tinyinfra/ops.py");
    expect(ours).toBe(theirs);
  });

  it("grad-bucketing: stubs the GradBucket methods and reverts the changed ones; the patch applies", async () => {
    const task = loadGraderTask("grad-bucketing");
    const h = await generateHollow(task, { workDir: scratch, python: "/usr/bin/python3" });
    for (const m of ["__init__", "pack", "unpack", "nbytes"]) expect(h.stubbed).toContain(`nanoinfra/bucketing.py:GradBucket.${m}`);
    expect(h.reverted).toContain("nanoinfra/parallel.py:DataParallel.sync_gradients");
    const bucketing = await appliedFile(task, h.patch, "nanoinfra/bucketing.py");
    expect(bucketing).toContain('raise NotImplementedError("GradBucket.pack")');
    expect(bucketing).not.toContain("view.copy_(");
    const parallel = await appliedFile(task, h.patch, "nanoinfra/parallel.py");
    expect(parallel).toContain("dist.all_reduce(param.grad, group=self.process_group)"); // base's per-parameter sync
  });
});

describe("task analyses on grad-bucketing (one pair of trees)", () => {
  it("contract, leaks and collective timeouts", async () => {
    const task = loadGraderTask("grad-bucketing");
    const scratch = mkdtempSync(join(tmpdir(), "infradev-analysis-test-"));
    try {
      const opts = { workDir: scratch, python: "/usr/bin/python3" };
      await withTaskTrees(task, opts, async (trees) => {
        const contract = await interfaceContract(task, { ...opts, trees });
        const noSync = contract.find((s) => s.qualname === "nanoinfra.parallel.DataParallel.no_sync");
        expect(noSync?.kind).toBe("method");
        expect(noSync?.referencedAt.some((r) => r.startsWith("tests/"))).toBe(true);
        expect(contract.every((s) => s.referencedAt.length > 0 && s.referencedAt.length <= 5)).toBe(true);
        const leaks = await promptLeaks(task, { ...opts, trees });
        for (const l of leaks) expect(l.lines === 1 ? l.text.length >= 80 : l.lines >= 3).toBe(true);
        const timeouts = await collectiveTimeouts(task, { ...opts, trees });
        expect(timeouts).toContainEqual(expect.objectContaining({ file: "tests/conftest.py", seconds: 120 }));
        expect(timeouts).toContainEqual(expect.objectContaining({ file: "nanoinfra/runtime.py", seconds: 300, assumes: "the default of timeout_sec" }));
      });
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});

describe("the helper's interpreter", () => {
  it("names the interpreter that does not run, and leaves no tree behind", async () => {
    const task = loadGraderTask("tiny-mean", FIXTURES);
    const scratch = mkdtempSync(join(tmpdir(), "infradev-analysis-test-"));
    try {
      await expect(generateMutants(task, { workDir: scratch, python: "/nonexistent/python3.11" })).rejects.toThrow(
        /cannot run the Python interpreter "\/nonexistent\/python3\.11".*INFRADEV_HOST_PYTHON/,
      );
      for (const side of ["base", "post"]) expect(readdirSync(join(scratch, "trees", side)), side).toEqual([]);
    } finally {
      rmSync(scratch, { recursive: true, force: true });
    }
  });
});
