import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { createSnapshot, diffAgainstBase } from "../../src/task/public/snapshot.js";

let root: string;
beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-snap-"));
  const t = join(root, "tasks", "toy");
  mkdirSync(join(t, "repo", "pkg"), { recursive: true });
  writeFileSync(join(t, "repo", "pkg", "a.py"), "x = 1\n");
  writeFileSync(join(t, "prompt.md"), "p\n");
  writeFileSync(
    join(t, "task.yaml"),
    stringify({ schema_version: 1, id: "toy", title: "t", category: "rl", type: "bugfix", source: { kind: "dir", path: "repo" }, test_dirs: ["tests"], ranks: 1, timeout_sec: 5 }),
  );
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

it("creates a git workspace at base whose diff is exactly the change, new files and our logs excluded", async () => {
  const task = loadPublicTask("toy", join(root, "tasks"));
  const ws = join(root, "ws");
  const snap = await createSnapshot(task, ws);
  expect(snap.baseCommit).toMatch(/^[0-9a-f]{40}$/);
  expect(await diffAgainstBase(ws)).toBe("");
  writeFileSync(join(ws, "pkg", "a.py"), "x = 2\n");
  writeFileSync(join(ws, "pkg", "new.py"), "y = 3\n");
  mkdirSync(join(ws, ".infradev", "logs"), { recursive: true });
  writeFileSync(join(ws, ".infradev", "logs", "l.log"), "noise\n");
  const diff = await diffAgainstBase(ws);
  expect(diff).toContain("-x = 1\n+x = 2");
  expect(diff).toContain("+++ b/pkg/new.py");
  expect(diff).not.toContain(".infradev");
  await expect(createSnapshot(task, ws)).rejects.toThrow(/already exists and is not empty/);
});

describe("git sources", () => {
  // A real upstream repository (a local path; the fetch code is the same for https): base, then the
  // PR that the golden patch comes from, a tag on it and a later branch.
  const run = (cwd: string, ...args: string[]) => execFileSync("git", ["-c", "user.name=u", "-c", "user.email=u@x", "-c", "init.defaultBranch=main", ...args], { cwd, encoding: "utf8" }).trim();
  let upstream: string;
  let base: string;
  let merge: string;
  let cache: string;
  let savedCache: string | undefined;

  beforeEach(() => {
    savedCache = process.env.INFRADEV_GIT_CACHE;
    cache = join(root, "git-cache");
    process.env.INFRADEV_GIT_CACHE = cache;
    upstream = join(root, "upstream");
    mkdirSync(join(upstream, "pkg"), { recursive: true });
    run(upstream, "init", "-q");
    writeFileSync(join(upstream, "pkg", "a.py"), "x = 1\n");
    run(upstream, "add", "-A");
    run(upstream, "commit", "-qm", "before");
    base = run(upstream, "rev-parse", "HEAD");
    writeFileSync(join(upstream, "pkg", "a.py"), "x = 'THE-ANSWER'\n");
    writeFileSync(join(upstream, "pkg", "feature.py"), "SECRET = 'golden'\n");
    run(upstream, "add", "-A");
    run(upstream, "commit", "-qm", "the PR");
    merge = run(upstream, "rev-parse", "HEAD");
    run(upstream, "tag", "v1");
    run(upstream, "checkout", "-qb", "later");
    const t = join(root, "tasks", "gitty");
    mkdirSync(t, { recursive: true });
    writeFileSync(join(t, "prompt.md"), "p\n");
    writeFileSync(
      join(t, "task.yaml"),
      stringify({ schema_version: 1, id: "gitty", title: "t", category: "inference", type: "feature", source: { kind: "git", url: upstream, base, merge }, test_dirs: ["tests"], ranks: 1, timeout_sec: 5 }),
    );
  });
  afterEach(() => {
    if (savedCache === undefined) delete process.env.INFRADEV_GIT_CACHE;
    else process.env.INFRADEV_GIT_CACHE = savedCache;
  });

  it("checks out base with its history and nothing after it: the PR is not reachable, not even as an object", async () => {
    const task = loadPublicTask("gitty", join(root, "tasks"));
    expect(JSON.stringify(task.spec)).not.toContain(merge);
    const ws = join(root, "ws");
    const snap = await createSnapshot(task, ws);
    expect(snap.baseCommit).toBe(base);
    expect(readFileSync(join(ws, "pkg", "a.py"), "utf8")).toBe("x = 1\n");
    expect(existsSync(join(ws, "pkg", "feature.py"))).toBe(false);
    expect(run(ws, "log", "--all", "--format=%s")).toBe("before");
    expect(run(ws, "remote")).toBe("");
    expect(run(ws, "tag")).toBe("");
    expect(() => run(ws, "cat-file", "-e", merge)).toThrow();
    expect(run(ws, "rev-list", "--all", "--objects").split("\n").length).toBeLessThan(5);
    expect(readdirSync(join(ws, ".git"))).not.toContain("FETCH_HEAD");
    expect(await diffAgainstBase(ws)).toBe("");
    writeFileSync(join(ws, "pkg", "a.py"), "x = 2\n");
    expect(await diffAgainstBase(ws)).toContain("-x = 1\n+x = 2");
  });

  it("clones once into the cache, fetches again only for a base it lacks, and names a base that does not exist", async () => {
    const task = loadPublicTask("gitty", join(root, "tasks"));
    // Two sessions starting together on an empty cache: one mirror, two good workspaces.
    const said: string[] = [];
    const onProgress = (m: string) => said.push(m);
    const both = await Promise.all([createSnapshot(task, join(root, "ws1"), { onProgress }), createSnapshot(task, join(root, "ws1b"))]);
    expect(said).toEqual([expect.stringMatching(/^cloning .*upstream into .*git-cache \(first use/)]);
    expect(both.map((b) => b.baseCommit)).toEqual([base, base]);
    const mirrors = readdirSync(cache);
    expect(mirrors).toHaveLength(1);
    // The upstream moves on; a second session on the same base needs no fetch and still gets base.
    writeFileSync(join(upstream, "pkg", "b.py"), "z = 0\n");
    run(upstream, "add", "-A");
    run(upstream, "commit", "-qm", "after the cache");
    const newer = run(upstream, "rev-parse", "HEAD");
    await createSnapshot(task, join(root, "ws2"), { onProgress });
    expect(said).toHaveLength(1); // no clone, no fetch: base was in the mirror
    expect(readdirSync(cache)).toEqual(mirrors);
    expect(() => run(join(cache, mirrors[0]!), "cat-file", "-e", newer)).toThrow();
    // A task on the newer base makes the mirror fetch.
    const moved = { ...task, source: { kind: "git" as const, url: upstream, base: newer } };
    const s3 = await createSnapshot(moved, join(root, "ws3"), { onProgress });
    expect(said.at(-1)).toMatch(new RegExp(`^fetching .*: base ${newer} is not in the cached mirror yet$`));
    expect(s3.baseCommit).toBe(newer);
    expect(existsSync(join(root, "ws3", "pkg", "b.py"))).toBe(true);
    const missing = { ...task, source: { kind: "git" as const, url: upstream, base: "0123456789abcdef0123456789abcdef01234567" } };
    await expect(createSnapshot(missing, join(root, "ws4"))).rejects.toThrow(/base commit 0123456789abcdef0123456789abcdef01234567 is not in the repository/);
    const nowhere = { ...task, source: { kind: "git" as const, url: join(root, "no-such-repo"), base } };
    await expect(createSnapshot(nowhere, join(root, "ws5"))).rejects.toThrow(/no-such-repo: clone failed/);
    expect(readdirSync(cache).filter((n) => n.includes(".tmp-"))).toEqual([]);
  });
});
