import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The installed package's root (the folder holding infradev's package.json). Works both from the
 * TypeScript sources (vitest, tsx) and from the compiled `dist/` tree, whose depths differ.
 */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, "package.json");
    if (existsSync(pkg)) {
      try {
        if ((JSON.parse(readFileSync(pkg, "utf8")) as { name?: string }).name === "infradev") return dir;
      } catch {
        // not ours; keep walking up
      }
    }
    const up = dirname(dir);
    if (up === dir) throw new Error("infradev: cannot locate the package root (no package.json named infradev above this file)");
    dir = up;
  }
}

/**
 * Python that runs inside sandboxes (launcher, rank boot, probe library, analysis): the only Python
 * folder ever bound into one.
 */
export function sandboxPythonDir(): string {
  return join(packageRoot(), "python", "sandbox");
}

/**
 * Python that runs on the host only and is never mounted into a sandbox: how the grader renames and
 * places tests (and disguises probes), the mutation engine, the marker scan, the assertion
 * classifier, the doctor. An agent must not read how the grader works from inside its sandbox.
 */
export function hostPythonDir(): string {
  return join(packageRoot(), "python", "host");
}

/** The bundled tasks folder. */
export function bundledTasksDir(): string {
  return join(packageRoot(), "tasks");
}

/** The bundled skills folder. */
export function skillsDir(): string {
  return join(packageRoot(), "skills");
}

/** Gold calibrations (case ids of the hidden probes among them): INFRADEV_CALIBRATION_DIR to move it. */
export function defaultCalibrationDir(): string {
  return process.env.INFRADEV_CALIBRATION_DIR ?? join(homedir(), ".cache", "infradev", "calibration");
}

/** Mirrors of git task sources (they hold the merged PRs): INFRADEV_GIT_CACHE to move it. */
export function gitCacheDir(): string {
  return process.env.INFRADEV_GIT_CACHE ?? join(homedir(), ".cache", "infradev", "git");
}
