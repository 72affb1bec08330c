/**
 * The filesystem view of the bubblewrap sandbox: which host paths are bound where, and which hidden
 * paths are masked inside those binds. Kept apart from process handling so it can be read (and
 * tested) as a plan.
 */
import { lstatSync, readdirSync, readlinkSync, realpathSync, statSync } from "node:fs";
import { posix, relative, resolve } from "node:path";
import { isPathInside } from "../lib/path-validation.js";

export interface ReadOnlyMount {
  /** Host path (file or folder). */
  host: string;
  /** Absolute path inside the sandbox. */
  sandbox: string;
}

export interface Bind {
  kind: "ro" | "rw" | "dev";
  /** Host path as given to bwrap. */
  source: string;
  /** The source with symlinks resolved: what a hidden path is compared against. */
  realSource: string;
  dest: string;
}

/** System folders bound read-only at the same path. A merged-/usr host has symlinks for some. */
export const SYSTEM_DIRS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];

/** Sandbox paths a read-only mount may not cover or sit inside. */
export const RESERVED_SANDBOX_PATHS = ["/", "/proc", "/dev", "/workspace", "/opt/infradev/python"];

export function realpathOrNull(p: string): string | null {
  try {
    return realpathSync(p);
  } catch {
    return null;
  }
}

/**
 * bwrap arguments for the system folders: a real folder is bound read-only, a symlink (merged /usr:
 * /bin -> usr/bin) is recreated as the same symlink, a missing one is skipped.
 */
export function systemDirArgs(dirs: string[] = SYSTEM_DIRS): { args: string[]; binds: Bind[] } {
  const args: string[] = [];
  const binds: Bind[] = [];
  for (const dir of dirs) {
    let st;
    try {
      st = lstatSync(dir);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) {
      args.push("--symlink", readlinkSync(dir), dir);
    } else if (st.isDirectory()) {
      args.push("--ro-bind", dir, dir);
      binds.push({ kind: "ro", source: dir, realSource: realpathSync(dir), dest: dir });
    }
  }
  return { args, binds };
}

/** NVIDIA device nodes to pass through (/dev/nvidia0.., nvidiactl, nvidia-uvm, nvidia-caps/). */
export function nvidiaDevices(devDir = "/dev"): string[] {
  try {
    return readdirSync(devDir)
      .filter((n) => n.startsWith("nvidia"))
      .sort()
      .map((n) => posix.join(devDir, n));
  } catch {
    return [];
  }
}

/** Checks a read-only mount's sandbox path: absolute, normalised, off the reserved paths. */
export function checkMountDest(dest: string): string | null {
  if (!posix.isAbsolute(dest)) return `sandbox path ${JSON.stringify(dest)} must be absolute`;
  if (posix.normalize(dest) !== dest || dest.endsWith("/")) return `sandbox path ${JSON.stringify(dest)} must be normalised (no "..", "//" or trailing "/")`;
  if (dest === "/tmp") return "sandbox path /tmp is the sandbox's private temp folder; mount below it instead";
  for (const reserved of RESERVED_SANDBOX_PATHS) {
    if (dest === reserved || (reserved !== "/" && isPathInside(reserved, dest)) || (reserved !== "/" && isPathInside(dest, reserved))) {
      return `sandbox path ${dest} collides with ${reserved}, which the sandbox itself provides`;
    }
  }
  return null;
}

/**
 * bwrap arguments that mask every hidden path visible through one of the binds: a folder gets an
 * empty read-only tmpfs over it, a file gets /dev/null. Hidden paths are resolved now (each exec),
 * so one created after the sandbox is still masked, and a symlink to a hidden path is caught by
 * masking its target.
 */
export function maskArgs(hiddenPaths: string[], binds: Bind[]): { args: string[]; masked: string[] } {
  const args: string[] = [];
  const masked: string[] = [];
  const done = new Set<string>();
  for (const hidden of hiddenPaths) {
    const real = realpathOrNull(hidden);
    if (real === null) continue; // nothing there to see
    let isDir = false;
    try {
      isDir = statSync(real).isDirectory();
    } catch {
      continue;
    }
    for (const bind of binds) {
      if (!isPathInside(bind.realSource, real)) continue;
      const rel = relative(bind.realSource, real);
      const dest = rel === "" ? bind.dest : posix.join(bind.dest, ...rel.split("/"));
      if (done.has(dest)) continue;
      done.add(dest);
      masked.push(dest);
      if (isDir) args.push("--tmpfs", dest, "--remount-ro", dest);
      else args.push("--ro-bind", "/dev/null", dest);
    }
  }
  return { args, masked };
}

/**
 * The hidden path that forbids binding `hostPath`, or null. A bind of something inside a hidden
 * folder would expose part of it, so it is refused — unless that hidden folder also holds the
 * workspace: that is a runs folder (runs/<id>/workspace beside runs/<id>/base), where binding the
 * session's own parts is the caller's explicit choice. Equal to a hidden path is always refused.
 * Hidden paths inside an allowed bind are still masked.
 */
export function hiddenForbidding(hiddenPaths: string[], hostPath: string, workspace: string): string | null {
  const real = realpathOrNull(hostPath) ?? resolve(hostPath);
  const realWorkspace = realpathOrNull(workspace) ?? resolve(workspace);
  for (const hidden of hiddenPaths) {
    const h = realpathOrNull(hidden) ?? resolve(hidden);
    if (h === real) return hidden;
    if (isPathInside(h, real) && !isPathInside(h, realWorkspace)) return hidden;
  }
  return null;
}
