import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { stringify } from "yaml";
import { TaskError } from "../../src/task/public/errors.js";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";

const GOOD = {
  schema_version: 1,
  id: "toy",
  title: "Toy task",
  category: "training",
  type: "performance",
  source: { kind: "dir", path: "repo" },
  test_dirs: ["tests"],
  ranks: 2,
  timeout_sec: 30,
};

let root: string;

function makeTask(spec: Record<string, unknown>, opts: { hidden?: boolean } = {}): void {
  const dir = join(root, "toy");
  mkdirSync(join(dir, "repo", "tests"), { recursive: true });
  writeFileSync(join(dir, "task.yaml"), stringify(spec));
  writeFileSync(join(dir, "prompt.md"), "# Do the thing\n");
  if (opts.hidden !== false) {
    mkdirSync(join(dir, "hidden", "tests", "tests"), { recursive: true });
    mkdirSync(join(dir, "hidden", "probes"), { recursive: true });
    mkdirSync(join(dir, "hidden", "adversarial"), { recursive: true });
    writeFileSync(join(dir, "hidden", "golden.patch"), "diff --git a/x b/x\n");
    writeFileSync(join(dir, "hidden", "adversarial", "sum.patch"), "diff --git a/x b/x\n");
    writeFileSync(
      join(dir, "hidden", "adversarial", "index.yaml"),
      stringify([{ name: "sum", patch: "sum.patch", breaks: ["averaged"], description: "sums" }]),
    );
  }
}

function loadError(spec: Record<string, unknown>): string {
  makeTask(spec);
  try {
    loadPublicTask("toy", root);
  } catch (e) {
    expect(e).toBeInstanceOf(TaskError);
    // Messages name the real task folder (here a temp folder), shown below as <root>.
    return (e as Error).message.replaceAll(`${root}/`, "<root>/");
  }
  throw new Error("expected the task to be rejected");
}

beforeEach(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-tasks-"));
});
afterEach(() => rmSync(root, { recursive: true, force: true }));

describe("task.yaml validation", () => {
  it("accepts a good task and fills defaults", () => {
    makeTask(GOOD);
    const t = loadPublicTask("toy", root);
    expect(t.spec.ranks).toBe(2);
    expect(t.spec.modes).toEqual({ default: {} });
    expect(t.spec.env.python).toBe("/usr/bin/python3");
    expect(t.prompt).toContain("Do the thing");
    expect(t.source).toEqual({ kind: "dir", dir: expect.stringContaining(join("toy", "repo")) });
  });

  it("names the file and field of a wrong type", () => {
    expect(loadError({ ...GOOD, ranks: "two" })).toBe('<root>/toy/task.yaml: ranks: expected number, got "two"');
  });

  it("names a bound that is violated", () => {
    expect(loadError({ ...GOOD, ranks: 0 })).toBe("<root>/toy/task.yaml: ranks: expected a number ≥ 1, got 0");
    expect(loadError({ ...GOOD, ranks: 1.5 })).toBe("<root>/toy/task.yaml: ranks: expected integer, got 1.5");
  });

  it("names a missing field", () => {
    const { title: _t, ...noTitle } = GOOD;
    expect(loadError(noTitle)).toBe("<root>/toy/task.yaml: title: required field missing (expected string)");
  });

  it("rejects unknown keys, also nested ones", () => {
    expect(loadError({ ...GOOD, rankz: 2 })).toBe('<root>/toy/task.yaml: (top level): unknown key "rankz" (not part of schema)');
    expect(loadError({ ...GOOD, source: { kind: "dir", path: "repo", extra: 1 } })).toBe(
      '<root>/toy/task.yaml: source: unknown key "extra" (not part of schema)',
    );
  });

  it("rejects a bad enum value with the allowed values", () => {
    expect(loadError({ ...GOOD, category: "serving" })).toBe(
      '<root>/toy/task.yaml: category: expected one of "training" | "inference" | "rl", got "serving"',
    );
  });

  it("rejects hidden paths that escape the task folder", () => {
    expect(loadError({ ...GOOD, hidden: { golden_patch: "../other/golden.patch" } })).toBe(
      '<root>/toy/task.yaml: hidden.golden_patch: must stay inside the task folder (no \'..\'), got "../other/golden.patch"',
    );
    expect(loadError({ ...GOOD, hidden: { probes: "/etc/probes" } })).toBe(
      '<root>/toy/task.yaml: hidden.probes: expected a relative path, got an absolute one, got "/etc/probes"',
    );
    expect(loadError({ ...GOOD, hidden: { probes: "repo/probes" } })).toBe(
      '<root>/toy/task.yaml: hidden.probes: must lie inside hidden.dir "hidden", got "repo/probes"',
    );
  });

  it("rejects a source snapshot that overlaps the hidden folder", () => {
    expect(loadError({ ...GOOD, source: { kind: "dir", path: "hidden" } })).toContain("source.path: the snapshot must not overlap hidden.dir");
  });

  it("rejects a source snapshot that is a symlink into hidden/", () => {
    makeTask({ ...GOOD, source: { kind: "dir", path: "snap" } });
    symlinkSync(join(root, "toy", "hidden"), join(root, "toy", "snap"));
    expect(() => loadPublicTask("toy", root)).toThrow(/source.path: resolves into hidden.dir/);
  });

  it("rejects an id that does not match the folder", () => {
    expect(loadError({ ...GOOD, id: "other" })).toBe('<root>/toy/task.yaml: id: expected the folder name "toy", got "other"');
  });

  it("rejects invalid YAML with the file name", () => {
    makeTask(GOOD);
    writeFileSync(join(root, "toy", "task.yaml"), "ranks: [unclosed\n");
    // The real folder of the task, not a tasks/<id> it does not live in.
    expect(() => loadPublicTask("toy", root)).toThrow(`${root}/toy/task.yaml: not valid YAML`);
  });

  it("lists known tasks for an unknown id", () => {
    makeTask(GOOD);
    expect(() => loadPublicTask("nope", root)).toThrow(/unknown task "nope".*known: toy/);
  });
});

describe("the two doors", () => {
  it("the public view works without hidden/ and exposes no hidden path", () => {
    makeTask(GOOD, { hidden: false });
    const t = loadPublicTask("toy", root);
    expect(JSON.stringify(t)).not.toContain("hidden");
    expect(() => loadGraderTask("toy", root)).toThrow(/hidden.golden_patch: "hidden\/golden.patch" does not exist/);
  });

  it("the grader view opens hidden parts and the adversarial index", () => {
    makeTask(GOOD);
    const g = loadGraderTask("toy", root);
    expect(g.hidden.goldenPatch).toMatch(/hidden\/golden.patch$/);
    expect(g.hidden.adversarial).toEqual([
      expect.objectContaining({ name: "sum", breaks: ["averaged"], patchPath: expect.stringMatching(/sum.patch$/) }),
    ]);
  });

  it("a malformed adversarial index names its file and field", () => {
    makeTask(GOOD);
    writeFileSync(join(root, "toy", "hidden", "adversarial", "index.yaml"), stringify([{ name: "sum", patch: "sum.patch", breaks: [] , description: "x"}]));
    expect(() => loadGraderTask("toy", root)).toThrow(`${root}/toy/hidden/adversarial/index.yaml: 0.breaks: expected array ≥ 1 items, got []`);
  });

  it("post-PR tests outside test_dirs are rejected", () => {
    makeTask(GOOD);
    mkdirSync(join(root, "toy", "hidden", "tests", "nanoinfra"));
    expect(() => loadGraderTask("toy", root)).toThrow(/hidden.tests: "nanoinfra" is not under any of test_dirs/);
  });
});
