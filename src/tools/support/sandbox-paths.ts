import { isRelativeInside } from "../../lib/path-validation.js";
import { posix } from "node:path";

/**
 * Paths the agent names are paths *inside the sandbox*. The sandbox itself is the security boundary
 * (it cannot see anything else); this check only turns an obvious mistake (a path outside the
 * workspace, an option smuggled in as a path) into an actionable message before anything runs.
 */
export type SandboxPathCheck = { ok: true; path: string; relative: string } | { ok: false; error: string };

/** Resolves `p` (relative to `root`, or absolute) and requires it to stay inside one of `roots`. */
export function resolveInside(p: string, root: string, roots: readonly string[] = [root]): SandboxPathCheck {
  if (p.includes("\0")) return { ok: false, error: `path contains a NUL byte: ${JSON.stringify(p)}` };
  const abs = posix.resolve(root, p);
  for (const r of roots) {
    const rel = posix.relative(r, abs);
    if (isRelativeInside(rel)) return { ok: true, path: abs, relative: rel || "." };
  }
  return { ok: false, error: `${JSON.stringify(p)} resolves to ${abs}, outside ${roots.join(" and ")}; use a path inside the workspace (${root})` };
}

/**
 * Checks a test path / node id the agent passes to pytest: it must not look like an option
 * (argument injection: `--rootdir=/`, `-p plugin`) and must stay inside the workspace.
 */
export function checkTestPath(p: string, root: string): SandboxPathCheck {
  if (p.trim() === "") return { ok: false, error: "empty test path" };
  if (p.startsWith("-")) return { ok: false, error: `${JSON.stringify(p)} looks like a pytest option; pass paths or node ids (tests/test_x.py::test_y), and use the tool's own fields (k, mode) for options` };
  const file = p.split("::")[0]!;
  const checked = resolveInside(file, root);
  if (!checked.ok) return checked;
  return { ok: true, path: p, relative: checked.relative };
}

/** The first invalid test path among `paths`, as "<tool>: <why>", or null when all are fine. */
export function firstBadTestPath(tool: string, paths: readonly string[], root: string): string | null {
  for (const p of paths) {
    const c = checkTestPath(p, root);
    if (!c.ok) return `${tool}: ${c.error}`;
  }
  return null;
}

/** Maps a host path under the workspace to the path the sandbox sees, or null when it is not under it. */
export function hostToSandboxPath(hostPath: string, hostRoot: string, sandboxRoot: string): string | null {
  const rel = posix.relative(hostRoot, hostPath);
  if (!isRelativeInside(rel)) return null;
  return rel === "" ? sandboxRoot : posix.join(sandboxRoot, rel);
}
