import { createHash } from "node:crypto";
import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { join } from "node:path";

/** Content hashes of files and task folders, and clearing a results folder before a rerun. */

export function sha256(data: string | Uint8Array): string {
  return createHash("sha256").update(data).digest("hex");
}

const SKIP = new Set(["__pycache__", ".pytest_cache", ".infradev", ".git"]);

/**
 * Hash of a task folder's content, hidden parts included: relative path, type and bytes of every
 * file (link targets for symlinks), in sorted order. Python caches are skipped.
 */
export function taskContentHash(taskDir: string): string {
  const h = createHash("sha256");
  const walk = (rel: string): void => {
    const abs = join(taskDir, rel);
    for (const name of readdirSync(abs).sort()) {
      if (SKIP.has(name) || name.endsWith(".pyc")) continue;
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(taskDir, r));
      if (st.isSymbolicLink()) h.update(`L ${r}\0${readlinkSync(join(taskDir, r))}\0`);
      else if (st.isDirectory()) walk(r);
      else if (st.isFile()) {
        const data = readFileSync(join(taskDir, r));
        h.update(`F ${r}\0${st.mode & 0o111 ? "x" : "-"}${data.length}\0`);
        h.update(data);
      }
    }
  };
  walk("");
  return h.digest("hex");
}

/**
 * Empties an artifact folder for a forced re-run (results, session files, logs), recursively into
 * sub-folders, but keeps every `workspace.path`: it names a killed run's temp workspace, which the
 * next workspace build removes (grader/workspace.ts).
 */
export function clearArtifacts(dir: string): void {
  let names: string[];
  try {
    if (!lstatSync(dir).isDirectory()) return;
    names = readdirSync(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const p = join(dir, name);
    if (name === "workspace.path") continue;
    if (lstatSync(p).isDirectory() && existsSync(join(p, "workspace.path"))) clearArtifacts(p);
    else rmSync(p, { recursive: true, force: true });
  }
}
