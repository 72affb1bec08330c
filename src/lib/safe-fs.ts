/**
 * File operations for paths that code inside a sandbox may have created, replaced or linked (the
 * workspace, a session's /tmp, anything below them). The host must never follow a link planted
 * there, nor block on a FIFO, nor read an endless device: every open here refuses a symlink as the
 * last component (O_NOFOLLOW), never blocks (O_NONBLOCK), checks with fstat that what it opened is
 * a regular file, and reads a bounded number of bytes. Folders are created one component at a time
 * below a trusted root, each checked with lstat to be a real folder, never a link.
 *
 * The checks on the components above the last one are lstat checks, so a component swapped for a
 * link between the check and the use could still be followed; callers that need to exclude that
 * race keep such files where the sandbox cannot write at all (the logs folder, the run folder), and
 * use these helpers as the second line.
 */
import { closeSync, constants, fstatSync, lstatSync, mkdirSync, openSync, readSync, unlinkSync } from "node:fs";
import { isAbsolute, join, normalize, sep } from "node:path";

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_NONBLOCK, O_CLOEXEC } = constants as typeof constants & { O_CLOEXEC?: number };
const CLOEXEC = O_CLOEXEC ?? 0;

/** A path the host refused to follow or open (a link, a FIFO, a device, a folder where a file was expected...). */
export class UnsafePathError extends Error {
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super(`refusing ${path}: ${reason}`);
    this.name = "UnsafePathError";
  }
}

function kindOf(st: { isSymbolicLink(): boolean; isDirectory(): boolean; isFIFO(): boolean; isSocket(): boolean; isCharacterDevice(): boolean; isBlockDevice(): boolean }): string {
  if (st.isSymbolicLink()) return "a symbolic link";
  if (st.isDirectory()) return "a folder";
  if (st.isFIFO()) return "a FIFO";
  if (st.isSocket()) return "a socket";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "a device";
  return "not a regular file";
}

/** The relative path's components, or an error for an absolute path, `..`, `.`, an empty part or a NUL. */
export function safeRelativeParts(rel: string): string[] {
  if (rel.includes("\0")) throw new UnsafePathError(rel, "it contains a NUL byte");
  if (rel === "" || isAbsolute(rel)) throw new UnsafePathError(rel, "it must be a non-empty relative path");
  const parts = rel.split("/");
  for (const p of parts) {
    if (p === "" || p === "." || p === "..") throw new UnsafePathError(rel, `it must be normalised (no "", "." or ".." component)`);
  }
  return parts;
}

/**
 * Makes `root/rel` a real folder, creating missing components one at a time, each checked with
 * lstat: a component that exists as anything but a real folder (a link included) is refused — or,
 * with `replace`, unlinked and made a folder. `root` itself is trusted (the caller made it or chose
 * it). Returns the folder's path.
 */
export function mkdirInside(root: string, rel: string, opts: { mode?: number; replace?: boolean } = {}): string {
  if (!isAbsolute(root)) throw new UnsafePathError(root, "the root must be absolute");
  const mode = opts.mode ?? 0o755;
  let cur = normalize(root);
  for (const part of safeRelativeParts(rel)) {
    cur = join(cur, part);
    let st;
    try {
      st = lstatSync(cur);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    }
    if (st && (!st.isDirectory() || st.isSymbolicLink())) {
      // unlink removes a link itself, never its target.
      if (!opts.replace) throw new UnsafePathError(cur, `it is ${kindOf(st)}, not a real folder`);
      unlinkSync(cur);
      st = undefined;
    }
    if (!st) {
      try {
        mkdirSync(cur, { mode });
      } catch (e2) {
        if ((e2 as NodeJS.ErrnoException).code !== "EEXIST") throw e2;
      }
      st = lstatSync(cur);
      if (!st.isDirectory() || st.isSymbolicLink()) throw new UnsafePathError(cur, `it is ${kindOf(st)}, not a real folder`);
    }
  }
  return cur;
}

/** True when every component of `root/rel` exists and is a real folder (lstat, no link followed). */
export function isRealFolderInside(root: string, rel: string): boolean {
  let cur = normalize(root);
  for (const part of safeRelativeParts(rel)) {
    cur = join(cur, part);
    try {
      const st = lstatSync(cur);
      if (!st.isDirectory() || st.isSymbolicLink()) return false;
    } catch {
      return false;
    }
  }
  return true;
}

/**
 * Creates a new file `dir/name` for writing: O_CREAT|O_EXCL|O_NOFOLLOW, so an existing file, a
 * planted link or anything else already at that name is refused (EEXIST / ELOOP), never written
 * through. Returns the fd (close-on-exec).
 */
export function createExclusive(dir: string, name: string, mode = 0o644): { fd: number; path: string } {
  if (name.includes("/") || name.includes("\0") || name === "." || name === "..") throw new UnsafePathError(name, "not a plain file name");
  const path = join(dir, name);
  const fd = openSync(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | CLOEXEC, mode);
  return { fd, path };
}

/**
 * Reads at most `maxBytes` of a file the sandbox may control: no link followed (the last component;
 * see the module note for the others), no blocking open of a FIFO, and only a regular file is read.
 * Returns the bytes and whether the file was longer than `maxBytes`.
 */
export function readRegularFile(path: string, maxBytes: number): { data: Buffer; truncated: boolean; size: number } {
  let fd: number;
  try {
    fd = openSync(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | CLOEXEC);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ELOOP" || code === "EMLINK") throw new UnsafePathError(path, "it is a symbolic link");
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile()) throw new UnsafePathError(path, `it is ${kindOf(st)}`);
    const want = Math.max(0, Math.min(maxBytes, st.size));
    const buf = Buffer.alloc(want);
    let got = 0;
    while (got < want) {
      const n = readSync(fd, buf, got, want - got, got);
      if (n === 0) break;
      got += n;
    }
    return { data: buf.subarray(0, got), truncated: st.size > got, size: st.size };
  } finally {
    closeSync(fd);
  }
}

/** readRegularFile as UTF-8 text. */
export function readRegularText(path: string, maxBytes: number): { text: string; truncated: boolean } {
  const r = readRegularFile(path, maxBytes);
  return { text: r.data.toString("utf8"), truncated: r.truncated };
}

/** True when `child` lies strictly or equally under `parent` (lexical, both normalised absolute). */
export function lexicallyInside(parent: string, child: string): boolean {
  const p = normalize(parent);
  const c = normalize(child);
  return c === p || c.startsWith(p.endsWith(sep) ? p : p + sep);
}
