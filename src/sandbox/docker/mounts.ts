/**
 * The docker sandbox's filesystem view as a plan: which host paths are bound where, which mounts are
 * refused (they lie inside a hidden path that does not also hold the workspace), and which hidden paths are masked because they lie inside
 * a bound folder (an installed package under /usr holds its tasks/ folder, for one). Same rules as
 * the local backend (local-mounts.ts), expressed as engine binds and tmpfs mounts.
 *
 * Masks are computed when the container is created: a hidden path created later inside a bound
 * folder is not masked (the local backend recomputes per exec; a container's mounts are fixed).
 */
import { statSync } from "node:fs";
import { posix, relative, resolve } from "node:path";
import { isPathInside } from "../../lib/path-validation.js";
import { checkMountDest, checkOverlayRel, hiddenForbidding, realpathOrNull, type ReadOnlyMount, type ReadOnlyOverlay } from "../local/mounts.js";
import { CONTAINER_PYTHON_HELPERS, CONTAINER_WORKSPACE, hostSystemMountPlan, type MaskPlan } from "./spec.js";

export interface DockerBind {
  /** Real host path (symlinks resolved). */
  source: string;
  dest: string;
}

export interface DockerMountPlan {
  readOnlyMounts: ReadOnlyMount[];
  /** The overlays with their host folders' real paths. */
  overlays: ReadOnlyOverlay[];
  masks: MaskPlan;
}

/**
 * Checks the mounts against the hidden paths and plans the masks; throws with the mount and the
 * reason when one is not allowed.
 */
export function planDockerMounts(input: {
  workspace: string;
  helpers: string;
  readOnlyMounts: ReadOnlyMount[];
  overlays?: ReadOnlyOverlay[];
  hostSystemMounts: boolean;
  hidden: string[];
}): DockerMountPlan {
  for (const h of input.hidden) {
    if ((realpathOrNull(h) ?? resolve(h)) === input.workspace) throw new Error(`docker sandbox: the workspace ${input.workspace} is itself a hidden path`);
  }
  const inHidden = hiddenForbidding(input.hidden, input.helpers, input.workspace);
  if (inHidden) throw new Error(`docker sandbox: the python helpers ${input.helpers} lie inside hidden path ${inHidden}`);

  const binds: DockerBind[] = [
    { source: input.workspace, dest: CONTAINER_WORKSPACE },
    { source: input.helpers, dest: CONTAINER_PYTHON_HELPERS },
  ];
  if (input.hostSystemMounts) {
    for (const d of hostSystemMountPlan().binds) binds.push({ source: realpathOrNull(d) ?? d, dest: d });
  }
  const readOnlyMounts: ReadOnlyMount[] = [];
  for (const m of input.readOnlyMounts) {
    const real = realpathOrNull(resolve(m.host));
    const bad = checkMountDest(m.sandbox) ?? (real === null ? `host path ${m.host} does not exist` : null);
    const within = real === null ? null : hiddenForbidding(input.hidden, real, input.workspace);
    if (bad || within) throw new Error(`docker sandbox: read-only mount ${m.host} -> ${m.sandbox}: ${bad ?? `it lies inside hidden path ${within}`}`);
    readOnlyMounts.push({ host: real!, sandbox: m.sandbox });
    binds.push({ source: real!, dest: m.sandbox });
  }
  const overlays: ReadOnlyOverlay[] = [];
  for (const o of input.overlays ?? []) {
    const real = realpathOrNull(resolve(o.host));
    const within = real === null ? null : hiddenForbidding(input.hidden, real, input.workspace);
    const bad =
      checkOverlayRel(o.rel) ??
      (real === null ? `host folder ${o.host} does not exist` : null) ??
      (!statSync(real!).isDirectory() ? `host path ${o.host} is not a folder` : null) ??
      (isPathInside(input.workspace, real!) ? "the host folder lies inside the workspace (the sandbox could change it)" : null) ??
      (within ? `it lies inside hidden path ${within}` : null);
    if (bad) throw new Error(`docker sandbox: read-only overlay ${o.host} -> <workspace>/${o.rel}: ${bad}`);
    overlays.push({ host: real!, rel: o.rel });
    binds.push({ source: real!, dest: posix.join(CONTAINER_WORKSPACE, o.rel) });
  }
  return { readOnlyMounts, overlays, masks: masksFor(input.hidden, binds) };
}

/** Every hidden path visible through a bind, as the container path to mask. */
export function masksFor(hidden: string[], binds: DockerBind[]): MaskPlan {
  const masks: MaskPlan = { dirs: [], files: [] };
  const done = new Set<string>();
  for (const h of hidden) {
    const real = realpathOrNull(h);
    if (real === null) continue;
    let isDir: boolean;
    try {
      isDir = statSync(real).isDirectory();
    } catch {
      continue;
    }
    for (const b of binds) {
      if (!isPathInside(b.source, real)) continue;
      const rel = relative(b.source, real);
      const dest = rel === "" ? b.dest : posix.join(b.dest, ...rel.split("/"));
      if (done.has(dest)) continue;
      done.add(dest);
      (isDir ? masks.dirs : masks.files).push(dest);
    }
  }
  return masks;
}
