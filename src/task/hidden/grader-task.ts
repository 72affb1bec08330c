/**
 * The grader's door into a task folder: everything `loadPublicTask` gives, plus `hidden/` — the
 * golden patch, the post-PR tests, the probes, the adversarial and alternative patches, the
 * promises and the equivalent mutants. Only grader/ and campaign/ may import this room
 * (.dependency-cruiser.cjs enforces it): nothing reachable from the MCP server opens hidden/.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { bundledTasksDir } from "../../lib/paths.js";
import { TaskError, formatZodIssues } from "../public/errors.js";
import { loadPublicTask, loadTaskSpec, readYaml, realInside, resolveTaskDir, type PublicTask } from "../public/loader.js";
import type { GitSource, TaskSpec } from "../public/schema.js";
import { yamlLineOf } from "../public/yaml-lines.js";
import { loadDifferential, materialiseDifferentialProbes, type LoadedDifferential } from "./differential.js";
import { deriveGitParts, type DerivedGitParts } from "./golden.js";
import {
  AdversarialIndexSchema,
  AlternativesIndexSchema,
  MutantsFileSchema,
  PromisesFileSchema,
  type AdversarialEntry,
  type AlternativeEntry,
  type EquivalentMutant,
  type TaskPromise,
} from "./schema.js";

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
  /** The probes folder a grade stages: hidden/probes, or with hidden/differential.yaml a derived
   *  folder that adds the differential's generated probe cases (task/hidden/differential.ts). */
  readonly probesDir: string;
  /** hidden/differential.yaml, validated; null when the task has none. */
  readonly differential: LoadedDifferential | null;
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
  // derived from the git cache (task/hidden/golden.ts deriveGitParts), never copied into the task.
  // Derived lazily (on the first read of goldenPatch / testsDir): loading the task to list it, to
  // see that it cannot run here, or to read its promises needs no git cache.
  const canDerive = spec.source.kind === "git" && !!spec.source.merge;
  const deriveGolden = canDerive && !existsSync(resolve(taskDir, spec.hidden.golden_patch));
  const deriveTests = canDerive && !existsSync(resolve(taskDir, spec.hidden.tests));
  let derivedOnce: DerivedGitParts | null = null;
  const derived = () => (derivedOnce ??= derivedParts(spec, pub.label, taskDir));
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
  const differential = loadDifferential(taskDir, hiddenDir, hiddenLabel("differential.yaml"), pub.prompt, promises ? promises.map((p) => p.id) : null);
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
      differential,
  };
  if (deriveGolden) Object.defineProperty(hidden, "goldenPatch", { get: () => derived().goldenPatch, enumerable: true });
  if (differential) {
    // Built on the first read (a listing of tasks needs none of it).
    let derivedProbes: string | null = null;
    Object.defineProperty(hidden, "probesDir", {
      get: () => (derivedProbes ??= materialiseDifferentialProbes({ probesDir, loaded: differential, label: pub.label })),
      enumerable: true,
    });
  }
  if (deriveTests) Object.defineProperty(hidden, "testsDir", { get: () => derived().testsDir, enumerable: true });
  return { ...pub, taskDir, fullSpec: spec, hidden };
}

function derivedParts(spec: TaskSpec, label: string, taskDir: string): DerivedGitParts {
  const src = spec.source as GitSource & { merge: string };
  try {
    return deriveGitParts({ url: src.url, base: src.base, merge: src.merge }, spec.test_dirs, label, { upstreamDir: resolve(taskDir, spec.hidden.dir, "upstream") });
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
