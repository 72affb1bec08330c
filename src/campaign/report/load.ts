import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { UsageError } from "../../lib/errors.js";
import { readRegularText } from "../../lib/safe-fs.js";
import type { GradeResult } from "../../grader/grade/types.js";
import type { Trajectory } from "../trajectory/types.js";
import { ATIF_FILE, fromAtif } from "../trajectory/atif.js";
import { GRADE_FILE, MANIFEST_FILE, PATCH_FILE, RUN_RECORD_FILE, TRACE_FILE, type CampaignManifest, type RunRecord } from "../types.js";

/**
 * Reads a campaign folder as `report` needs it: only files, never a process, so a report can be
 * made again at any time (and while the campaign still runs: a run.json not yet written is a run
 * in progress, not an error). Files are read without following links: a run folder holds what an
 * agent produced (its patch), and the report never reads through something planted there.
 */

const MAX_JSON_BYTES = 64 * 1024 * 1024;
const MAX_PATCH_BYTES = 8 * 1024 * 1024;
const MAX_TRACE_BYTES = 32 * 1024 * 1024;

export interface LoadedRun {
  dir: string;
  record: RunRecord;
  /** null: not graded (no grade.json yet, or one that is not a grade: see gradeProblem). */
  grade: GradeResult | null;
  /** Why a grade.json that exists was not used. */
  gradeProblem: string | null;
  /** The submission's text; null when there is no patch.diff. */
  patch: string | null;
  /** `paths` of every pytest_run call in trace.jsonl (the tests the agent ran through our server). */
  pytestRuns: string[][];
  /** A run imported from a Harbor ATIF trajectory.json (no trace.jsonl of ours): its steps. */
  imported?: Trajectory;
}

export interface LoadedCampaign {
  dir: string;
  manifest: CampaignManifest | null;
  runs: LoadedRun[];
  /** Run folders skipped, each with why (in progress: no run.json; unreadable files). */
  skipped: Array<{ run: string; why: string }>;
}

function readJson<T>(file: string): T {
  const { text, truncated } = readRegularText(file, MAX_JSON_BYTES);
  if (truncated) throw new Error(`${file}: over ${MAX_JSON_BYTES} bytes`);
  return JSON.parse(text) as T;
}

function isRunRecord(v: unknown): v is RunRecord {
  const r = v as Partial<RunRecord> | null;
  return !!r && typeof r === "object" && r.schema_version === 1 && typeof r.run_id === "string" && typeof r.task_id === "string" && typeof r.agent === "string";
}

function isGradeResult(v: unknown): v is GradeResult {
  const g = v as Partial<GradeResult> | null;
  return !!g && typeof g === "object" && typeof g.status === "string" && !!g.official && !!g.with_probes && Array.isArray(g.cases);
}

function pytestRunsOf(traceText: string): string[][] {
  const out: string[][] = [];
  for (const line of traceText.split("\n")) {
    if (!line.trim()) continue;
    try {
      const t = JSON.parse(line) as { tool?: unknown; args?: { paths?: unknown } };
      if (t.tool !== "pytest_run") continue;
      const paths = Array.isArray(t.args?.paths) ? t.args.paths.filter((p): p is string => typeof p === "string") : [];
      out.push(paths);
    } catch {
      // A torn last line (the harness killed mid-write) is not a reason to lose the others.
    }
  }
  return out;
}

export function loadCampaign(dirArg: string): LoadedCampaign {
  const dir = resolve(dirArg);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new UsageError(`report: ${dirArg}: no such campaign folder`);
  const runsDir = join(dir, "runs");
  // `infradev run --out D` writes one run's files into D itself: that folder is a campaign of one run.
  const single = !existsSync(runsDir) && (existsSync(join(dir, RUN_RECORD_FILE)) || atifFileOf(dir) !== null);
  if (!single && (!existsSync(runsDir) || !statSync(runsDir).isDirectory())) {
    throw new UsageError(`report: ${dirArg}: not a campaign folder (neither runs/ nor a run.json in it; made by infradev eval, grade-many or run --out)`);
  }
  let manifest: CampaignManifest | null = null;
  if (existsSync(join(dir, MANIFEST_FILE))) {
    try {
      manifest = readJson<CampaignManifest>(join(dir, MANIFEST_FILE));
    } catch (e) {
      throw new UsageError(`report: ${join(dir, MANIFEST_FILE)}: not readable JSON (${(e as Error).message})`);
    }
  }
  const folders = single ? [{ name: basename(dir), runDir: dir }] : readdirSync(runsDir).sort().map((name) => ({ name, runDir: join(runsDir, name) }));
  const runs: LoadedRun[] = [];
  const skipped: LoadedCampaign["skipped"] = [];
  for (const { name, runDir } of folders) {
    const recordFile = join(runDir, RUN_RECORD_FILE);
    const atif = existsSync(recordFile) ? null : atifFileOf(runDir);
    if (atif) {
      try {
        runs.push(importedRun(runDir, name, readJson<unknown>(atif)));
      } catch (e) {
        skipped.push({ run: name, why: `${atif}: ${(e as Error).message}` });
      }
      continue;
    }
    if (!existsSync(recordFile)) {
      skipped.push({ run: name, why: "no run.json yet (in progress, or killed before it ended)" });
      continue;
    }
    try {
      const record = readJson<unknown>(recordFile);
      if (!isRunRecord(record)) throw new Error("not a run record (schema_version 1 with run_id, task_id, agent)");
      let grade: GradeResult | null = null;
      let gradeProblem: string | null = null;
      if (existsSync(join(runDir, GRADE_FILE))) {
        try {
          const g = readJson<unknown>(join(runDir, GRADE_FILE));
          if (isGradeResult(g)) grade = g;
          else gradeProblem = "grade.json is not a grade result (status, official, with_probes, cases)";
        } catch (e) {
          gradeProblem = `grade.json unreadable: ${(e as Error).message}`;
        }
      }
      const patchFile = join(runDir, PATCH_FILE);
      const patch = existsSync(patchFile) ? readRegularText(patchFile, MAX_PATCH_BYTES).text : null;
      const traceFile = join(runDir, TRACE_FILE);
      const pytestRuns = existsSync(traceFile) ? pytestRunsOf(readRegularText(traceFile, MAX_TRACE_BYTES).text) : [];
      runs.push({ dir: runDir, record, grade, gradeProblem, patch, pytestRuns });
    } catch (e) {
      skipped.push({ run: name, why: (e as Error).message });
    }
  }
  return { dir, manifest, runs, skipped };
}

/** A Harbor-style run: trajectory.json in the folder, or agent/trajectory.json (a Harbor trial folder). */
function atifFileOf(runDir: string): string | null {
  for (const f of [join(runDir, ATIF_FILE), join(runDir, "agent", ATIF_FILE)]) if (existsSync(f) && statSync(f).isFile()) return f;
  return null;
}

/**
 * A run known only by its ATIF trajectory (made by Harbor or by `infradev export`): the record is
 * what the trajectory says (agent, model, tokens); what it cannot say is null or "unknown". A
 * grade.json beside it is read as for any run; without one the run is listed as not graded.
 */
function importedRun(runDir: string, name: string, doc: unknown): LoadedRun {
  const d = doc as Record<string, any>;
  const ours = (d?.extra?.infradev ?? {}) as Record<string, any>;
  const traj = fromAtif(doc, String(ours.run_id ?? d.session_id ?? name));
  const fm = (d.final_metrics ?? {}) as Record<string, any>;
  const n = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : null);
  const task = typeof ours.task_id === "string" ? ours.task_id : name.split("--")[0] ?? name;
  const tools = traj.events.filter((e) => e.kind === "tool");
  const toolsUsed: Record<string, number> = {};
  for (const t of tools) toolsUsed[t.tool!] = (toolsUsed[t.tool!] ?? 0) + 1;
  const stamps = traj.events.map((e) => (e.ts ? Date.parse(e.ts) : NaN)).filter((x) => Number.isFinite(x));
  const record: RunRecord = {
    schema_version: 1,
    run_id: traj.run_id,
    task_id: task,
    category: "unknown",
    type: "unknown",
    agent: String(ours.agent ?? d.agent?.name ?? "unknown"),
    harness: (["codex", "opencode"].includes(d.agent?.name) ? d.agent.name : "predictions") as RunRecord["harness"],
    harness_version: typeof d.agent?.version === "string" ? d.agent.version : null,
    model: String(d.agent?.model_name ?? "unknown"),
    skill: d.agent?.extra?.skill === true,
    repeat: n(ours.repeat) ?? 1,
    started_at: stamps.length ? new Date(Math.min(...stamps)).toISOString() : "",
    ended_at: stamps.length ? new Date(Math.max(...stamps)).toISOString() : "",
    wall_s: n(ours.wall_s) ?? (stamps.length ? (Math.max(...stamps) - Math.min(...stamps)) / 1000 : 0),
    time_limit_min: null,
    exit_reason: (ours.exit_reason ?? "submitted") as RunRecord["exit_reason"],
    error: null,
    attempts: 1,
    recoveries_used: 0,
    turns: traj.events.filter((e) => e.kind === "turn").length || null,
    tool_calls: tools.length,
    tools_used: toolsUsed,
    tokens: { input: n(fm.total_prompt_tokens), cached_input: n(fm.total_cached_tokens), output: n(fm.total_completion_tokens), reasoning: n(ours.reasoning_tokens) },
    patch_bytes: 0,
    submitted: tools.some((t) => t.tool === "submit"),
    grade: null,
  };
  let grade: GradeResult | null = null;
  let gradeProblem: string | null = null;
  if (existsSync(join(runDir, GRADE_FILE))) {
    const g = readJson<unknown>(join(runDir, GRADE_FILE));
    if (isGradeResult(g)) grade = g;
    else gradeProblem = "grade.json is not a grade result";
  }
  const patchFile = join(runDir, PATCH_FILE);
  const patch = existsSync(patchFile) ? readRegularText(patchFile, MAX_PATCH_BYTES).text : null;
  if (patch) record.patch_bytes = Buffer.byteLength(patch);
  const pytestRuns = tools.filter((t) => t.tool === "pytest_run").map((t) => {
    const p = (t.args as { paths?: unknown })?.paths;
    return Array.isArray(p) ? p.filter((x): x is string => typeof x === "string") : [];
  });
  return { dir: runDir, record, grade, gradeProblem, patch, pytestRuns, imported: traj };
}
