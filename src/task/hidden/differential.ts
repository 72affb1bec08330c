/**
 * Golden-differential probes (hidden/differential.yaml): loading the declaration, and turning it into
 * probe files the grader stages like any other probe (one case per rule, marked with its promise).
 *
 * The probes folder a grade stages is then a derived folder (cached under the git cache's derived/
 * folder, which no sandbox shows): the task's own probes, plus
 *   test_differential.py       one test per rule (`@pytest.mark.probe(promise, kind)`), generated
 *   differential_runner.py     python/host/infradev_differential.py (the recording half: workloads, records)
 *   differential_driver.py     the task's driver (generate / shrink / run)
 * Helper modules get random names when they are installed (python/host/infradev_grading.py).
 * Nothing of golden is staged: golden's side is recorded in its own session over a fresh base
 * workspace with the golden patch (src/grader/grade/differential-judge.ts), and the rules are applied
 * on the host to both sides' records.
 */
import { createHash, randomBytes } from "node:crypto";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { gitCacheDir, hostPythonDir } from "../../lib/paths.js";
import { TaskError, formatZodIssues } from "../public/errors.js";
import { readYaml, realInside } from "../public/loader.js";
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
export const DIFFERENTIAL_FILES = ["test_differential.py", "differential_runner.py", "differential_driver.py"] as const;

/** The recorder's name in the probes folder (the grader's own code, copied from python/host/). */
export const DIFFERENTIAL_RUNNER = "differential_runner.py";

/** The generated module's real path among the probes (its cases are `<this>::test_<rule id with _>`). */
export const DIFFERENTIAL_MODULE = "test_differential.py";

/** The probe case name of a rule. */
export const differentialCaseName = (ruleId: string): string => `test_${ruleId.replace(/-/g, "_")}`;

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

const pyString = (s: string) => JSON.stringify(s);

/** The generated test module: one probe case per rule, all sharing one run of the workloads. */
export function differentialTestModule(spec: DifferentialSpec, source: string): string {
  const lines = [
    `"""Golden-differential probes, generated from ${source}: do not edit."""`,
    "",
    "import json",
    "",
    "import pytest",
    "",
    "import differential_driver",
    "import differential_runner",
    "",
    `SPEC = json.loads(${pyString(JSON.stringify(spec))})`,
    "",
    "",
    "# The session records the package it imports; the verdict is the grader's, on the host.",
    `@pytest.fixture(scope="module")`,
    "def differential_outcome():",
    "    return differential_runner.record_spec(SPEC, differential_driver)",
  ];
  for (const r of spec.rules) {
    const ws = spec.world_sizes ? `, world_sizes=[${spec.world_sizes.join(", ")}]` : "";
    lines.push("", "", `@pytest.mark.probe(promise=${pyString(r.promise)}, kind=${pyString(r.kind)}${ws})`);
    lines.push(`def ${differentialCaseName(r.id)}(differential_outcome):`, `    differential_outcome.check(${pyString(r.id)})`);
  }
  return `${lines.join("\n")}\n`;
}

/**
 * The probes folder to stage: the task's own probes plus the differential's files, built once per
 * content (a hash of every input) under `<git cache>/derived/` — masked in every sandbox, like the
 * git parts derived there.
 */
export function materialiseDifferentialProbes(opts: { probesDir: string; loaded: LoadedDifferential; label: string }): string {
  const { loaded, probesDir } = opts;
  for (const f of DIFFERENTIAL_FILES) {
    if (existsSync(join(probesDir, f))) throw new TaskError(`${opts.label}: hidden/probes/${f}: the name is taken by the differential probes (rename the probe file)`);
  }
  const runner = readFileSync(join(hostPythonDir(), "infradev_differential.py"), "utf8");
  const driver = readFileSync(loaded.driverPath, "utf8");
  const hash = createHash("sha256");
  hash.update(JSON.stringify({ v: 2, spec: loaded.spec }));
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
    writeFileSync(join(out, DIFFERENTIAL_RUNNER), runner);
    writeFileSync(join(out, "differential_driver.py"), driver);
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
