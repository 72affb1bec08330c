/**
 * An upstream bundle for a task: the base commit's full tree and the merge commit, with the history
 * cut below base (so a task folder carries megabytes, not the whole repository), tagged `base` and
 * `merge` as ../shared/upstream/README.md describes. Cut in a scratch repository: the author's
 * repository is only read. A two-parent merge is cut at depth 1 too (its branch's history would pull
 * in everything the branch forked from), so the bundle then has two shallow boundaries.
 */
import { statSync } from "node:fs";
import { gitIn, scratchDir } from "./git.js";

export interface MadeBundle {
  file: string;
  bytes: number;
  /** The commits its history is cut at: base, and merge too for a two-parent merge. */
  shallow: string[];
}

export async function makeBundle(gitDir: string, base: string, merge: string, file: string): Promise<MadeBundle> {
  const scratch = scratchDir("infradev-bundle-");
  try {
    const repo = scratch.dir;
    await gitIn(repo, ["init", "--bare", "--quiet"]);
    await gitIn(repo, ["fetch", "--quiet", "--no-tags", "--depth=1", gitDir, `${base}:refs/tags/base`]);
    const parents = (await gitIn(gitDir, ["rev-list", "--parents", "-n", "1", merge])).trim().split(" ").slice(1);
    const direct = parents.length === 1 && parents[0] === base;
    await gitIn(repo, ["fetch", "--quiet", "--no-tags", ...(direct ? [] : ["--depth=1"]), gitDir, `${merge}:refs/tags/merge`]);
    await gitIn(repo, ["bundle", "create", "--quiet", file, "refs/tags/base", "refs/tags/merge"]);
    return { file, bytes: statSync(file).size, shallow: direct ? [base] : [base, merge] };
  } finally {
    scratch.remove();
  }
}
