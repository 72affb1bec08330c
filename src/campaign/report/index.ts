import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { classifyAssertions } from "./assertions.js";
import { computeReport, type ReportData } from "./compute.js";
import { loadCampaign } from "./load.js";
import type { Prices } from "./prices.js";
import { scanCampaign, trajectoriesOf } from "../trajectory/campaign.js";
import { judgeFlagged, type JudgeOptions } from "../trajectory/judge.js";

export { renderText } from "./render-text.js";
export { renderMarkdown } from "./render-md.js";
export { loadPrices } from "./prices.js";
export type { ReportData } from "./compute.js";

export interface BuildReportOptions {
  prices?: Prices | null;
  compare?: [string, string] | null;
  /** Python for Figure 6's classifier (default $INFRADEV_HOST_PYTHON, else python3). */
  hostPython?: string;
  /** The reward-hacking scan over every run (default on). */
  scan?: boolean;
  /** An OpenAI-compatible chat endpoint (…/v1) that reads each flagged run and gives its verdict beside the rules'. */
  judge?: JudgeOptions | null;
}

/** Reads the campaign folder and computes every number (Figure 6's classifier runs once over all patches). */
export async function buildReport(campaignDir: string, opts: BuildReportOptions = {}): Promise<ReportData> {
  const campaign = loadCampaign(campaignDir);
  const patches = campaign.runs.flatMap((r) => (r.patch ? [{ id: r.record.run_id, patch: r.patch }] : []));
  const assertions = await classifyAssertions(patches, opts.hostPython);
  let scans: ReportData["scan"] = null;
  if (opts.scan !== false) {
    const trajectories = trajectoriesOf(campaign, opts.prices ?? null);
    scans = scanCampaign(campaign, trajectories);
    if (opts.judge) scans = await judgeFlagged(scans, trajectories, campaign, opts.judge);
  }
  return computeReport(campaign, { prices: opts.prices ?? null, compare: opts.compare ?? null, assertions, scans });
}

/** A report file appears whole or not at all (temp file + rename in the same folder). */
export function writeFileAtomic(file: string, text: string): void {
  const path = resolve(file);
  mkdirSync(dirname(path), { recursive: true });
  const tmp = `${path}.tmp${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, path);
}
