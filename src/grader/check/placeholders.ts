/**
 * What `infradev task new` left for the author to write: every `TODO(author)` mark in prompt.md,
 * hidden/promises.yaml and the probes, one finding per file with the count and the first line. A
 * warning, not an error: a freshly scaffolded task passes the static half of the check, and the
 * placeholder probes fail on gold in the full one until they are written.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { displayPath } from "../../task/public/loader.js";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { AUTHOR_MARK } from "../../task/public/schema.js";

function files(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    const st = statSync(p);
    if (st.isDirectory() && name !== "__pycache__") out.push(...files(p));
    else if (st.isFile() && /\.(py|md|yaml|yml)$/.test(name)) out.push(p);
  }
  return out;
}

export function authorPlaceholders(task: GraderTask): string[] {
  const hidden = join(task.taskDir, task.fullSpec.hidden.dir);
  const out: string[] = [];
  for (const f of [join(task.taskDir, "prompt.md"), join(hidden, "promises.yaml"), ...files(task.hidden.probesDir)]) {
    if (!existsSync(f)) continue;
    const lines = readFileSync(f, "utf8").split("\n");
    const at = lines.map((l, i) => (l.includes(AUTHOR_MARK) ? i + 1 : 0)).filter(Boolean);
    if (at.length) out.push(`${displayPath(f)}:${at[0]}: ${at.length} ${AUTHOR_MARK} mark(s) left to write${f.startsWith(task.hidden.probesDir) ? ` (${relative(task.hidden.probesDir, f)})` : ""}`);
  }
  return out;
}
