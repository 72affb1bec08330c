import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";

/** Every entry below `dir` with its size and mtime (links not followed): equal snapshots prove nothing was written there. */
export function treeSnapshot(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      const st = lstatSync(p);
      out.push(`${p} ${st.size} ${st.mtimeMs}`);
      if (e.isDirectory()) walk(p);
    }
  };
  walk(dir);
  return out.sort();
}
