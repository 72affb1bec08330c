import { spawnSync } from "node:child_process";
import { chmodSync, constants, cpSync, lstatSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

/**
 * The grading workspace put back to one state before every launcher session, so that code under
 * test cannot carry anything from one session into the next (a call counter, a marker file) and so
 * tell the probe session from the official one.
 *
 * The state is the workspace right after the install (patch applied, reverts done, tests staged), copied
 * once into the grader's private folder (outside the workspace, never bound into a sandbox). Before
 * EVERY session — the first too — the workspace's contents are removed and that copy is written back:
 * every session starts from a tree written the same way from the same bytes, with the same modes and
 * file times and the same order of creation, the repo's own `.git` folder and empty folders included.
 *
 * Why not `git reset --hard` + `git clean -ffdx` in the workspace: the workspace's `.git` is writable
 * from the sandbox, and git run by the host in it would run what a session put in its config
 * (core.fsmonitor, hooks, filter drivers); with a private git dir, the top-level `.git`, empty folders,
 * permission bits, timestamps and inode order would still carry state from one session to the next.
 *
 * The host never follows a link the sandbox planted: removal unlinks links (rmSync does not descend
 * into them), the copy is written into the emptied workspace folder from the private copy, and no
 * sandbox process is alive while this runs (each session's sandbox is closed before the next restore).
 */

export interface WorkspaceState {
  repoDir: string;
  /** The private copy (host-only). */
  copy: string;
  /** Mode of the workspace folder itself (a session can chmod it). */
  rootMode: number;
}

/** Copies that keep links as links, modes and file times; clones blocks where the filesystem can. */
const COPY = { recursive: true, dereference: false, verbatimSymlinks: true, preserveTimestamps: true, errorOnExist: true, force: false, mode: constants.COPYFILE_FICLONE } as const;

/** Takes the post-install state of `repoDir` into `copy` (a path that must not exist yet). */
export function captureWorkspaceState(repoDir: string, copy: string): WorkspaceState {
  const st = lstatSync(repoDir);
  if (!st.isDirectory()) throw new Error(`grading workspace ${repoDir} is not a folder`);
  cpSync(repoDir, copy, COPY);
  return { repoDir, copy, rootMode: st.mode & 0o7777 };
}

/** Puts the workspace back to the captured state (see above). */
export function restoreWorkspaceState(state: WorkspaceState): void {
  const { repoDir } = state;
  const st = lstatSync(repoDir);
  if (!st.isDirectory()) throw new Error(`grading workspace ${repoDir} is no longer a folder`);
  chmodSync(repoDir, 0o700);
  try {
    clearFolder(repoDir);
  } catch {
    // What a session can leave that rmSync cannot take: folders made unreadable or unwritable (it runs
    // as our uid), a tree deeper than PATH_MAX. chmod -R and rm -rf walk with openat and never follow a
    // link they meet (GNU coreutils: chmod skips links in a recursive walk; rm removes a link itself).
    spawnSync("chmod", ["-R", "u+rwX", "--", repoDir], { stdio: "ignore" });
    const left = readdirSync(repoDir).map((n) => join(repoDir, n));
    if (left.length) spawnSync("rm", ["-rf", "--", ...left], { stdio: "ignore" });
    const still = readdirSync(repoDir);
    if (still.length) throw new Error(`grading workspace ${repoDir}: could not empty it before the next session (left: ${still.slice(0, 5).join(", ")})`);
  }
  cpSync(state.copy, repoDir, COPY);
  chmodSync(repoDir, state.rootMode);
}

function clearFolder(dir: string): void {
  for (const name of readdirSync(dir)) rmSync(join(dir, name), { recursive: true, force: true });
}
