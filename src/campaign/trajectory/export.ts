import { join } from "node:path";
import { loadCampaign } from "../report/load.js";
import { runCost, type Prices } from "../report/prices.js";
import { writeFileAtomic } from "../report/index.js";
import { ATIF_FILE, toAtif } from "./atif.js";
import { scanCampaign, trajectoriesOf } from "./campaign.js";

export type ExportFormat = "atif" | "jsonl";

/**
 * `infradev export CAMPAIGN --format atif|jsonl`: every run's trajectory, one file per run.
 * atif: `<out>/<run-id>/trajectory.json` (Harbor's format, atif.ts says what maps);
 * jsonl: `<out>/<run-id>.jsonl`, our own: a header line `{run: <run.json>, grade, scan}` then one
 * line per event (turn, tool call, session) as trajectory/types.ts describes it.
 */
export function exportCampaign(dir: string, format: ExportFormat, out: string, prices: Prices | null = null): string[] {
  const c = loadCampaign(dir);
  const trajectories = trajectoriesOf(c, prices);
  const scans = new Map(scanCampaign(c, trajectories).map((s) => [s.run_id, s]));
  const written: string[] = [];
  for (const r of c.runs) {
    const id = r.record.run_id;
    const t = trajectories.get(id)!;
    const price = prices?.[r.record.model];
    const cost = price ? runCost(r.record.tokens, price) : null;
    const g = r.grade;
    const grade = g ? { status: g.status, resolved: g.status === "graded" ? g.with_probes.resolved : false, score: g.status === "graded" ? g.with_probes.score : g.status === "harness_fault" ? null : 0 } : null;
    const scan = scans.get(id)!;
    if (format === "atif") {
      const file = join(out, id, ATIF_FILE);
      writeFileAtomic(file, `${JSON.stringify(toAtif(r.record, t, { grade, flagged: scan.flagged, cost_usd: cost }), null, 2)}\n`);
      written.push(file);
    } else {
      const file = join(out, `${id}.jsonl`);
      const head = { infradev_trajectory: 1, run: r.record, grade, cost_usd: cost, scan: { flagged: scan.flagged, findings: scan.findings }, turns_from: t.turns_from };
      writeFileAtomic(file, [head, ...t.events].map((x) => JSON.stringify(x)).join("\n") + "\n");
      written.push(file);
    }
  }
  return written;
}
