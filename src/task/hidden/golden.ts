/**
 * A git-sourced task's golden patch and post-PR tests, derived from the git cache's mirror of the
 * upstream repository (the merge commit holds the answer): grader-only, beside the hidden schema.
 */
import { createHash, randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { gitCacheDir } from "../../lib/paths.js";
import { gitSync, importBundleSync, mirrorDirFor, mirrorHasCommit, mirrorListFiles } from "../public/snapshot.js";

export interface DerivedGitParts {
  /** The golden patch: `git diff base merge` outside the test dirs. */
  goldenPatch: string;
  /** merge's version of the test dirs, a tree rooted at the repo root. */
  testsDir: string;
}

/**
 * A git-sourced task's golden patch and post-PR tests, derived from the cache's mirror instead of
 * being copied into the task folder (a real PR's code stays upstream's): the golden patch is the
 * PR's diff minus everything under the test dirs, the tests are merge's test dirs. Written once per
 * (url, base, merge, test dirs) under the cache, atomically (temporary folder, then rename).
 */
export function deriveGitParts(source: { url: string; base: string; merge: string }, testDirs: string[], label: string, opts: { upstreamDir?: string } = {}): DerivedGitParts {
  const mirror = mirrorDirFor(source.url);
  const how = `seed the cache with \`infradev tasks cache import <bundle> --url ${source.url}\` (INFRADEV_GIT_CACHE moves it) or let a grade clone it`;
  // A task that carries its upstream commits (hidden/upstream/*.bundle, as `task new` writes them, cut
  // below base) seeds the cache itself: it then grades offline on a fresh machine with no step by hand.
  if (opts.upstreamDir && existsSync(opts.upstreamDir) && !(mirrorHasCommit(source.url, source.base) && mirrorHasCommit(source.url, source.merge))) {
    for (const f of readdirSync(opts.upstreamDir).filter((n) => n.endsWith(".bundle")).sort()) {
      try {
        importBundleSync(join(opts.upstreamDir, f), source.url, { shallow: source.base });
      } catch (e) {
        throw new Error(`${label}: seeding the git cache from ${join(opts.upstreamDir, f)} failed: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
  }
  for (const [field, sha] of [["base", source.base], ["merge", source.merge]] as const) {
    if (!mirrorHasCommit(source.url, sha)) throw new Error(`${label}: source.${field}: commit ${sha} is not in the git cache (${mirror}): ${how}`);
  }
  const dirs = testDirs.map((d) => d.replace(/\/+$/, ""));
  const key = createHash("sha256").update(JSON.stringify({ v: 1, url: source.url, base: source.base, merge: source.merge, dirs })).digest("hex").slice(0, 24);
  const root = join(gitCacheDir(), "derived", key);
  const parts = { goldenPatch: join(root, "golden.patch"), testsDir: join(root, "tests") };
  if (existsSync(join(root, "done"))) return parts;
  mkdirSync(join(gitCacheDir(), "derived"), { recursive: true });
  const tmp = `${root}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    mkdirSync(join(tmp, "tests"), { recursive: true });
    const golden = gitSync(mirror, ["diff", "--binary", "--full-index", source.base, source.merge, "--", ".", ...dirs.map((d) => `:(exclude)${d}`)]);
    writeFileSync(join(tmp, "golden.patch"), golden);
    const files = mirrorListFiles(source.url, source.merge, dirs);
    // merge's blobs, one `git cat-file --batch` for all of them (modes kept: executable or not).
    const listing = gitSync(mirror, ["ls-tree", "-r", "-z", source.merge, "--", ...dirs]).split("\0").filter(Boolean);
    for (const entry of listing) {
      const [meta, path] = [entry.slice(0, entry.indexOf("\t")), entry.slice(entry.indexOf("\t") + 1)];
      const [mode, type, sha] = meta.split(" ");
      if (type !== "blob" || !files.includes(path)) continue;
      const dest = join(tmp, "tests", path);
      mkdirSync(dirname(dest), { recursive: true });
      if (mode === "120000") continue; // links are not followed or recreated: a test tree needs none
      writeFileSync(dest, execFileSync("git", ["-C", mirror, "cat-file", "blob", sha!], { maxBuffer: 256 * 1024 * 1024 }));
      if (mode === "100755") chmodSync(dest, 0o755);
    }
    writeFileSync(join(tmp, "done"), `${source.merge}\n`);
    try {
      renameSync(tmp, root);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another loader derived it first: same bytes
    }
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw new Error(`${label}: deriving the golden patch and tests from ${mirror} failed: ${e instanceof Error ? e.message.trim().split("\n")[0] : String(e)}`);
  }
  return parts;
}
