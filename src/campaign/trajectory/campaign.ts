import type { LoadedCampaign } from "../report/load.js";
import type { Prices } from "../report/prices.js";
import { buildTrajectory } from "./build.js";
import { scanRun, type RunScan } from "./scan.js";
import type { Trajectory } from "./types.js";

/** Every run's trajectory (from its folder, or the ATIF file it was imported from) and its scan. */
export function trajectoriesOf(c: LoadedCampaign, prices: Prices | null = null, maxText?: number): Map<string, Trajectory> {
  const out = new Map<string, Trajectory>();
  for (const r of c.runs) out.set(r.record.run_id, r.imported ?? buildTrajectory(r.dir, r.record, { prices, maxText }));
  return out;
}

export function scanCampaign(c: LoadedCampaign, trajectories: Map<string, Trajectory>): Array<RunScan & { agent: string; task_id: string }> {
  return c.runs.map((r) => ({ ...scanRun(r.record.run_id, trajectories.get(r.record.run_id) ?? null, r.patch), agent: r.record.agent, task_id: r.record.task_id }));
}
