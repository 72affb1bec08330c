import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PathOutsideRootError, isPathInside, resolveInside } from "../../src/lib/path-validation.js";

describe("isPathInside", () => {
  it("accepts the root and paths below it, rejects siblings that share a prefix", () => {
    expect(isPathInside("/a/b", "/a/b")).toBe(true);
    expect(isPathInside("/a/b", "/a/b/c/d")).toBe(true);
    expect(isPathInside("/a/b", "/a/bc")).toBe(false);
    expect(isPathInside("/a/b", "/a")).toBe(false);
    expect(isPathInside("/a/b", "/a/b/../c")).toBe(false);
    expect(isPathInside("/a/b", "/a/b/..c")).toBe(true);
  });
});

describe("resolveInside", () => {
  let base: string;
  let root: string;
  let outside: string;

  beforeAll(() => {
    base = realpathSync(mkdtempSync(join(tmpdir(), "infradev-pathval-")));
    root = join(base, "root");
    outside = join(base, "outside");
    mkdirSync(join(root, "src", "pkg"), { recursive: true });
    mkdirSync(outside);
    writeFileSync(join(root, "src", "pkg", "mod.py"), "x = 1\n");
    writeFileSync(join(outside, "secret.txt"), "secret\n");
    symlinkSync(outside, join(root, "escape"));
    symlinkSync(join(outside, "secret.txt"), join(root, "secret-link"));
    symlinkSync(join(root, "src"), join(root, "inner-link"));
    symlinkSync(join(outside, "not-yet"), join(root, "dangling"));
  });
  afterAll(() => rmSync(base, { recursive: true, force: true }));

  it("resolves relative and absolute paths inside the root", () => {
    expect(resolveInside(root, "src/pkg/mod.py")).toBe(join(root, "src", "pkg", "mod.py"));
    expect(resolveInside(root, join(root, "src"))).toBe(join(root, "src"));
    expect(resolveInside(root, ".")).toBe(root);
    expect(resolveInside(root, "src/../src/pkg")).toBe(join(root, "src", "pkg"));
  });

  it("accepts a path that does not exist yet when its parent is inside", () => {
    expect(resolveInside(root, "src/new/deeper/file.py")).toBe(join(root, "src", "new", "deeper", "file.py"));
  });

  it("follows a symlink that stays inside the root", () => {
    expect(resolveInside(root, "inner-link/pkg/mod.py")).toBe(join(root, "src", "pkg", "mod.py"));
  });

  it("rejects NUL bytes", () => {
    expect(() => resolveInside(root, "src\0/x")).toThrow(/NUL/);
  });

  it("rejects ../ escapes and absolute paths elsewhere", () => {
    expect(() => resolveInside(root, "../outside/secret.txt")).toThrow(PathOutsideRootError);
    expect(() => resolveInside(root, "src/../../outside")).toThrow(/outside the root/);
    expect(() => resolveInside(root, "/etc/passwd")).toThrow(PathOutsideRootError);
    expect(() => resolveInside(root, `${root}-sibling/x`)).toThrow(PathOutsideRootError);
  });

  it("rejects symlinks that lead outside, for existing and new paths", () => {
    expect(() => resolveInside(root, "escape/secret.txt")).toThrow(/symlink/);
    expect(() => resolveInside(root, "secret-link")).toThrow(/symlink/);
    expect(() => resolveInside(root, "escape/new-file.txt")).toThrow(/symlink/);
  });

  it("rejects a dangling symlink (a write through it would land outside)", () => {
    expect(() => resolveInside(root, "dangling")).toThrow(/dangling symlink/);
    expect(() => resolveInside(root, "dangling/child")).toThrow(/dangling symlink/);
  });

  it("rejects a root that does not exist or is relative", () => {
    expect(() => resolveInside(join(base, "missing"), "x")).toThrow(/root does not exist/);
    expect(() => resolveInside("relative/root", "x")).toThrow(/not an absolute path/);
  });
});
