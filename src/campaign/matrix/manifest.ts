import { join } from "node:path";
import { writeJsonAtomic } from "../../lib/json.js";
import { readJsonFile } from "../../lib/json.js";
import { UsageError } from "../../lib/errors.js";
import { MANIFEST_FILE, type AgentConfig, type CampaignManifest } from "../types.js";

/**
 * campaign.json: what a campaign is (its matrix: tasks × agents × repeats, or the predictions
 * graded) and how it was last run. A second `eval` / `grade-many` on the same folder must ask for the
 * same matrix, so a resumed campaign never mixes two designs; `--extend` adds tasks, agents or
 * repeats (never changes an agent's settings: its earlier runs would then mean something else).
 */

/** grade-many's manifest also names the models graded and where the predictions came from. */
export interface GradeManyManifest extends CampaignManifest {
  kind: "grade-many";
  models: string[];
  predictions: string;
}

export function readManifest(campaignDir: string): CampaignManifest | null {
  return readJsonFile<CampaignManifest>(join(campaignDir, MANIFEST_FILE));
}

export function writeManifest(campaignDir: string, m: CampaignManifest): void {
  writeJsonAtomic(join(campaignDir, MANIFEST_FILE), m);
}

const sameSet = (a: readonly string[], b: readonly string[]) => a.length === b.length && [...a].sort().join("\n") === [...b].sort().join("\n");
const union = (a: readonly string[], b: readonly string[]) => [...a, ...b.filter((x) => !a.includes(x))];

function agentDiff(a: AgentConfig, b: AgentConfig): string | null {
  for (const k of Object.keys({ ...a, ...b }) as Array<keyof AgentConfig>) {
    if (JSON.stringify(a[k]) !== JSON.stringify(b[k])) return `${k} ${JSON.stringify(a[k])} → ${JSON.stringify(b[k])}`;
  }
  return null;
}

/**
 * The manifest to write when `wanted` is asked of a folder that holds `existing` (or nothing): the
 * same matrix (updated_at, argv, engine and concurrency follow the latest command), a wider one with
 * `extend`, else a UsageError saying what differs. `file` names campaign.json in messages.
 */
export function mergeManifest(existing: CampaignManifest | null, wanted: CampaignManifest, opts: { extend?: boolean; file: string }): CampaignManifest {
  if (!existing) return wanted;
  const refuse = (what: string) => {
    throw new UsageError(`${opts.file}: this campaign was made with a different ${what}; run the same matrix to resume it, add --extend to add to it, or use another --out`);
  };
  if (existing.schema_version !== 1) throw new UsageError(`${opts.file}: schema_version ${String(existing.schema_version)} is not one this infradev reads (1)`);
  if (existing.kind !== wanted.kind) throw new UsageError(`${opts.file}: this folder holds a ${existing.kind} campaign, not ${wanted.kind}; use another --out`);
  if (existing.tasks_dir !== wanted.tasks_dir) refuse(`tasks folder (${existing.tasks_dir ?? "the bundled tasks"}, now ${wanted.tasks_dir ?? "the bundled tasks"})`);
  for (const a of wanted.agents) {
    const before = existing.agents.find((x) => x.name === a.name);
    const diff = before && agentDiff(before, a);
    if (diff) throw new UsageError(`${opts.file}: agent "${a.name}" was run with other settings (${diff}); give the new settings another agent name`);
  }
  const newAgents = wanted.agents.filter((a) => !existing.agents.some((x) => x.name === a.name));
  const sameMatrix = sameSet(existing.tasks, wanted.tasks) && newAgents.length === 0 && existing.agents.length === wanted.agents.length && existing.repeats === wanted.repeats;
  const extra = wanted.kind === "grade-many" ? sameSet((existing as GradeManyManifest).models ?? [], (wanted as GradeManyManifest).models) : true;
  if (!(sameMatrix && extra) && !opts.extend) {
    if (!sameSet(existing.tasks, wanted.tasks)) refuse(`set of tasks (${existing.tasks.join(",")}; now ${wanted.tasks.join(",")})`);
    if (existing.repeats !== wanted.repeats) refuse(`number of repeats (${existing.repeats}, now ${wanted.repeats})`);
    if (!extra) refuse(`set of models (${(existing as GradeManyManifest).models.join(",")}; now ${(wanted as GradeManyManifest).models.join(",")})`);
    refuse(`set of agents (${existing.agents.map((a) => a.name).join(",")}; now ${wanted.agents.map((a) => a.name).join(",")})`);
  }
  const merged: CampaignManifest = {
    ...wanted,
    created_at: existing.created_at,
    tasks: union(existing.tasks, wanted.tasks),
    agents: [...existing.agents, ...newAgents],
    repeats: Math.max(existing.repeats, wanted.repeats),
  };
  if (wanted.kind === "grade-many") (merged as GradeManyManifest).models = union((existing as GradeManyManifest).models ?? [], (wanted as GradeManyManifest).models);
  return merged;
}
