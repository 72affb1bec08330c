/**
 * The real upstream commits in ../shared/upstream (git bundles), seeded into a scratch git cache so
 * that a git-sourced task loads offline. One place for what each bundle is: its file, the upstream
 * URL, and its shallow boundary (the PR's base: history is cut below it).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { packageRoot } from "../../src/lib/paths.js";
import { importBundle } from "../../src/task/public/snapshot.js";

export const MEGATRON_URL = "https://github.com/NVIDIA/Megatron-LM.git";
export const UPSTREAM_BUNDLES = {
  "megatron-lm-pr3812": { url: MEGATRON_URL, shallow: "40627d00d96cef74aceab35e0e3c170e900f3aff" },
  "megatron-lm-pr4028": { url: MEGATRON_URL, shallow: "d45fa3e8e140fe5262179f6f94823869b89026a7" },
} as const;
export type UpstreamBundle = keyof typeof UPSTREAM_BUNDLES;

export const bundlePath = (name: UpstreamBundle) => resolve(packageRoot(), "..", "shared", "upstream", `${name}.bundle`);

/**
 * Makes a scratch folder and points INFRADEV_GIT_CACHE at `<scratch>/cache`, seeded from `names`;
 * `restore` puts the variable back and removes the folder (call it from afterAll / onTestFinished).
 * The rest of the scratch folder is the caller's.
 */
export async function seedGitCache(names: UpstreamBundle[], prefix = "infradev-git-cache-"): Promise<{ scratch: string; restore: () => void }> {
  const scratch = mkdtempSync(join(tmpdir(), prefix));
  const saved = process.env.INFRADEV_GIT_CACHE;
  process.env.INFRADEV_GIT_CACHE = join(scratch, "cache");
  for (const n of names) await importBundle(bundlePath(n), UPSTREAM_BUNDLES[n].url, { shallow: UPSTREAM_BUNDLES[n].shallow });
  return {
    scratch,
    restore: () => {
      if (saved === undefined) delete process.env.INFRADEV_GIT_CACHE;
      else process.env.INFRADEV_GIT_CACHE = saved;
      rmSync(scratch, { recursive: true, force: true });
    },
  };
}
