import { readFileSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { UsageError } from "../../lib/errors.js";
import { RUN_ID_PART, runId } from "../types.js";

/**
 * Submissions made elsewhere, for `grade-many`. A JSONL file, one prediction per line:
 * `{task_id, model, patch}`, or SWE-bench's `{instance_id, model_name_or_path, model_patch}`
 * (`patch: null` = the model produced none: graded as missing_patch). A folder holds
 * `<task>--<model>.patch` files and/or `*.jsonl` files; anything else in it is an error, so a
 * misnamed file is never silently left out. Parsing is all or nothing: a bad line stops the
 * campaign before any grade runs, with `file:line: what`.
 */

export interface Prediction {
  task_id: string;
  /** The model as given. */
  model: string;
  /** The run id's agent part: the model name with characters a folder name cannot carry replaced. */
  agent: string;
  /** null: no patch at all. */
  patch: string | null;
  /** k of `--r<k>`: the k-th prediction of this task and model, in reading order. */
  repeat: number;
  run_id: string;
  /** `file:line` (or the .patch file) it came from. */
  source: string;
}

/** The model's name as a run-id part (RUN_ID_PART, no `--`): other characters become `_`. */
export function modelRunPart(model: string): string {
  let s = model.replace(/[^A-Za-z0-9._-]/g, "_").replace(/-{2,}/g, "-").replace(/^[^A-Za-z0-9]+/, "");
  if (s.length > 64) s = s.slice(0, 64);
  s = s.replace(/-+$/, "");
  return s || "model";
}

type Raw = Omit<Prediction, "agent" | "repeat" | "run_id">;

function pick(obj: Record<string, unknown>, names: [string, string], where: string, what: string, nullable: boolean): string | null | undefined {
  const [a, b] = names;
  const has = (k: string) => Object.prototype.hasOwnProperty.call(obj, k);
  if (has(a) && has(b) && obj[a] !== obj[b]) throw new UsageError(`${where}: both "${a}" and "${b}" are given and differ; give one`);
  const v = has(a) ? obj[a] : has(b) ? obj[b] : undefined;
  if (v === undefined) return undefined;
  if (v === null && nullable) return null;
  if (typeof v !== "string") throw new UsageError(`${where}: "${has(a) ? a : b}" must be a string${nullable ? " or null" : ""} (${what}), got ${v === null ? "null" : typeof v}`);
  return v;
}

export function parsePredictionLine(line: string, where: string): Raw {
  let obj: unknown;
  try {
    obj = JSON.parse(line);
  } catch (e) {
    throw new UsageError(`${where}: not valid JSON (${(e as Error).message})`);
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) throw new UsageError(`${where}: expected a JSON object {task_id, model, patch}`);
  const o = obj as Record<string, unknown>;
  const task = pick(o, ["task_id", "instance_id"], where, "the task id", false);
  const model = pick(o, ["model", "model_name_or_path"], where, "the model's name", false);
  const patch = pick(o, ["patch", "model_patch"], where, "a unified diff", true);
  if (!task) throw new UsageError(`${where}: no task id (give "task_id", or SWE-bench's "instance_id")`);
  if (!model) throw new UsageError(`${where}: no model (give "model", or SWE-bench's "model_name_or_path")`);
  if (patch === undefined) throw new UsageError(`${where}: no patch (give "patch", or SWE-bench's "model_patch"; null when the model produced none)`);
  return { task_id: task, model, patch, source: where };
}

function readJsonl(file: string, label: string): Raw[] {
  const out: Raw[] = [];
  const lines = readFileSync(file, "utf8").split("\n");
  for (const [i, line] of lines.entries()) {
    if (!line.trim()) continue;
    out.push(parsePredictionLine(line, `${label}:${i + 1}`));
  }
  return out;
}

/** Every prediction in a .jsonl file or a folder (see the module comment), numbered into run ids. */
export function readPredictions(path: string, label = path, opts: { repeatIdentical?: boolean } = {}): Prediction[] {
  let raw: Raw[];
  let st;
  try {
    st = statSync(path);
  } catch {
    throw new UsageError(`--predictions ${label}: no such file or folder`);
  }
  if (st.isDirectory()) {
    raw = [];
    const names = readdirSync(path).filter((n) => !n.startsWith(".")).sort();
    const bad = names.filter((n) => !(n.endsWith(".jsonl") || (n.endsWith(".patch") && n.slice(0, -6).split("--").length === 2)));
    if (bad.length) throw new UsageError(`--predictions ${label}: ${bad.map((b) => join(label, b)).join(", ")}: not a prediction file (a folder holds <task>--<model>.patch or *.jsonl files)`);
    if (!names.length) throw new UsageError(`--predictions ${label}: the folder holds no <task>--<model>.patch or *.jsonl file`);
    for (const n of names) {
      const file = join(path, n);
      if (!statSync(file).isFile()) throw new UsageError(`--predictions ${join(label, n)}: not a regular file`);
      if (n.endsWith(".jsonl")) raw.push(...readJsonl(file, join(label, n)));
      else {
        const [task, model] = basename(n, ".patch").split("--") as [string, string];
        raw.push({ task_id: task, model, patch: readFileSync(file, "utf8"), source: join(label, n) });
      }
    }
  } else {
    raw = readJsonl(path, label);
    if (!raw.length) throw new UsageError(`--predictions ${label}: no prediction in it (one JSON object per line)`);
  }
  checkIdentical(raw, opts.repeatIdentical ?? false);
  return numberPredictions(raw);
}

/**
 * Two predictions with the same task, model and patch are one submission given twice (a file pasted
 * twice, two folders of the same predictions): graded as r1 and r2 it would count twice in every rate.
 * Refused, naming both places, unless the caller means it (`repeatIdentical`: grade it again, e.g. to
 * see the grader's own noise).
 */
export function checkIdentical(preds: Raw[], repeatIdentical: boolean): void {
  if (repeatIdentical) return;
  const seen = new Map<string, string>();
  for (const p of preds) {
    const key = JSON.stringify([p.task_id, p.model, p.patch]);
    const first = seen.get(key);
    if (first !== undefined) {
      throw new UsageError(`${p.source}: the same task, model and patch as ${first}: graded as r1 and r2 it would count twice in every rate; remove one, or pass --repeat-identical to grade it again on purpose`);
    }
    seen.set(key, p.source);
  }
}

/** Run ids: `<task>--<model part>--r<k>`, k counting the same task and model from 1. */
export function numberPredictions(raw: Raw[]): Prediction[] {
  const partOf = new Map<string, string>();
  const modelOf = new Map<string, string>();
  const count = new Map<string, number>();
  return raw.map((r) => {
    if (!RUN_ID_PART.test(r.task_id) || r.task_id.includes("--")) throw new UsageError(`${r.source}: task id "${r.task_id}" is not a task id`);
    const agent = partOf.get(r.model) ?? modelRunPart(r.model);
    const other = modelOf.get(agent);
    if (other !== undefined && other !== r.model) throw new UsageError(`${r.source}: models "${other}" and "${r.model}" both name run folders "${agent}"; rename one`);
    partOf.set(r.model, agent);
    modelOf.set(agent, r.model);
    const key = `${r.task_id}\n${agent}`;
    const repeat = (count.get(key) ?? 0) + 1;
    count.set(key, repeat);
    return { ...r, agent, repeat, run_id: runId(r.task_id, agent, repeat) };
  });
}
