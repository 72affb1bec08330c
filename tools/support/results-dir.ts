import { randomBytes } from "node:crypto";

/**
 * A fresh folder name under the workspace's .infradev/results for one run's per-rank files. The
 * random part keeps concurrent runs apart and makes the name unguessable in advance (the host
 * reads these files back, so a link planted there beforehand must not be predictable).
 */
export function newResultsDir(kind: string): string {
  const stamp = new Date().toISOString().replace(/[-:]/g, "").replace(/\..*$/, "").replace("T", "-");
  return `.infradev/results/${kind}-${stamp}-${randomBytes(4).toString("hex")}`;
}
