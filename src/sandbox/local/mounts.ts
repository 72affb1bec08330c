/**
 * The filesystem view of the bubblewrap sandbox: which host paths are bound where, and which hidden
 * paths are masked inside those binds. Kept apart from process handling so it can be read (and
 * tested) as a plan.
 */
import { existsSync, lstatSync, readdirSync, readlinkSync, realpathSync, statSync } from "node:fs";
import { posix, relative, resolve } from "node:path";
import { isPathInside } from "../../lib/path-validation.js";

export interface ReadOnlyMount {
  /** Host path (file or folder). */
  host: string;
  /** Absolute path inside the sandbox. */
  sandbox: string;
}

/** A host folder bound read-only at `<workspace>/<rel>` (contract C). */
export interface ReadOnlyOverlay {
  /** Host folder. */
  host: string;
  /** Path relative to the workspace: letters, digits, `.`, `_`, `-` and `/` between components. */
  rel: string;
}

const OVERLAY_REL = /^[A-Za-z0-9_.-]+(\/[A-Za-z0-9_.-]+)*$/;

/** Checks an overlay's rel: relative, normalised, no `..` or `.`, no NUL, a plain charset. Null when fine. */
export function checkOverlayRel(rel: string): string | null {
  if (typeof rel !== "string" || rel === "") return "rel must be a non-empty relative path";
  if (rel.includes("\0")) return "rel contains a NUL byte";
  if (!OVERLAY_REL.test(rel)) return `rel ${JSON.stringify(rel)} must be relative, made of letters, digits, ".", "_", "-" and "/" between components`;
  if (rel.split("/").some((p) => p === "." || p === "..")) return `rel ${JSON.stringify(rel)} must not have "." or ".." components`;
  if (rel.split("/")[0] === ".git") return `rel ${JSON.stringify(rel)} may not lie in .git`;
  return null;
}

/** An error when one overlay lies inside another (its mount point would be in a read-only folder), else null. */
export function nestedOverlay(overlays: ReadOnlyOverlay[]): string | null {
  for (const a of overlays) {
    for (const b of overlays) {
      if (a !== b && (a.rel === b.rel || b.rel.startsWith(`${a.rel}/`))) return `read-only overlay ${b.rel} lies inside (or is) overlay ${a.rel}; give disjoint rels`;
    }
  }
  return null;
}

/**
 * The folders between the workspace and each overlay's mount point (`a`, `a/b` for `a/b/c`), which
 * the local backend binds onto themselves so that they are mount points too: a command can then
 * neither rename nor remove them, so it cannot move an overlay away and put a forged folder in its
 * place within one exec. Shallowest first.
 */
export function overlayParents(overlays: ReadOnlyOverlay[]): string[] {
  const out = new Set<string>();
  for (const o of overlays) {
    const parts = o.rel.split("/");
    for (let i = 1; i < parts.length; i++) out.add(parts.slice(0, i).join("/"));
  }
  return [...out].sort((x, y) => x.split("/").length - y.split("/").length || x.localeCompare(y));
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
export const RESERVED_SANDBOX_PATHS = ["/", "/proc", "/dev", "/workspace", "/opt/infradev/python", "/infradev"];

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

export interface LocalMountInput {
  /** Real path of the workspace (bound read-write at /workspace). */
  workspace: string;
  /** Real path of the package's python/sandbox (read-only at /opt/infradev/python). */
  helpers: string;
  readOnlyMounts: ReadOnlyMount[];
  hidden: string[];
  /** Device nodes to pass through; any at all also binds /sys read-only (NCCL, NVML read it). */
  devices: string[];
  /** Host folder bound at /tmp, or null for a fresh tmpfs. */
  sessionTmp: string | null;
  /** Host folder of the exec logs (real path), bound read-only at /infradev/logs. */
  logDir?: string;
  /** Host folders bound read-only inside the workspace (their mount points already made by the caller). */
  overlays?: ReadOnlyOverlay[];
}

/**
 * Every bind of the sandbox, in bwrap order (a mount inside another comes after it), or an Error
 * naming the mount that is not allowed and why. Masks are not included: they are computed per exec.
 */
export function planLocalMounts(input: LocalMountInput): { args: string[]; binds: Bind[]; overlayArgs: string[] } {
  for (const h of input.hidden) {
    if ((realpathOrNull(h) ?? h) === input.workspace) throw new Error(`the workspace ${input.workspace} is itself a hidden path`);
  }
  const inHidden = hiddenForbidding(input.hidden, input.helpers, input.workspace);
  if (inHidden) throw new Error(`the python helpers ${input.helpers} lie inside hidden path ${inHidden}`);

  const system = systemDirArgs();
  const binds: Bind[] = [...system.binds];
  const args = [...system.args, "--proc", "/proc", "--dev", "/dev"];
  if (input.devices.length > 0) {
    for (const d of input.devices) args.push("--dev-bind", d, d);
    args.push("--ro-bind", "/sys", "/sys");
    binds.push({ kind: "ro", source: "/sys", realSource: "/sys", dest: "/sys" });
  }
  if (input.sessionTmp) args.push("--bind", input.sessionTmp, "/tmp");
  else args.push("--tmpfs", "/tmp", "--dir", "/tmp/home");
  args.push("--bind", input.workspace, "/workspace", "--ro-bind", input.helpers, "/opt/infradev/python");
  binds.push(
    { kind: "rw", source: input.workspace, realSource: input.workspace, dest: "/workspace" },
    { kind: "ro", source: input.helpers, realSource: input.helpers, dest: "/opt/infradev/python" },
  );
  const overlayArgs: string[] = [];
  const nested = nestedOverlay(input.overlays ?? []);
  if (nested) throw new Error(nested);
  for (const o of input.overlays ?? []) {
    const bad = checkOverlayRel(o.rel);
    const real = realpathOrNull(resolve(o.host));
    const why =
      bad ??
      (real === null ? `host folder ${o.host} does not exist` : null) ??
      (real !== null && !statSync(real).isDirectory() ? `host path ${o.host} is not a folder` : null) ??
      (real !== null && isPathInside(input.workspace, real) ? "the host folder lies inside the workspace (the sandbox could change it)" : null) ??
      (real !== null ? hiddenForbidding(input.hidden, real, input.workspace) && `it lies inside hidden path ${hiddenForbidding(input.hidden, real, input.workspace)}` : null);
    if (why) throw new Error(`read-only overlay ${o.host} -> <workspace>/${o.rel}: ${why}`);
    const dest = posix.join("/workspace", o.rel);
    overlayArgs.push("--ro-bind", real!, dest);
    binds.push({ kind: "ro", source: real!, realSource: real!, dest });
  }
  if (input.logDir) {
    args.push("--ro-bind", input.logDir, "/infradev/logs");
    binds.push({ kind: "ro", source: input.logDir, realSource: input.logDir, dest: "/infradev/logs" });
  }

  for (const m of input.readOnlyMounts) {
    const underSystem = system.binds.find((b) => isPathInside(b.dest, m.sandbox));
    const real = realpathOrNull(resolve(m.host));
    const within = real === null ? null : hiddenForbidding(input.hidden, real, input.workspace);
    const why =
      checkMountDest(m.sandbox) ??
      (underSystem && !existsSync(m.sandbox)
        ? `sandbox path ${m.sandbox} lies inside the read-only ${underSystem.dest} and does not exist there; pick one under /opt or /mnt`
        : null) ??
      (real === null ? `host path ${m.host} does not exist` : null) ??
      (within ? `it is, or lies inside, hidden path ${within}` : null);
    if (why) throw new Error(`read-only mount ${m.host} -> ${m.sandbox}: ${why}`);
    args.push("--ro-bind", real!, m.sandbox);
    binds.push({ kind: "ro", source: real!, realSource: real!, dest: m.sandbox });
  }
  return { args, binds, overlayArgs };
}
