import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { parse as parseYaml } from "yaml";
import { bundledTasksDir } from "../lib/paths.js";
import { TaskError, formatZodIssues } from "./errors.js";
import { AdversarialIndexSchema, type AdversarialEntry, type TaskSpec, TaskSpecSchema } from "./schema.js";

/**
 * Two doors into a task folder.
 *
 * - `loadPublicTask` gives what an agent may see: spec (without the hidden layout), prompt, and the
 *   base snapshot's location. It never stats, opens or returns anything under `hidden/`, and works on a
 *   public export that has no `hidden/` at all.
 * - `loadGraderTask` additionally opens `hidden/` (golden patch, post-PR tests, probes, adversarial
 *   patches). Only the grader and the task-author tools call it.
 */

export type PublicSpec = Omit<TaskSpec, "hidden" | "world_sizes">;

export interface PublicTask {
  readonly id: string;
  readonly spec: PublicSpec;
  readonly prompt: string;
  /** Where the pre-PR snapshot comes from: a folder (dir source) or a git URL + base commit. */
  readonly source: { kind: "dir"; dir: string } | { kind: "git"; url: string; base: string };
  /** Display name of the task.yaml, for messages (relative to the tasks root). */
  readonly label: string;
}

export interface AdversarialPatch extends AdversarialEntry {
  readonly patchPath: string;
}

export interface HiddenParts {
  readonly goldenPatch: string;
  readonly hollowPatch: string | null;
  /** Post-PR official tests, a tree rooted at the repo root (only paths under test_dirs). */
  readonly testsDir: string;
  readonly probesDir: string;
  readonly adversarial: AdversarialPatch[];
}

export interface GraderTask extends PublicTask {
  readonly hidden: HiddenParts;
  /** The task folder itself (the grader needs it for content hashing). */
  readonly taskDir: string;
  readonly fullSpec: TaskSpec;
}

function within(root: string, p: string): boolean {
  const rel = relative(root, p);
  return rel === "" || (!rel.startsWith("..") && !isAbsolute(rel));
}

function readYaml(file: string, label: string): unknown {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    throw new TaskError(`${label}: cannot read (${(e as NodeJS.ErrnoException).code ?? String(e)})`);
  }
  try {
    return parseYaml(text);
  } catch (e) {
    throw new TaskError(`${label}: not valid YAML: ${(e as Error).message.split("\n")[0]}`);
  }
}

/** Resolves a task id (in tasksRoot) or a path to a task folder. */
export function resolveTaskDir(idOrPath: string, tasksRoot = bundledTasksDir()): string {
  if (idOrPath.includes("\0")) throw new TaskError("task: NUL in task id");
  if (idOrPath.includes("/") || idOrPath.startsWith(".")) {
    const dir = resolve(idOrPath);
    if (!existsSync(join(dir, "task.yaml"))) throw new TaskError(`${idOrPath}: no task.yaml in this folder`);
    return dir;
  }
  if (!/^[a-z0-9][a-z0-9-]*$/.test(idOrPath)) throw new TaskError(`task: "${idOrPath}" is not a task id (lowercase letters, digits, '-')`);
  const dir = join(tasksRoot, idOrPath);
  if (!existsSync(join(dir, "task.yaml"))) {
    const known = listTaskIds(tasksRoot);
    throw new TaskError(`task: unknown task "${idOrPath}" in ${tasksRoot}${known.length ? ` (known: ${known.join(", ")})` : ""}`);
  }
  return dir;
}

export function listTaskIds(tasksRoot = bundledTasksDir()): string[] {
  if (!existsSync(tasksRoot)) return [];
  return readdirSync(tasksRoot, { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(tasksRoot, d.name, "task.yaml")))
    .map((d) => d.name)
    .sort();
}

/** Parses and validates task.yaml, including that every path stays inside the task folder. */
export function loadTaskSpec(taskDir: string, label = `${taskDir}/task.yaml`): TaskSpec {
  const raw = readYaml(join(taskDir, "task.yaml"), label);
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new TaskError(`${label}: expected a mapping at the top level`);
  const parsed = TaskSpecSchema.safeParse(raw);
  if (!parsed.success) throw new TaskError(formatZodIssues(label, parsed.error, raw));
  const spec = parsed.data;
  const folderName = taskDir.split(sep).filter(Boolean).pop();
  if (folderName !== spec.id) throw new TaskError(`${label}: id: expected the folder name "${folderName}", got "${spec.id}"`);
  const hiddenDir = resolve(taskDir, spec.hidden.dir);
  for (const [field, p] of Object.entries(spec.hidden)) {
    if (field !== "dir" && !within(hiddenDir, resolve(taskDir, p))) {
      throw new TaskError(`${label}: hidden.${field}: must lie inside hidden.dir "${spec.hidden.dir}", got "${p}"`);
    }
  }
  if (spec.source.kind === "dir") {
    const src = resolve(taskDir, spec.source.path);
    if (within(hiddenDir, src) || within(src, hiddenDir)) {
      throw new TaskError(`${label}: source.path: the snapshot must not overlap hidden.dir "${spec.hidden.dir}", got "${spec.source.path}"`);
    }
  }
  return spec;
}

function realInside(taskDir: string, p: string, label: string, field: string): string {
  const real = realpathSync(p);
  if (!within(realpathSync(taskDir), real)) throw new TaskError(`${label}: ${field}: resolves outside the task folder (symlink?): ${p}`);
  return real;
}

/** A path as messages name it: relative to the working directory when it lies under it, else absolute. */
function displayPath(p: string): string {
  const rel = relative(process.cwd(), p);
  return rel && !rel.startsWith("..") && !isAbsolute(rel) ? rel : resolve(p);
}

export function loadPublicTask(idOrPath: string, tasksRoot = bundledTasksDir()): PublicTask {
  const taskDir = resolveTaskDir(idOrPath, tasksRoot);
  const label = displayPath(join(taskDir, "task.yaml"));
  const spec = loadTaskSpec(taskDir, label);
  const promptFile = join(taskDir, "prompt.md");
  if (!existsSync(promptFile)) throw new TaskError(`${label.replace(/task\.yaml$/, "prompt.md")}: missing (every task needs the agent's prompt)`);
  const prompt = readFileSync(promptFile, "utf8");
  let source: PublicTask["source"];
  if (spec.source.kind === "dir") {
    const dir = resolve(taskDir, spec.source.path);
    if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new TaskError(`${label}: source.path: folder "${spec.source.path}" does not exist`);
    const real = realInside(taskDir, dir, label, "source.path");
    const hiddenReal = existsSync(resolve(taskDir, spec.hidden.dir)) ? realpathSync(resolve(taskDir, spec.hidden.dir)) : null;
    if (hiddenReal && (within(hiddenReal, real) || within(real, hiddenReal))) {
      throw new TaskError(`${label}: source.path: resolves into hidden.dir (symlink?)`);
    }
    source = { kind: "dir", dir: real };
  } else {
    source = { kind: "git", url: spec.source.url, base: spec.source.base };
  }
  // world_sizes is the grader's: which world sizes a patch is checked at is not the agent's to read.
  const { hidden: _hidden, world_sizes: _worldSizes, ...rest } = spec;
  // The post-PR commit of a git source names where the answer is: not part of the public view.
  const publicSpec = spec.source.kind === "git" ? { ...rest, source: { kind: "git" as const, url: spec.source.url, base: spec.source.base } } : rest;
  return { id: spec.id, spec: publicSpec, prompt, source, label };
}

export function loadGraderTask(idOrPath: string, tasksRoot = bundledTasksDir()): GraderTask {
  const pub = loadPublicTask(idOrPath, tasksRoot);
  const taskDir = resolveTaskDir(idOrPath, tasksRoot);
  const spec = loadTaskSpec(taskDir, pub.label);
  const need = (field: keyof TaskSpec["hidden"], kind: "file" | "dir"): string => {
    const p = resolve(taskDir, spec.hidden[field]);
    if (!existsSync(p)) throw new TaskError(`${pub.label}: hidden.${field}: "${spec.hidden[field]}" does not exist (is this a public export without hidden/?)`);
    const st = statSync(p);
    if (kind === "file" ? !st.isFile() : !st.isDirectory()) throw new TaskError(`${pub.label}: hidden.${field}: expected a ${kind}, got "${spec.hidden[field]}"`);
    return realInside(taskDir, p, pub.label, `hidden.${field}`);
  };
  const goldenPatch = need("golden_patch", "file");
  const testsDir = need("tests", "dir");
  const probesDir = need("probes", "dir");
  const hollowPath = resolve(taskDir, spec.hidden.hollow_patch);
  const hollowPatch = existsSync(hollowPath) ? realInside(taskDir, hollowPath, pub.label, "hidden.hollow_patch") : null;
  const advDir = resolve(taskDir, spec.hidden.adversarial);
  let adversarial: AdversarialPatch[] = [];
  const indexFile = join(advDir, "index.yaml");
  if (existsSync(indexFile)) {
    const advLabel = pub.label.replace(/task\.yaml$/, `${spec.hidden.adversarial}/index.yaml`);
    const raw = readYaml(indexFile, advLabel);
    const parsed = AdversarialIndexSchema.safeParse(raw);
    if (!parsed.success) throw new TaskError(formatZodIssues(advLabel, parsed.error, raw));
    adversarial = parsed.data.map((entry, i) => {
      const p = resolve(advDir, entry.patch);
      if (!existsSync(p)) throw new TaskError(`${advLabel}: ${i}.patch: "${entry.patch}" does not exist`);
      return { ...entry, patchPath: realInside(taskDir, p, advLabel, `${i}.patch`) };
    });
  }
  // The post-PR tests replace the test dirs: anything else in that tree would be a silent extra.
  for (const top of readdirSync(testsDir)) {
    if (!spec.test_dirs.some((d) => d === top || d.split("/")[0] === top)) {
      throw new TaskError(`${pub.label}: hidden.tests: "${top}" is not under any of test_dirs (${spec.test_dirs.join(", ")})`);
    }
  }
  return { ...pub, taskDir, fullSpec: spec, hidden: { goldenPatch, hollowPatch, testsDir, probesDir, adversarial } };
}
