import { existsSync, readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import type { GradeResult } from "../../grader/grade/types.js";
import { UsageError } from "../../lib/errors.js";
import { readJsonFile } from "../../lib/json.js";
import { formatTable } from "../../lib/text-table.js";
import { FINAL_JOB_STATES, type JobState } from "../engines/types.js";
import { engineFor } from "../engines/registry.js";
import { campaignPaths, ownerAlive, yesNo, type CampaignJobRecord } from "./jobs.js";
import { readManifest } from "./manifest.js";
import { GRADE_FILE, MANIFEST_FILE, RUN_RECORD_FILE, runId, type CampaignManifest, type RunRecord } from "../types.js";

/**
 * `eval status CAMPAIGN`: one row per run, from the folder alone (run.json, grade.json, the job
 * records) plus, for jobs an engine still holds, that engine's word. A local job whose campaign
 * process is gone reads `interrupted`: the next `eval` resumes it.
 */

export type RunState = "done" | "pending" | "interrupted" | "incomplete" | JobState;

export interface RunStatusRow {
  run_id: string;
  state: RunState;
  exit_reason: string | null;
  grade: string | null;
  resolved_a: boolean | null;
  resolved_b: boolean | null;
  engine_id: string | null;
  reason: string | null;
}

/** The run ids a campaign consists of: its matrix (eval), and every run folder present. */
export function campaignRunIds(dir: string, m: CampaignManifest): string[] {
  const ids = m.kind === "eval" ? m.tasks.flatMap((t) => m.agents.flatMap((a) => Array.from({ length: m.repeats }, (_, i) => runId(t, a.name, i + 1)))) : [];
  const runs = join(dir, "runs");
  const present = existsSync(runs) ? readdirSync(runs, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort() : [];
  return [...ids, ...present.filter((p) => !ids.includes(p))];
}

export async function campaignStatus(campaignDir: string): Promise<{ manifest: CampaignManifest; rows: RunStatusRow[] }> {
  const paths = campaignPaths(resolve(campaignDir));
  const manifest = readManifest(paths.dir);
  if (!manifest) throw new UsageError(`eval status: ${join(paths.dir, MANIFEST_FILE)}: no campaign here (made by \`infradev eval --out\` or \`grade-many --out\`)`);
  const rows: RunStatusRow[] = [];
  const askEngine = new Map<string, RunStatusRow[]>();
  for (const id of campaignRunIds(paths.dir, manifest)) {
    const runDir = join(paths.runs, id);
    const rec = readJsonFile<RunRecord>(join(runDir, RUN_RECORD_FILE));
    const grade = readJsonFile<GradeResult>(join(runDir, GRADE_FILE));
    const job = readJsonFile<CampaignJobRecord>(join(paths.jobs, `${id}.json`));
    const row: RunStatusRow = {
      run_id: id,
      state: "pending",
      exit_reason: rec?.exit_reason ?? null,
      grade: grade?.status ?? null,
      resolved_a: grade?.official.resolved ?? null,
      resolved_b: grade?.with_probes.resolved ?? null,
      engine_id: job?.engine_id ?? null,
      reason: job?.reason ?? null,
    };
    if (rec?.ended_at && grade) row.state = "done";
    else if (job) {
      const s = (job.state ?? "unknown") as JobState;
      if (FINAL_JOB_STATES.includes(s)) row.state = s === "done" ? "incomplete" : s;
      else if (job.engine === "local") row.state = ownerAlive(job) ? s : "interrupted";
      else {
        row.state = s;
        askEngine.set(job.engine, [...(askEngine.get(job.engine) ?? []), row]);
      }
    }
    rows.push(row);
  }
  // Jobs of an engine that outlives this process (a cluster scheduler): what it says now.
  for (const [name, waiting] of askEngine) {
    try {
      // Where each job's exit file is (logs/<job id>.out + .exit.json): the slurm engine's answer once the scheduler forgot it.
      const engine = await engineFor(name, { slurm: { jobOutputs: Object.fromEntries(waiting.map((r) => [r.engine_id!, join(paths.logs, `${r.run_id}.out`)])) } });
      try {
        const states = await engine.status(waiting.map((r) => r.engine_id!));
        waiting.forEach((r, i) => {
          const st = states[i]!;
          r.state = st.state === "done" ? "incomplete" : st.state;
          r.reason = st.reason ?? r.reason;
        });
      } finally {
        await engine.close();
      }
    } catch (e) {
      for (const r of waiting) r.reason = `engine ${name}: ${(e as Error).message}`;
    }
  }
  return { manifest, rows };
}

export function formatStatus(rows: RunStatusRow[]): string {
  const count = (s: string) => rows.filter((r) => r.state === s).length;
  const states = [...new Set(rows.map((r) => r.state))];
  const table = formatTable(
    ["run", "state", "exit reason", "grade", "resolved A/B"],
    rows.map((r) => [r.run_id, r.state, r.exit_reason ?? "-", r.grade ?? "-", r.grade ? `${yesNo(r.resolved_a)}/${yesNo(r.resolved_b)}` : "-"]),
  );
  return `${table}\n${rows.length} run(s): ${states.map((s) => `${count(s)} ${s}`).join(", ")}`;
}
