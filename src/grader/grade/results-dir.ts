import { isPathInside } from "../../lib/path-validation.js";
import { homedir } from "node:os";
import { isAbsolute, join, resolve } from "node:path";
import { packageRoot } from "../../lib/paths.js";

/**
 * Where grading results go by default: never inside the package (a results folder there would sit
 * beside the tasks and be served with it). INFRADEV_RESULTS_DIR moves it; else the XDG state dir.
 * A user may still pass any --out, inside the package too; only the default stays out of it.
 */
export function defaultResultsDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.INFRADEV_RESULTS_DIR) return resolve(env.INFRADEV_RESULTS_DIR);
  const state = env.XDG_STATE_HOME && isAbsolute(env.XDG_STATE_HOME) ? env.XDG_STATE_HOME : join(homedir(), ".local", "state");
  const dir = join(state, "infradev", "results");
  return insidePackage(dir) ? join(homedir(), ".infradev-results") : dir;
}

/** Whether a path lies inside the package root. */
export function insidePackage(path: string): boolean {
  return isPathInside(packageRoot(), resolve(path));
}
