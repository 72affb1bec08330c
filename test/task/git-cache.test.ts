import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../../src/lib/paths.js";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";
import { createSnapshot, importBundle, mirrorDirFor } from "../../src/task/public/snapshot.js";
import { deriveGitParts } from "../../src/task/hidden/golden.js";
import { droppedTestFiles } from "../../src/grader/check/task-check.js";

/**
 * The git cache seeded from a bundle (no network), and the workspace of a git-sourced task built
 * from it: base only. Real objects: the Megatron-LM bundle of PR #3812 (../shared/upstream).
 */

const BUNDLE = resolve(packageRoot(), "..", "shared", "upstream", "megatron-lm-pr3812.bundle");
const URL = "https://github.com/NVIDIA/Megatron-LM.git";
const BASE = "40627d00d96cef74aceab35e0e3c170e900f3aff";
const MERGE = "55b8111ad84051cd0e2106ad1f5ab35fa2ab98f1";
const TASK = "megatron-param-layout";
const tsx = join(packageRoot(), "node_modules", ".bin", "tsx");
const cli = (args: string[], env: NodeJS.ProcessEnv) => spawnSync(tsx, [join(packageRoot(), "src", "cli", "main.ts"), ...args], { encoding: "utf8", env: { ...process.env, ...env } });
const git = (dir: string, args: string[]) => execFileSync("git", ["-C", dir, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
const gitOk = (dir: string, args: string[]) => spawnSync("git", ["-C", dir, ...args], { stdio: "ignore" }).status === 0;

let scratch: string;
const saved = process.env.INFRADEV_GIT_CACHE;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), "infradev-git-cache-"));
  process.env.INFRADEV_GIT_CACHE = join(scratch, "cache");
});
afterAll(() => {
  if (saved === undefined) delete process.env.INFRADEV_GIT_CACHE;
  else process.env.INFRADEV_GIT_CACHE = saved;
  rmSync(scratch, { recursive: true, force: true });
});

describe("tasks cache import", () => {
  it("needs the upstream bundle (../shared/upstream from the project root)", () => {
    expect(existsSync(BUNDLE), `missing ${BUNDLE}`).toBe(true);
  });

  it("refuses a cut bundle without its shallow boundary, and bad arguments, in one line", async () => {
    await expect(importBundle(BUNDLE, URL)).rejects.toThrow(/import into .* failed: .*--shallow/);
    expect(existsSync(mirrorDirFor(URL))).toBe(false); // the half-built mirror is gone
    const env = { INFRADEV_GIT_CACHE: join(scratch, "cli-cache") };
    const bad = cli(["tasks", "cache", "import", BUNDLE, "--url", URL, "--shallow", "abc"], env);
    expect(bad.status).toBe(2);
    expect(bad.stderr.trim().split("\n")).toHaveLength(1);
    expect(bad.stderr).toMatch(/--shallow: expected a full 40-hex commit sha, got "abc"/);
    const missing = cli(["tasks", "cache", "import", join(scratch, "nope.bundle"), "--url", URL], env);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/nope\.bundle: no such file/);
  });

  it("seeds the mirror of the URL from the bundle through the CLI, shallow at base", () => {
    const r = cli(["tasks", "cache", "import", BUNDLE, "--url", URL, "--shallow", BASE, "--json"], {});
    expect(r.status, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { mirror: string; created: boolean; refs: string[]; shallow: string };
    expect(out.mirror).toBe(mirrorDirFor(URL));
    expect(out.created).toBe(true);
    expect(out.refs.sort()).toEqual([`${BASE} refs/tags/base`, `${MERGE} refs/tags/merge`]);
    expect(readFileSync(join(out.mirror, "shallow"), "utf8").trim()).toBe(BASE);
    expect(git(out.mirror, ["cat-file", "-t", MERGE]).trim()).toBe("commit");
    // A second import fetches into the same mirror (nothing new) instead of failing.
    const again = cli(["tasks", "cache", "import", BUNDLE, "--url", URL, "--shallow", BASE], {});
    expect(again.status, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/^updated /);
  });
});

describe("a git-sourced task from the cache", () => {
  it("builds a workspace that holds base and nothing the PR added", async () => {
    const ws = join(scratch, "ws");
    const snap = await createSnapshot(loadPublicTask(TASK), ws);
    expect(snap.baseCommit).toBe(BASE);
    expect(git(ws, ["log", "--format=%H"]).trim()).toBe(BASE); // shallow at base: log works, one commit
    expect(gitOk(ws, ["cat-file", "-e", MERGE])).toBe(false);
    expect(git(ws, ["for-each-ref"]).trim()).toBe("");
    expect(existsSync(join(ws, ".git", "packed-refs")) ? readFileSync(join(ws, ".git", "packed-refs"), "utf8") : "").not.toContain(MERGE);
    expect(existsSync(join(ws, ".git", "objects", "info", "alternates"))).toBe(false);
    expect(existsSync(join(ws, ".git", "FETCH_HEAD"))).toBe(false);
    // Every blob that only the merge commit has is absent (the golden patch and the post-PR tests).
    const mirror = mirrorDirFor(URL);
    const added = git(mirror, ["diff", "--raw", "--no-abbrev", "--no-renames", BASE, MERGE])
      .split("\n")
      .filter(Boolean)
      .map((l) => l.split(" ")[3]!)
      .filter((sha) => !/^0+$/.test(sha));
    expect(added.length).toBeGreaterThanOrEqual(8);
    for (const sha of added) expect(gitOk(ws, ["cat-file", "-e", sha]), `blob ${sha} of merge is in the workspace`).toBe(false);
    expect(git(ws, ["status", "--porcelain"]).trim()).toBe("");
    expect(existsSync(join(ws, "megatron", "core", "optimizer", "param_layout.py"))).toBe(false);
  });

  it("derives the golden patch (outside the test dirs) and merge's tests from the mirror", async () => {
    const task = loadGraderTask(TASK);
    const golden = readFileSync(task.hidden.goldenPatch, "utf8");
    const files = [...golden.matchAll(/^diff --git a\/(\S+) /gm)].map((m) => m[1]);
    expect(files).toEqual([
      "megatron/core/distributed/distributed_data_parallel.py",
      "megatron/core/distributed/param_and_grad_buffer.py",
      "megatron/core/optimizer/distrib_optimizer.py",
      "megatron/core/optimizer/param_layout.py",
      "megatron/training/training.py",
    ]);
    expect(existsSync(join(task.hidden.testsDir, "tests/unit_tests/distributed/test_param_layout.py"))).toBe(true);
    expect(readFileSync(join(task.hidden.testsDir, "tests/unit_tests/dist_checkpointing/test_optimizer.py"), "utf8")).toContain("megatron.core.optimizer.param_layout.math.lcm");
    // Derived once: a second load reads the same files.
    expect(deriveGitParts({ url: URL, base: BASE, merge: MERGE }, task.fullSpec.test_dirs, "x").goldenPatch).toBe(task.hidden.goldenPatch);
    // The golden patch applies to the base workspace as it is.
    const ws = join(scratch, "ws-apply");
    await createSnapshot(loadPublicTask(TASK), ws);
    expect(spawnSync("git", ["-C", ws, "apply", "--check", task.hidden.goldenPatch], { encoding: "utf8" }).stderr).toBe("");
    // The PR deletes no test file: nothing of base's test dirs is dropped (listed from base's tree).
    expect(droppedTestFiles(task)).toEqual([]);
  });

  it("says how to seed the cache when a commit is missing from it", () => {
    process.env.INFRADEV_GIT_CACHE = join(scratch, "empty-cache");
    try {
      // Loading needs no cache (listing, refusing, reading promises); the derived parts do.
      const task = loadGraderTask(TASK);
      expect(task.hidden.promises?.length).toBeGreaterThan(0);
      expect(() => task.hidden.goldenPatch).toThrow(/source\.base: commit 40627d0\w+ is not in the git cache .*infradev tasks cache import <bundle> --url https:\/\/github\.com\/NVIDIA\/Megatron-LM\.git/);
    } finally {
      process.env.INFRADEV_GIT_CACHE = join(scratch, "cache");
    }
  });

  it("a task that carries its upstream bundle (hidden/upstream/) seeds an empty cache itself, shallow at base, and builds its workspace offline", async () => {
    // verl-grpo-vectorized keeps verl#3635's commits in hidden/upstream/verl-grpo-vectorized.bundle.
    process.env.INFRADEV_GIT_CACHE = join(scratch, "self-seeded");
    try {
      const task = loadGraderTask("verl-grpo-vectorized");
      const src = task.fullSpec.source as { url: string; base: string; merge: string };
      expect(existsSync(mirrorDirFor(src.url))).toBe(false);
      const golden = readFileSync(task.hidden.goldenPatch, "utf8");
      expect(golden).toMatch(/^diff --git a\/verl\/utils\/groupwise\.py b\/verl\/utils\/groupwise\.py$/m);
      expect(golden).not.toMatch(/^diff --git a\/tests\//m); // the tests stay out of golden
      expect(existsSync(join(task.hidden.testsDir, "tests", "utils", "test_groupwise.py"))).toBe(true);
      const mirror = mirrorDirFor(src.url);
      expect(readFileSync(join(mirror, "shallow"), "utf8").trim()).toBe(src.base);
      // The agent's side needs only base: its workspace comes from the same mirror, with nothing of merge.
      const ws = join(scratch, "verl-ws");
      await createSnapshot(loadPublicTask("verl-grpo-vectorized"), ws);
      expect(git(ws, ["rev-parse", "HEAD"]).trim()).toBe(src.base);
      expect(gitOk(ws, ["cat-file", "-e", src.merge])).toBe(false);
      expect(existsSync(join(ws, "verl", "utils", "groupwise.py"))).toBe(false);
    } finally {
      process.env.INFRADEV_GIT_CACHE = join(scratch, "cache");
    }
  });
});
