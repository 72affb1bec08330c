import { existsSync, mkdirSync, realpathSync, symlinkSync } from "node:fs";
import { basename, dirname, join, resolve } from "node:path";
import { git } from "../tasks/snapshot.js";

/**
 * The pristine base checkout measure's compare_with_base runs against: a detached git worktree of
 * the workspace's base commit, made once, when the run is created and the workspace's .git is still
 * ours (after that the agent can write that .git, so the host runs no git command there again).
 *
 * It lives beside the runs folder, in `<runs>-base/<run-id>`, with `runs/<run-id>/base` linking to
 * it: the sandbox hides the whole runs folder (other sessions' work) and refuses to mount anything
 * from inside a hidden folder, while a pristine base holds nothing secret.
 */
export function baseStoreDir(runsDir: string, runId: string): string {
  const runs = resolve(runsDir);
  return join(dirname(runs), `${basename(runs)}-base`, runId);
}

export async function createBaseCheckout(workspaceDir: string, link: string, store: string, baseCommit: string): Promise<string> {
  if (existsSync(store)) throw new Error(`base checkout ${store} already exists`);
  mkdirSync(dirname(store), { recursive: true });
  await git(workspaceDir).raw(["worktree", "add", "--detach", store, baseCommit]);
  symlinkSync(store, link);
  return realpathSync(store);
}

/** The base checkout of a resumed run, or null when it is gone (compare_with_base then says so). */
export function existingBaseCheckout(link: string): string | null {
  try {
    return realpathSync(link);
  } catch {
    return null;
  }
}
