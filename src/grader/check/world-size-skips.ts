import { PROBES_DIR } from "../workspace/harness-files.js";
import type { ScannedProbe } from "./probe-markers.js";

/**
 * Which of gold's skipped probe cases are errors. A probe may declare the world sizes it applies to
 * (`@pytest.mark.probe(promise=..., kind=..., world_sizes=[4])`) and skip itself elsewhere: a 4-rank
 * reshard probe graded at 2 ranks checks nothing there, and says so. A gold skip is an error only at a
 * world size where the probe applies (every world size when it declares none).
 */

export interface GoldSkip {
  id: string;
  /** The world size the case ran at. */
  worldSize: number;
  /** The probe's declared world sizes, null when it declares none (it applies everywhere). */
  declared: number[] | null;
  /** True when the skip is an error: the probe applies at this world size. */
  applies: boolean;
}

/** `[<mode>/][ws<N>/]infradev_probes/<file>::<name>[<params>]` -> world size and `<file>::<name>`. */
export function parseProbeCaseId(id: string, defaultWorldSize: number): { worldSize: number; test: string } | null {
  const at = id.indexOf(`${PROBES_DIR}/`);
  if (at < 0) return null;
  const head = id.slice(0, at);
  const ws = /(?:^|\/)ws(\d+)\/$/.exec(head);
  const test = id.slice(at + PROBES_DIR.length + 1).replace(/\[.*\]$/, "");
  return { worldSize: ws ? Number(ws[1]) : defaultWorldSize, test };
}

export function classifyGoldSkips(skippedIds: readonly string[], probes: readonly ScannedProbe[], defaultWorldSize: number): GoldSkip[] {
  const declaredOf = new Map(probes.map((p) => [`${p.file}::${p.name}`, p.marker?.world_sizes ?? null]));
  return skippedIds.map((id) => {
    const parsed = parseProbeCaseId(id, defaultWorldSize);
    const declared = parsed ? (declaredOf.get(parsed.test) ?? null) : null;
    const worldSize = parsed?.worldSize ?? defaultWorldSize;
    return { id, worldSize, declared, applies: declared === null || declared.includes(worldSize) };
  });
}
