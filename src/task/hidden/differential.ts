/**
 * Golden-differential probes (hidden/differential.yaml): loading the declaration, and turning it into
 * probe files the grader stages like any other probe (one case per rule, marked with its promise).
 *
 * The probes folder a grade stages is then a derived folder (cached under the git cache's derived/
 * folder, which no sandbox shows): the task's own probes, plus
 *   test_differential.py       one test per rule (`@pytest.mark.probe(promise, kind)`), generated
 *   differential_runner.py     python/host/infradev_differential.py (the runner: workloads, rules, shrinking)
 *   differential_driver.py     the task's driver (generate / shrink / run)
 *   differential_golden.json   golden's package (base + golden.patch) as source text, which the runner
 *                              imports under a private package name: never the submission's modules
 * Helper modules get random names when they are installed (python/host/infradev_grading.py).
 */
import { createHash, randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { gitCacheDir, hostPythonDir } from "../../lib/paths.js";
import { TaskError, formatZodIssues } from "../public/errors.js";
import { readYaml, realInside } from "../public/loader.js";
import type { TaskSpec } from "../public/schema.js";
import { yamlLineOf } from "../public/yaml-lines.js";
import { DifferentialSchema, ruleProblem, type DifferentialSpec } from "./differential-schema.js";

export interface LoadedDifferential {
  readonly spec: DifferentialSpec;
  /** Absolute path of the driver. */
  readonly driverPath: string;
  /** Display path of differential.yaml (messages name it). */
  readonly file: string;
}

/** The generated files' names inside the probes folder (a task's own probe must not use them). */
export const DIFFERENTIAL_FILES = ["test_differential.py", "differential_runner.py", "differential_driver.py", "differential_golden.json"] as const;

/**
 * hidden/differential.yaml, validated: the schema (errors name the field and the line), every rule's
 * promise known, every formula over `golden` and the declared facts, the driver inside hidden/, each
 * entry point named in prompt.md. Null when the task has none.
 */
export function loadDifferential(taskDir: string, hiddenDir: string, label: string, prompt: string, promises: readonly string[] | null): LoadedDifferential | null {
  const file = join(hiddenDir, "differential.yaml");
  if (!existsSync(file)) return null;
  realInside(taskDir, file, label, "differential.yaml");
  const text = readFileSync(file, "utf8");
  const raw = readYaml(file, label);
  const parsed = DifferentialSchema.safeParse(raw);
  if (!parsed.success) {
    const lines = formatZodIssues(label, parsed.error, raw).split("\n");
    const withLine = parsed.error.issues.map((iss, i) => {
      const at = yamlLineOf(text, iss.path as (string | number)[]);
      return at ? lines[i]!.replace(`${label}:`, `${label}:${at}:`) : lines[i]!;
    });
    throw new TaskError(withLine.join("\n"));
  }
  const spec = parsed.data;
  const at = (path: (string | number)[]) => `${label}:${yamlLineOf(text, path) ?? "?"}`;
  const ids = new Set<string>();
  spec.rules.forEach((r, i) => {
    if (ids.has(r.id)) throw new TaskError(`${at(["rules", i, "id"])}: rules.${i}.id: rule "${r.id}" is declared twice`);
    ids.add(r.id);
    if (promises && !promises.includes(r.promise)) throw new TaskError(`${at(["rules", i, "promise"])}: rules.${i}.promise: unknown promise "${r.promise}" (known: ${promises.join(", ")})`);
    const fact = r.metric.startsWith("fact:") ? r.metric.slice(5) : null;
    if (fact !== null && !spec.facts.includes(fact)) throw new TaskError(`${at(["rules", i, "metric"])}: rules.${i}.metric: fact "${fact}" is not declared under facts: (${spec.facts.join(", ") || "none"})`);
    if (r.rule !== undefined) {
      const why = ruleProblem(r.rule, spec.facts);
      if (why) throw new TaskError(`${at(["rules", i, "rule"])}: rules.${i}.rule: ${JSON.stringify(r.rule)}: ${why}`);
    }
  });
  spec.entry_points.forEach((e, i) => {
    const last = e.split(".").pop()!;
    if (!new RegExp(`\\b${last}\\b`).test(prompt)) throw new TaskError(`${at(["entry_points", i])}: entry_points.${i}: "${last}" (of ${e}) is not named in prompt.md: the differential may only drive the interface the prompt gives`);
    if (e.split(".")[0] !== spec.package) throw new TaskError(`${at(["entry_points", i])}: entry_points.${i}: "${e}" is not in package ${spec.package}`);
  });
  const driver = resolve(hiddenDir, spec.driver);
  if (!existsSync(driver) || !statSync(driver).isFile()) throw new TaskError(`${at(["driver"])}: driver: "${spec.driver}" does not exist under hidden/`);
  return { spec, driverPath: realInside(taskDir, driver, label, "driver"), file: label };
}

/** Every .py file of a folder, relative paths with '/'. */
function pyFiles(dir: string, rel = ""): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(dir, rel)).sort()) {
    if (name === "__pycache__") continue;
    const r = rel ? `${rel}/${name}` : name;
    const st = statSync(join(dir, r));
    if (st.isDirectory()) out.push(...pyFiles(dir, r));
    else if (name.endsWith(".py")) out.push(r);
  }
  return out;
}

/**
 * Golden's version of the package: base's files (a dir source's repo/) with the golden patch applied
 * (`git apply --include`, outside any repository), as { "pkg/mod.py": source }.
 */
export function goldenPackage(taskDir: string, spec: TaskSpec, goldenPatch: string, pkg: string, label: string): Record<string, string> {
  if (spec.source.kind !== "dir") throw new TaskError(`${label}: differential probes need a dir source for now (golden's package is base + golden.patch; a git source is not wired yet)`);
  const repo = resolve(taskDir, spec.source.path);
  const tmp = join(tmpdir(), `infradev-golden-pkg-${process.pid}-${randomBytes(4).toString("hex")}`);
  mkdirSync(tmp, { recursive: true });
  try {
    if (existsSync(join(repo, pkg))) cpSync(join(repo, pkg), join(tmp, pkg), { recursive: true });
    try {
      execFileSync("git", ["apply", `--include=${pkg}/*`, resolve(goldenPatch)], { cwd: tmp, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, GIT_CEILING_DIRECTORIES: tmpdir() } });
    } catch (e) {
      const err = e as { stderr?: Buffer };
      throw new TaskError(`${label}: the golden patch does not apply to base's ${pkg}/: ${String(err.stderr ?? e).trim().split("\n")[0]}`);
    }
    if (!existsSync(join(tmp, pkg))) throw new TaskError(`${label}: package: "${pkg}" is neither in the base repository nor created by the golden patch`);
    const files: Record<string, string> = {};
    for (const f of pyFiles(join(tmp, pkg))) files[`${pkg}/${f}`] = readFileSync(join(tmp, pkg, f), "utf8");
    return files;
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

const pyString = (s: string) => JSON.stringify(s);

/** The generated test module: one probe case per rule, all sharing one run of the workloads. */
export function differentialTestModule(spec: DifferentialSpec, source: string): string {
  const lines = [
    `"""Golden-differential probes, generated from ${source}: do not edit."""`,
    "",
    "import json",
    "import os",
    "",
    "import pytest",
    "",
    "import differential_driver",
    "import differential_runner",
    "",
    `SPEC = json.loads(${pyString(JSON.stringify(spec))})`,
    `BUNDLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "differential_golden.json")`,
    "",
    "",
    `@pytest.fixture(scope="module")`,
    "def differential_outcome():",
    "    return differential_runner.run_spec(SPEC, differential_driver, BUNDLE)",
  ];
  for (const r of spec.rules) {
    const ws = spec.world_sizes ? `, world_sizes=[${spec.world_sizes.join(", ")}]` : "";
    lines.push("", "", `@pytest.mark.probe(promise=${pyString(r.promise)}, kind=${pyString(r.kind)}${ws})`);
    lines.push(`def test_${r.id.replace(/-/g, "_")}(differential_outcome):`, `    differential_outcome.check(${pyString(r.id)})`);
  }
  return `${lines.join("\n")}\n`;
}

/**
 * The probes folder to stage: the task's own probes plus the differential's files, built once per
 * content (a hash of every input) under `<git cache>/derived/` — masked in every sandbox, like the
 * git parts derived there.
 */
export function materialiseDifferentialProbes(opts: {
  taskDir: string;
  spec: TaskSpec;
  probesDir: string;
  goldenPatch: string;
  loaded: LoadedDifferential;
  label: string;
}): string {
  const { loaded, probesDir } = opts;
  for (const f of DIFFERENTIAL_FILES) {
    if (existsSync(join(probesDir, f))) throw new TaskError(`${opts.label}: hidden/probes/${f}: the name is taken by the differential probes (rename the probe file)`);
  }
  const runner = readFileSync(join(hostPythonDir(), "infradev_differential.py"), "utf8");
  const driver = readFileSync(loaded.driverPath, "utf8");
  const golden = goldenPackage(opts.taskDir, opts.spec, opts.goldenPatch, loaded.spec.package, loaded.file);
  const hash = createHash("sha256");
  hash.update(JSON.stringify({ v: 1, spec: loaded.spec, golden }));
  hash.update(runner).update(driver);
  for (const f of allFiles(probesDir)) hash.update(f).update(readFileSync(join(probesDir, f)));
  const key = hash.digest("hex").slice(0, 24);
  const root = join(gitCacheDir(), "derived", `differential-${key}`);
  if (existsSync(join(root, "done"))) return join(root, "probes");
  const tmp = `${root}.tmp-${process.pid}-${randomBytes(4).toString("hex")}`;
  try {
    mkdirSync(tmp, { recursive: true });
    cpSync(probesDir, join(tmp, "probes"), { recursive: true, filter: (src) => !src.includes("__pycache__") });
    const out = join(tmp, "probes");
    writeFileSync(join(out, "differential_runner.py"), runner);
    writeFileSync(join(out, "differential_driver.py"), driver);
    const encoded = Object.fromEntries(Object.entries(golden).map(([k, v]) => [k, Buffer.from(v, "utf8").toString("base64")]));
    writeFileSync(join(out, "differential_golden.json"), JSON.stringify({ package: loaded.spec.package, key: key.slice(0, 12), files: encoded }));
    writeFileSync(join(out, "test_differential.py"), differentialTestModule(loaded.spec, "hidden/differential.yaml"));
    writeFileSync(join(tmp, "done"), `${key}\n`);
    try {
      renameSync(tmp, root);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another loader built it first: same bytes
    }
  } catch (e) {
    rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
  return join(root, "probes");
}

function allFiles(dir: string, rel = ""): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(dir, rel)).sort()) {
    if (name === "__pycache__") continue;
    const r = rel ? `${rel}/${name}` : name;
    if (statSync(join(dir, r)).isDirectory()) out.push(...allFiles(dir, r));
    else out.push(r);
  }
  return out;
}
