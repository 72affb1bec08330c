import { readFileSync, readdirSync } from "node:fs";

/** Live (non-zombie) host processes whose command line contains `marker`, as "pid: cmdline". */
export function processesMatching(marker: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0").join(" ").trim();
      if (!cmdline.includes(marker)) continue;
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      if (stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z")) continue;
      out.push(`${name}: ${cmdline}`);
    } catch {
      // exited while we looked
    }
  }
  return out;
}

/** A `sleep` duration no other test (or engineer) uses, so its processes can be found by name. */
export function uniqueSleepSeconds(): string {
  return `${900 + Math.floor(Math.random() * 90_000) / 1000}`;
}
