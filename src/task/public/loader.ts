import { isPathInside, isRelativeInside } from "../../lib/path-validation.js";
import { existsSync, lstatSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { join, relative, resolve, sep } from "node:path";
import { parse as parseYaml } from "yaml";
import { bundledTasksDir } from "../../lib/paths.js";
import { TaskError, formatZodIssues } from "./errors.js";
import { type TaskSpec, TaskSpecSchema } from "./schema.js";

/**
 * The public door into a task folder: `loadPublicTask` gives what an agent may see — the spec
 * (without the grader's fields), the prompt, and the base snapshot's location. It never stats, opens
 * or returns anything under `hidden/`, and works on a public export that has no `hidden/` at all.
 * The grader's door (`loadGraderTask`, which opens `hidden/`) is task/hidden/grader-task.ts, a room
 * that server/ and tools/ may not import (.dependency-cruiser.cjs).
 */

export type PublicSpec = Omit<TaskSpec, "hidden" | "world_sizes" | "official_tests" | "pass_to_pass">;

export interface PublicTask {
  readonly id: string;
  readonly spec: PublicSpec;
  readonly prompt: string;
  /** Where the pre-PR snapshot comes from: a folder (dir source) or a git URL + base commit. */
  readonly source: { kind: "dir"; dir: string } | { kind: "git"; url: string; base: string };
  /** Display name of the task.yaml, for messages (relative to the tasks root). */
  readonly label: string;
  /**
   * env.pythonpath resolved: the real host path of each folder, in order (checked by
   * taskPythonPath). Sandboxes copy them and put them first on PYTHONPATH, read-only.
   */
  readonly pythonPath: string[];
}


/** Whether `p` lies inside `root` (or is it), lexically. */
export const within = isPathInside;

export function readYaml(file: string, label: string): unknown {
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
    throw new TaskError(`task: unknown task "${idOrPath}" in ${resolve(tasksRoot)}${existsSync(tasksRoot) ? "" : " (no such folder)"}${known.length ? ` (known: ${known.join(", ")})` : ""}`);
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
  if (spec.pass_to_pass) {
    const official = spec.official_tests?.paths;
    if (!official) throw new TaskError(`${label}: pass_to_pass: needs official_tests.paths (without it every module of the test dirs is official already)`);
    const both = spec.pass_to_pass.paths.filter((p) => official.includes(p));
    if (both.length) throw new TaskError(`${label}: pass_to_pass.paths: "${both[0]}" is in official_tests.paths too (a module is one or the other)`);
    const bad = spec.pass_to_pass.deselect.find((d) => !spec.pass_to_pass!.paths.includes(d.id.split("::")[0]!));
    if (bad) throw new TaskError(`${label}: pass_to_pass.deselect: "${bad.id}" is not in a module of pass_to_pass.paths`);
  }
  if (spec.source.kind === "dir") {
    const src = resolve(taskDir, spec.source.path);
    if (within(hiddenDir, src) || within(src, hiddenDir)) {
      throw new TaskError(`${label}: source.path: the snapshot must not overlap hidden.dir "${spec.hidden.dir}", got "${spec.source.path}"`);
    }
  }
  return spec;
}

/** The real path of `p`, which must stay inside the task folder (a symlink out is an error). */
export function realInside(taskDir: string, p: string, label: string, field: string): string {
  const real = realpathSync(p);
  if (!within(realpathSync(taskDir), real)) throw new TaskError(`${label}: ${field}: resolves outside the task folder (symlink?): ${p}`);
  return real;
}

/** A path as messages name it: relative to the working directory when it lies under it, else absolute. */
export function displayPath(p: string): string {
  const rel = relative(process.cwd(), p);
  return rel && isRelativeInside(rel) ? rel : resolve(p);
}

/**
 * env.pythonpath, checked: each entry a real folder inside the task folder and outside hidden.dir
 * (the stand-ins are the public part: the agent's sandbox runs with them too), with no link in it
 * that leads out of the task folder or to a folder (the host copies the folder for every sandbox
 * and must not be led elsewhere). Returns the real paths, in order.
 */
export function taskPythonPath(taskDir: string, spec: TaskSpec, label: string): string[] {
  const root = realpathSync(taskDir);
  const hiddenDir = resolve(taskDir, spec.hidden.dir);
  const hiddenReal = existsSync(hiddenDir) ? realpathSync(hiddenDir) : hiddenDir;
  return spec.env.pythonpath.map((rel, i) => {
    const field = `env.pythonpath.${i}`;
    const p = resolve(taskDir, rel);
    let st;
    try {
      st = statSync(p);
    } catch {
      throw new TaskError(`${label}: ${field}: folder "${rel}" does not exist in the task folder`);
    }
    if (!st.isDirectory()) throw new TaskError(`${label}: ${field}: "${rel}" is not a folder`);
    const real = realInside(taskDir, p, label, field);
    if (within(hiddenReal, real) || within(real, hiddenReal)) {
      throw new TaskError(`${label}: ${field}: "${rel}" overlaps hidden.dir "${spec.hidden.dir}" (stand-ins are public: the agent's sandbox uses them too)`);
    }
    checkLinks(real, root, `${label}: ${field}`);
    return real;
  });
}

/** Every link under `dir` must resolve to a file inside `root`: a link out, a dangling one or one to a folder is an error. */
function checkLinks(dir: string, root: string, where: string): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    if (e.isSymbolicLink()) {
      let target: string;
      try {
        target = realpathSync(p);
      } catch {
        throw new TaskError(`${where}: link ${displayPath(p)} leads nowhere`);
      }
      if (!within(root, target)) throw new TaskError(`${where}: link ${displayPath(p)} resolves outside the task folder (to ${target})`);
      if (!statSync(target).isFile()) throw new TaskError(`${where}: link ${displayPath(p)} leads to a folder; only links to files are copied`);
    } else if (e.isDirectory()) {
      checkLinks(p, root, where);
    } else if (!e.isFile() && !lstatSync(p).isFile()) {
      throw new TaskError(`${where}: ${displayPath(p)} is neither a file, a folder nor a link`);
    }
  }
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
  // official_tests names the post-PR test modules (new files among them): the grader's too.
  // pass_to_pass likewise (which of the repository's own tests are held against a patch).
  const { hidden: _hidden, world_sizes: _worldSizes, official_tests: _officialTests, pass_to_pass: _passToPass, ...rest } = spec;
  // The post-PR commit of a git source names where the answer is: not part of the public view.
  const publicSpec = spec.source.kind === "git" ? { ...rest, source: { kind: "git" as const, url: spec.source.url, base: spec.source.base } } : rest;
  const pythonPath = taskPythonPath(taskDir, spec, label);
  return { id: spec.id, spec: publicSpec, prompt, source, label, pythonPath };
}
