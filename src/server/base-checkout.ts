import { existsSync, realpathSync } from "node:fs";
import { git } from "../task/public/snapshot.js";

/**
 * The pristine base checkout measure's compare_with_base runs against: a detached git worktree of
 * the workspace's base commit in runs/<run-id>/base, bound read-only at /base in the sandbox. It is
 * made once, when the run is created and the workspace's .git is still ours: after that the agent
 * can write that .git, so the host runs no git command there again.
 */
export async function createBaseCheckout(workspaceDir: string, baseDir: string, baseCommit: string): Promise<string> {
  if (existsSync(baseDir)) throw new Error(`base checkout ${baseDir} already exists`);
  await git(workspaceDir).raw(["worktree", "add", "--detach", baseDir, baseCommit]);
  return realpathSync(baseDir);
}

/** The base checkout of a resumed run, or null when it is gone (compare_with_base then says so). */
export function existingBaseCheckout(baseDir: string): string | null {
  try {
    return realpathSync(baseDir);
  } catch {
    return null;
  }
}
