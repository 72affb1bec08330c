import { randomBytes } from "node:crypto";

/**
 * A fresh folder name under the workspace's .infradev/results for one run's per-rank files (rank
 * logs the agent may read). The launcher writes them inside the sandbox; the host must not read
 * them back (issue 10, contract A: results come on the launcher's stdout). The random part keeps
 * concurrent runs apart and makes the name unguessable in advance.
 */
export function newResultsDir(kind: string): string {
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
  return `.infradev/results/${kind}-${stamp}-${randomBytes(4).toString("hex")}`;
}
