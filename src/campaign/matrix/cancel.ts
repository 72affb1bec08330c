import { existsSync, readdirSync } from "node:fs";
import { hostname } from "node:os";
import { join, resolve } from "node:path";
import { writeJsonAtomic } from "../../lib/json.js";
import { UsageError } from "../../lib/errors.js";
import { readJsonFile } from "../../lib/json.js";
import { FINAL_JOB_STATES, type Engine, type JobState } from "../engines/types.js";
import { engineFor } from "../engines/registry.js";
import { campaignPaths, ownerAlive, type CampaignJobRecord } from "./jobs.js";
import { readManifest } from "./manifest.js";
import { MANIFEST_FILE } from "../types.js";

/**
 * `eval --cancel`: end a campaign's queued and running jobs, from its job
 * records alone. A cluster's jobs are cancelled through their engine (scancel); a local campaign's jobs
 * belong to its `eval` process, which is sent SIGTERM and cancels them itself. Finished runs are kept;
 * the same `eval` command later resumes the cancelled ones.
 */
export async function cancelCampaign(campaignDir: string, say: (line: string) => void): Promise<{ cancelled: string[]; signalled: number[] }> {
  const paths = campaignPaths(resolve(campaignDir));
  if (!readManifest(paths.dir)) throw new UsageError(`--cancel: ${join(paths.dir, MANIFEST_FILE)}: no campaign here`);
  const records = existsSync(paths.jobs)
    ? readdirSync(paths.jobs).filter((f) => f.endsWith(".json")).flatMap((f) => {
        const rec = readJsonFile<CampaignJobRecord>(join(paths.jobs, f));
        return rec && !FINAL_JOB_STATES.includes((rec.state ?? "unknown") as JobState) ? [{ file: join(paths.jobs, f), rec }] : [];
      })
    : [];
  const engines = new Map<string, Engine>();
  const cancelled: string[] = [];
  const signalled = new Set<number>();
  // These engines submitted nothing, so they are not closed (close() cancels what an engine submitted).
  for (const { file, rec } of records) {
    if (rec.engine === "local") {
      if (rec.owner?.host === hostname() && ownerAlive(rec) && !signalled.has(rec.owner.pid)) {
        process.kill(rec.owner.pid, "SIGTERM");
        signalled.add(rec.owner.pid);
        say(`sent SIGTERM to the campaign's eval process ${rec.owner.pid} (it cancels its local jobs)`);
      }
      continue;
    }
    let engine = engines.get(rec.engine);
    if (!engine) {
      engine = await engineFor(rec.engine, {});
      engines.set(rec.engine, engine);
    }
    await engine.cancel(rec.engine_id);
    cancelled.push(rec.job_id);
    say(`${rec.job_id}: cancelled ${rec.engine} job ${rec.engine_id}`);
    // A live campaign process records the end itself when its wait sees it; a dead one cannot.
    if (!ownerAlive(rec)) writeJsonAtomic(file, { ...rec, state: "cancelled", reason: "eval --cancel" });
  }
  if (!cancelled.length && !signalled.size) say("no queued or running job in this campaign");
  return { cancelled, signalled: [...signalled] };
}
