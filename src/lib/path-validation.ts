import { lstatSync, realpathSync } from "node:fs";
import { dirname, isAbsolute, relative, resolve, sep } from "node:path";

/** A user-supplied path that is malformed or leads outside the root it must stay in. */
export class PathOutsideRootError extends Error {
  constructor(
    readonly root: string,
    readonly userPath: string,
    reason: string,
  ) {
    super(`path ${JSON.stringify(userPath)} is not allowed: ${reason} (it must stay inside ${root})`);
    this.name = "PathOutsideRootError";
  }
}

/**
 * True when a relative path (as `path.relative` gives it) stays at or below its base: "", "a/b",
 * "..foo" (a name that starts with two dots) — not "..", "../x" or an absolute path.
 */
export function isRelativeInside(rel: string): boolean {
  return rel === "" || (!rel.startsWith(`..${sep}`) && rel !== ".." && !isAbsolute(rel));
}

/** True when `child` is `parent` or lies below it. Lexical only: both must be absolute and normalised. */
export function isPathInside(parent: string, child: string): boolean {
  return isRelativeInside(relative(parent, child));
}

function realpathOrNull(p: string): string | null {
  try {
    return realpathSync(p);
  } catch {
    return null;
  }
}

function existsNoFollow(p: string): boolean {
  try {
    lstatSync(p);
    return true;
  } catch {
    return false;
  }
}

/**
 * Resolves `userPath` (relative to `root`, or absolute) to a real path inside `root`, or throws
 * PathOutsideRootError. Checks, in order: no NUL byte; the lexical path stays under root (so `../`
 * cannot escape); then the real path (symlinks resolved) stays under root's real path, so a planted
 * symlink cannot escape either. A path that does not exist yet is judged by its nearest existing
 * ancestor, and a dangling symlink on the way is refused, because writing through it would create
 * its target wherever it points.
 *
 * Returns the real path (for a new path: the real path of its nearest existing ancestor joined with
 * the rest).
 */
export function resolveInside(root: string, userPath: string): string {
  if (userPath.includes("\0") || root.includes("\0")) throw new PathOutsideRootError(root, userPath, "it contains a NUL byte");
  if (!isAbsolute(root)) throw new PathOutsideRootError(root, userPath, "the root itself is not an absolute path");
  const absRoot = resolve(root);
  const lexical = resolve(absRoot, userPath);
  if (!isPathInside(absRoot, lexical)) throw new PathOutsideRootError(root, userPath, "it resolves outside the root");

  const realRoot = realpathOrNull(absRoot);
  if (realRoot === null) throw new PathOutsideRootError(root, userPath, "the root does not exist");

  // Walk up to the nearest entry that exists (without following it), then resolve that one.
  let existing = lexical;
  while (!existsNoFollow(existing)) {
    const up = dirname(existing);
    if (up === existing) break;
    existing = up;
  }
  const realExisting = realpathOrNull(existing);
  if (realExisting === null) throw new PathOutsideRootError(root, userPath, `${existing} is a dangling symlink`);
  const real = existing === lexical ? realExisting : resolve(realExisting, relative(existing, lexical));
  if (!isPathInside(realRoot, real)) throw new PathOutsideRootError(root, userPath, `it leads through a symlink to ${real}`);
  return real;
}
