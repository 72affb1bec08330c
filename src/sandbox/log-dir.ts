/**
 * Where a sandbox's exec logs live (contract D): a host folder OUTSIDE the workspace, which the
 * sandbox sees read-only at /infradev/logs (the `none` backend: at its host path). The server passes
 * runs/<run-id>/logs; without one, each sandbox makes a private temp folder and removes it at close.
 * The sandbox can read its logs but never create, replace or link anything the host writes.
 */
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { isPathInside } from "../lib/path-validation.js";

/** The logs folder as commands inside the local and docker sandboxes see it. */
export const SANDBOX_LOG_DIR = "/infradev/logs";

export interface HostLogDir {
  /** Real path of the folder on the host. */
  hostDir: string;
  /** True when the sandbox made it (a temp folder) and removes it at close. */
  owned: boolean;
}

/**
 * A private temp folder `<tmp>/<prefix><pid>-XXXXXX` (random name, `mode`); the pid tells an
 * operator whose it is when a killed process could not remove it.
 */
export function privateTempDir(prefix: string, mode = 0o755): string {
  const dir = mkdtempSync(join(tmpdir(), `${prefix}${process.pid}-`));
  chmodSync(dir, mode);
  return realpathSync(dir);
}

/**
 * Makes (or checks) the logs folder: a given one must not lie inside the workspace nor hold it, and
 * must be a real folder (not a link); without one, a fresh private temp folder.
 */
export function prepareLogDir(logDir: string | undefined, workspace: string, backend: string): HostLogDir {
  const realWorkspace = realpathSync(workspace);
  if (logDir === undefined) {
    // Readable by the sandbox's user whatever it is (docker --user); the name is random.
    return { hostDir: privateTempDir("infradev-logs-"), owned: true };
  }
  const abs = resolve(logDir);
  mkdirSync(abs, { recursive: true, mode: 0o755 });
  const st = lstatSync(abs);
  if (st.isSymbolicLink() || !st.isDirectory()) throw new Error(`${backend} sandbox: logDir ${logDir} is not a real folder (a link or a file is refused)`);
  const real = realpathSync(abs);
  if (isPathInside(realWorkspace, real)) {
    throw new Error(`${backend} sandbox: logDir ${logDir} lies inside the workspace ${workspace}; logs must live where the sandbox cannot write (e.g. runs/<run-id>/logs)`);
  }
  if (isPathInside(real, realWorkspace)) throw new Error(`${backend} sandbox: logDir ${logDir} holds the workspace ${workspace}; give a folder of its own`);
  return { hostDir: real, owned: false };
}

/** Removes the folder if the sandbox made it. */
export function releaseLogDir(dir: HostLogDir): void {
  if (dir.owned) rmSync(dir.hostDir, { recursive: true, force: true });
}
