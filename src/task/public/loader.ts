import { existsSync, readdirSync, readFileSync, realpathSync, statSync } from "node:fs";
import { isAbsolute, join, relative, resolve, sep } from "node:path";
import { parse as parseYaml } from "yaml";
import { bundledTasksDir } from "../../lib/paths.js";
import { TaskError, formatZodIssues } from "./errors.js";
import { AdversarialIndexSchema, type AdversarialEntry, type GitSource, type TaskSpec, TaskSpecSchema } from "./schema.js";
import { deriveGitParts, type DerivedGitParts } from "./snapshot.js";
import { AlternativesIndexSchema, MutantsFileSchema, PromisesFileSchema, type AlternativeEntry, type EquivalentMutant, type TaskPromise } from "../hidden/schema.js";
import { yamlLineOf } from "./yaml-lines.js";

/**
 * Two doors into a task folder.
 *
 * - `loadPublicTask` gives what an agent may see: spec (without the hidden layout), prompt, and the
 *   base snapshot's location. It never stats, opens or returns anything under `hidden/`, and works on a
 *   public export that has no `hidden/` at all.
 * - `loadGraderTask` additionally opens `hidden/` (golden patch, post-PR tests, probes, adversarial
 *   patches). Only the grader and the task-author tools call it.
 */

export type PublicSpec = Omit<TaskSpec, "hidden" | "world_sizes" | "official_tests">;

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

/** A promise of hidden/promises.yaml, with the line of prompt.md it comes from. */
export interface ResolvedPromise extends TaskPromise {
  readonly promptLine: number;
  /** Where it is declared: `<file>:<line>`. */
  readonly declaredAt: string;
}

export interface AlternativePatch extends AlternativeEntry {
  readonly patchPath: string;
}

export interface HiddenParts {
  readonly goldenPatch: string;
  /** hidden/promises.yaml; null when the task has none (grading works without; the check fails). */
  readonly promises: ResolvedPromise[] | null;
  /** The file the promises came from (for messages), set when promises is. */
  readonly promisesFile: string | null;
  /** hidden/alternatives/index.yaml: correct patches that differ from golden (positive controls). */
  readonly alternatives: AlternativePatch[];
  /** hidden/mutants.yaml: mutant ids the author judged equivalent, with the reason. */
  readonly equivalentMutants: EquivalentMutant[];
  readonly hollowPatch: string | null;
  /** Post-PR official tests, a tree rooted at the repo root (only paths under test_dirs). */
  readonly testsDir: string;
  readonly probesDir: string;
  readonly adversarial: AdversarialPatch[];
  /** Display path of hidden/adversarial/index.yaml (messages name it). */
  readonly adversarialIndex: string | null;
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
export function displayPath(p: string): string {
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
  // official_tests names the post-PR test modules (new files among them): the grader's too.
  const { hidden: _hidden, world_sizes: _worldSizes, official_tests: _officialTests, ...rest } = spec;
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
  // A git source with a merge commit may leave the golden patch and the post-PR tests upstream:
  // derived from the git cache (tasks/snapshot.ts deriveGitParts), never copied into the task.
  // Derived lazily (on the first read of goldenPatch / testsDir): loading the task to list it, to
  // see that it cannot run here, or to read its promises needs no git cache.
  const canDerive = spec.source.kind === "git" && !!spec.source.merge;
  const deriveGolden = canDerive && !existsSync(resolve(taskDir, spec.hidden.golden_patch));
  const deriveTests = canDerive && !existsSync(resolve(taskDir, spec.hidden.tests));
  let derivedOnce: DerivedGitParts | null = null;
  const derived = () => (derivedOnce ??= derivedParts(spec, pub.label));
  const goldenPatch = deriveGolden ? "" : need("golden_patch", "file");
  const testsDir = deriveTests ? "" : need("tests", "dir");
  const probesDir = need("probes", "dir");
  const hollowPath = resolve(taskDir, spec.hidden.hollow_patch);
  const hollowPatch = existsSync(hollowPath) ? realInside(taskDir, hollowPath, pub.label, "hidden.hollow_patch") : null;
  const hiddenDir = resolve(taskDir, spec.hidden.dir);
  const hiddenLabel = (rel: string) => pub.label.replace(/task\.yaml$/, `${spec.hidden.dir}/${rel}`);
  const promises = loadPromises(taskDir, hiddenDir, hiddenLabel("promises.yaml"), pub.prompt, pub.label.replace(/task\.yaml$/, "prompt.md"));
  const known = promises ? new Set(promises.map((p) => p.id)) : null;
  const advDir = resolve(taskDir, spec.hidden.adversarial);
  let adversarial: AdversarialPatch[] = [];
  const indexFile = join(advDir, "index.yaml");
  const advLabel = pub.label.replace(/task\.yaml$/, `${spec.hidden.adversarial}/index.yaml`);
  if (existsSync(indexFile)) {
    const text = readFileSync(indexFile, "utf8");
    const raw = readYaml(indexFile, advLabel);
    const parsed = AdversarialIndexSchema.safeParse(raw);
    if (!parsed.success) throw new TaskError(formatZodIssues(advLabel, parsed.error, raw));
    adversarial = parsed.data.map((entry, i) => {
      const p = resolve(advDir, entry.patch);
      if (!existsSync(p)) throw new TaskError(`${advLabel}:${yamlLineOf(text, [i, "patch"]) ?? "?"}: ${i}.patch: "${entry.patch}" does not exist`);
      if (known) {
        entry.breaks.forEach((b, j) => {
          if (!known.has(b)) throw new TaskError(`${advLabel}:${yamlLineOf(text, [i, "breaks", j]) ?? "?"}: ${entry.name}: breaks: unknown promise "${b}" (known: ${[...known].join(", ")})`);
        });
      }
      return { ...entry, patchPath: realInside(taskDir, p, advLabel, `${i}.patch`) };
    });
  }
  const alternatives = loadAlternatives(taskDir, join(hiddenDir, "alternatives"), hiddenLabel("alternatives/index.yaml"));
  const equivalentMutants = loadEquivalents(join(hiddenDir, "mutants.yaml"), hiddenLabel("mutants.yaml"));
  // The post-PR tests replace the test dirs: anything else in that tree would be a silent extra
  // (a derived tree is merge's test dirs and nothing else).
  for (const top of deriveTests ? [] : readdirSync(testsDir)) {
    if (!spec.test_dirs.some((d) => d === top || d.split("/")[0] === top)) {
      throw new TaskError(`${pub.label}: hidden.tests: "${top}" is not under any of test_dirs (${spec.test_dirs.join(", ")})`);
    }
  }
  const hidden: HiddenParts = {
      goldenPatch,
      hollowPatch,
      testsDir,
      probesDir,
      adversarial,
      adversarialIndex: existsSync(indexFile) ? advLabel : null,
      promises,
      promisesFile: promises ? hiddenLabel("promises.yaml") : null,
      alternatives,
      equivalentMutants,
  };
  if (deriveGolden) Object.defineProperty(hidden, "goldenPatch", { get: () => derived().goldenPatch, enumerable: true });
  if (deriveTests) Object.defineProperty(hidden, "testsDir", { get: () => derived().testsDir, enumerable: true });
  return { ...pub, taskDir, fullSpec: spec, hidden };
}

function derivedParts(spec: TaskSpec, label: string): DerivedGitParts {
  const src = spec.source as GitSource & { merge: string };
  try {
    return deriveGitParts({ url: src.url, base: src.base, merge: src.merge }, spec.test_dirs, label);
  } catch (e) {
    throw new TaskError(e instanceof Error ? e.message : String(e));
  }
}

const normalise = (s: string) => s.replace(/\s+/g, " ").trim();

/** The 1-based line of prompt.md where a (whitespace-normalised) fragment starts, or null. */
export function promptLineOf(prompt: string, fragment: string): number | null {
  const want = normalise(fragment);
  if (!want) return null;
  const lines = prompt.split("\n");
  // Joined with single spaces, with the offset where each line starts: a fragment may span lines.
  let joined = "";
  const starts: number[] = [];
  for (const line of lines) {
    starts.push(joined.length);
    joined += `${normalise(line)} `;
  }
  const at = joined.indexOf(want);
  if (at < 0) return null;
  let line = 0;
  while (line + 1 < starts.length && starts[line + 1]! <= at) line++;
  return line + 1;
}

function loadPromises(taskDir: string, hiddenDir: string, label: string, prompt: string, promptLabel: string): ResolvedPromise[] | null {
  const file = join(hiddenDir, "promises.yaml");
  if (!existsSync(file)) return null;
  realInside(taskDir, file, label, "promises.yaml");
  const text = readFileSync(file, "utf8");
  const raw = readYaml(file, label);
  const parsed = PromisesFileSchema.safeParse(raw);
  if (!parsed.success) throw new TaskError(formatZodIssues(label, parsed.error, raw));
  const seen = new Map<string, number>();
  const lineCount = prompt.split("\n").length;
  return parsed.data.map((p, i) => {
    const at = yamlLineOf(text, [i, "id"]) ?? 0;
    if (seen.has(p.id)) throw new TaskError(`${label}:${at}: promise "${p.id}" is declared twice (first at line ${seen.get(p.id)})`);
    seen.set(p.id, at);
    let promptLine: number | null;
    if (typeof p.prompt === "number") {
      promptLine = p.prompt <= lineCount && prompt.split("\n")[p.prompt - 1]!.trim() ? p.prompt : null;
      if (promptLine === null) throw new TaskError(`${label}:${yamlLineOf(text, [i, "prompt"]) ?? at}: ${p.id}: prompt: line ${p.prompt} of ${promptLabel} is ${p.prompt > lineCount ? `past its end (${lineCount} lines)` : "blank"}`);
    } else {
      promptLine = promptLineOf(prompt, p.prompt);
      if (promptLine === null) throw new TaskError(`${label}:${yamlLineOf(text, [i, "prompt"]) ?? at}: ${p.id}: prompt: the fragment is not in ${promptLabel}: ${JSON.stringify(p.prompt.length > 60 ? `${p.prompt.slice(0, 57)}...` : p.prompt)}`);
    }
    return { ...p, promptLine, declaredAt: `${label}:${at}` };
  });
}

function loadAlternatives(taskDir: string, dir: string, label: string): AlternativePatch[] {
  const index = join(dir, "index.yaml");
  if (!existsSync(index)) {
    const stray = existsSync(dir) ? readdirSync(dir).filter((f) => f.endsWith(".patch")) : [];
    if (stray.length) throw new TaskError(`${label}: missing, but the folder holds ${stray.join(", ")}: list each with a name and a note (a control without a note says nothing)`);
    return [];
  }
  const text = readFileSync(index, "utf8");
  const raw = readYaml(index, label);
  const parsed = AlternativesIndexSchema.safeParse(raw);
  if (!parsed.success) throw new TaskError(formatZodIssues(label, parsed.error, raw));
  const names = new Set<string>();
  return parsed.data.map((entry, i) => {
    const line = yamlLineOf(text, [i, "name"]) ?? "?";
    if (names.has(entry.name)) throw new TaskError(`${label}:${line}: alternative "${entry.name}" is listed twice`);
    names.add(entry.name);
    const p = resolve(dir, entry.patch);
    if (!existsSync(p) || !statSync(p).isFile()) throw new TaskError(`${label}:${yamlLineOf(text, [i, "patch"]) ?? line}: ${entry.name}: patch "${entry.patch}" does not exist`);
    return { ...entry, patchPath: realInside(taskDir, p, label, `${i}.patch`) };
  });
}

function loadEquivalents(file: string, label: string): EquivalentMutant[] {
  if (!existsSync(file)) return [];
  const text = readFileSync(file, "utf8");
  const raw = readYaml(file, label) ?? {};
  const parsed = MutantsFileSchema.safeParse(raw);
  if (!parsed.success) throw new TaskError(formatZodIssues(label, parsed.error, raw));
  const seen = new Set<string>();
  parsed.data.equivalent.forEach((e, i) => {
    if (seen.has(e.id)) throw new TaskError(`${label}:${yamlLineOf(text, ["equivalent", i, "id"]) ?? "?"}: mutant "${e.id}" is listed twice`);
    seen.add(e.id);
  });
  return parsed.data.equivalent;
}
