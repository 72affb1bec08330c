/** lib/safe-fs.ts: the host's file operations on paths a sandbox may control. */
import { execFileSync } from "node:child_process";
import { closeSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { UnsafePathError, createExclusive, isRealFolderInside, mkdirInside, readRegularFile } from "../../src/lib/safe-fs.js";

const dir = mkdtempSync(join(tmpdir(), "infradev-safefs-"));
const outside = join(dir, "outside");
mkdirSync(outside);
writeFileSync(join(outside, "secret"), "host secret\n");
const root = join(dir, "root");
mkdirSync(root);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("readRegularFile", () => {
  it("reads a regular file up to the cap", () => {
    writeFileSync(join(root, "f.txt"), "0123456789");
    expect(readRegularFile(join(root, "f.txt"), 4)).toMatchObject({ truncated: true, size: 10 });
    expect(readRegularFile(join(root, "f.txt"), 4).data.toString()).toBe("0123");
    expect(readRegularFile(join(root, "f.txt"), 100).data.toString()).toBe("0123456789");
  });

  it("refuses a symlink, a FIFO (without blocking), a folder and a device", () => {
    symlinkSync(join(outside, "secret"), join(root, "link.txt"));
    execFileSync("mkfifo", [join(root, "fifo")]);
    const t0 = Date.now();
    expect(() => readRegularFile(join(root, "link.txt"), 100)).toThrow(UnsafePathError);
    expect(() => readRegularFile(join(root, "fifo"), 100)).toThrow(/a FIFO/);
    expect(() => readRegularFile(root, 100)).toThrow(/a folder/);
    expect(() => readRegularFile("/dev/zero", 100)).toThrow(/a device/);
    expect(Date.now() - t0).toBeLessThan(1000);
  });
});

describe("createExclusive", () => {
  it("creates a new file, and refuses an existing name or a planted link (nothing written through it)", () => {
    const { fd, path } = createExclusive(root, "new.log", 0o600);
    writeSync(fd, "ok");
    closeSync(fd);
    expect(readFileSync(path, "utf8")).toBe("ok");
    expect(lstatSync(path).mode & 0o777).toBe(0o600);
    expect(() => createExclusive(root, "new.log")).toThrow(/EEXIST/);
    symlinkSync(join(outside, "planted"), join(root, "planted.log"));
    expect(() => createExclusive(root, "planted.log")).toThrow();
    expect(existsSync(join(outside, "planted"))).toBe(false);
    expect(() => createExclusive(root, "../escape")).toThrow(UnsafePathError);
  });
});

describe("mkdirInside", () => {
  it("makes each component a real folder and refuses a link on the way (or replaces it when asked)", () => {
    expect(mkdirInside(root, "a/b/c")).toBe(join(root, "a", "b", "c"));
    expect(isRealFolderInside(root, "a/b/c")).toBe(true);
    symlinkSync(outside, join(root, "l"));
    expect(() => mkdirInside(root, "l/x")).toThrow(/symbolic link/);
    expect(existsSync(join(outside, "x"))).toBe(false);
    expect(isRealFolderInside(root, "l")).toBe(false);
    mkdirInside(root, "l/x", { replace: true });
    expect(lstatSync(join(root, "l")).isDirectory()).toBe(true);
    expect(existsSync(join(outside, "x"))).toBe(false);
    expect(readFileSync(join(outside, "secret"), "utf8")).toBe("host secret\n");
    for (const bad of ["../x", "/abs", "a/../b", "a//b", "", "a\0b"]) expect(() => mkdirInside(root, bad)).toThrow(UnsafePathError);
  });
});
