import { iniSections, iniValue, shlexQuote, shlexSplit } from "./pytest-config-readers.js";
import { STDLIB_MODULES } from "./stdlib-modules.js";
import { parse as parseToml } from "smol-toml";

/**
 * What decides how pytest judges the tests, outside the test dirs — and the pure planning of how
 * the grader takes it back to base before the post-PR tests and probes go in.
 *
 * A submission can turn failures into passes without touching a test: a root `conftest.py` whose
 * `pytest_runtest_makereport` rewrites reports, `addopts` in a config that deselects a probe or loads
 * a plugin, a `sitecustomize.py` or `.pth` run at start-up, a module that shadows pytest itself,
 * results planted where the launcher writes. So every such file the patch touched is restored to
 * base (or removed, when the patch added it), whatever else the patch does; config files that hold
 * more than pytest's settings (`pyproject.toml`, `setup.cfg`, `tox.ini`) only when their pytest part
 * changed. Paths under the task's test dirs are left to the test-dir step (replaced whole).
 */

/** Where the hidden probes go inside the grading workspace. */
export const PROBES_DIR = "infradev_probes";
/** Where the launcher writes results, logs and the skip list inside the workspace. */
export const RESULTS_DIR = ".infradev";

export interface ConfigRevert {
  path: string;
  /** restore: base's version is put back; delete: the patch added it, it is removed. */
  action: "restore" | "delete";
  reason: string;
}

/** Config files read only for their pytest part, and the sections (ini) that make it. */
const SECTIONED: Record<string, { format: "ini" | "toml"; sections: string[] }> = {
  // pytest reads [tool:pytest] from setup.cfg and refuses a [pytest] there; [pytest] from tox.ini.
  "setup.cfg": { format: "ini", sections: ["tool:pytest", "pytest"] },
  "tox.ini": { format: "ini", sections: ["pytest", "tool:pytest"] },
  // [tool.pytest.ini_options], and pytest 9's native [tool.pytest].
  "pyproject.toml": { format: "toml", sections: [] },
};

/** Files that are pytest configuration as a whole (each is the config when present, even empty). */
const WHOLE_CONFIG = new Set(["pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"]);

/**
 * Top-level module names that would shadow the runner or what it measures with: a folder on sys.path
 * ahead of site-packages (the repo root under pytest's rootdir insertion, a PYTHONPATH entry of the
 * task) wins over the installed package.
 */
const RUNNER_MODULES = [
  "pytest", "_pytest", "pluggy", "iniconfig", "py", "packaging", "exceptiongroup", "tomli", "torch", "numpy",
  "infradev_probe", "infradev_outputs", "infradev_inflight", "infradev_launcher", "infradev_launch", "infradev_rank_entry", "infradev_rank_boot", "infradev_grading",
];

/** Extensions of a module file Python imports by name (name.py, name.cpython-311-x86_64-linux-gnu.so, ...). */
const MODULE_FILE = /^([A-Za-z_][A-Za-z0-9_]*)(\.[^/]*)?\.(py|pyc|pyd|so)$/;

/**
 * The module a path at the top of a sys.path folder would make importable, or null: `json.py`,
 * `json.cpython-311-x86_64-linux-gnu.so`, a package's `json/__init__.py`. A folder without
 * `__init__.py` is a namespace package, which never wins over a real module: not counted.
 */
function topLevelModule(rel: readonly string[]): string | null {
  if (rel.length === 1) return MODULE_FILE.exec(rel[0]!)?.[1] ?? null;
  if (rel.length === 2 && /^__init__\.(py|pyc|pyd|so)$|^__init__\.[^/]*\.so$/.test(rel[1]!)) return /^[A-Za-z_][A-Za-z0-9_]*$/.test(rel[0]!) ? rel[0]! : null;
  return null;
}

export type PytestConcern = { kind: "whole"; reason: string } | { kind: "section"; file: string };

function isUnder(path: string, dir: string): boolean {
  return path === dir || path.startsWith(`${dir}/`);
}

/**
 * Why a changed path can change how pytest judges the tests (null: it cannot, or the test-dir step
 * owns it). `pathDirs`: repo folders the sessions put on sys.path besides the root (the task's
 * PYTHONPATH entries, repo-relative).
 */
export function pytestConcern(path: string, testDirs: readonly string[], pathDirs: readonly string[] = []): PytestConcern | null {
  const dirs = testDirs.map((d) => d.replace(/\/+$/, ""));
  if (dirs.some((d) => isUnder(path, d))) return null;
  if (isUnder(path, PROBES_DIR)) return { kind: "whole", reason: `${PROBES_DIR}/ is where the hidden probes go` };
  if (isUnder(path, RESULTS_DIR)) return { kind: "whole", reason: `${RESULTS_DIR}/ is where the launcher writes results` };
  const parts = path.split("/");
  const name = parts.at(-1)!;
  if (name === "conftest.py") return { kind: "whole", reason: "conftest.py: pytest loads its hooks and fixtures" };
  if (WHOLE_CONFIG.has(name)) return { kind: "whole", reason: `${name}: pytest configuration` };
  if (parts.some((p) => /^(site|user)customize(\.|$)/.test(p))) return { kind: "whole", reason: "sitecustomize / usercustomize: imported at interpreter start-up" };
  if (name.endsWith(".pth")) return { kind: "whole", reason: ".pth: executed at interpreter start-up from a site dir" };
  if (name.endsWith(".pyc")) return { kind: "whole", reason: ".pyc: an unchecked hash-based .pyc is imported instead of its source" };
  // Packaging metadata registers entry points (a pytest11 plugin loads into every session) and
  // import hooks; a submission has no business shipping it.
  const meta = parts.find((p) => /\.(dist-info|egg-info)$/.test(p));
  if (meta) return { kind: "whole", reason: `${meta}: packaging metadata (entry points can load a pytest plugin into every session)` };
  if (name === "entry_points.txt" || name.endsWith(".egg-link")) return { kind: "whole", reason: `${name}: packaging metadata (entry points, development install links)` };
  const top = parts[0]!;
  const shadowed = RUNNER_MODULES.find((m) => top === m || (top.startsWith(`${m}.`) && /\.(py|pyc|pyd|so)$/.test(top)));
  if (shadowed) return { kind: "whole", reason: `shadows the test runner's module "${shadowed}" (the repo root is on sys.path)` };
  for (const root of ["", ...pathDirs.map((d) => d.replace(/^\.\/|\/+$/g, "")).filter((d) => d && d !== ".")]) {
    if (root && !isUnder(path, root)) continue;
    const rel = root ? parts.slice(root.split("/").length) : parts;
    const mod = topLevelModule(rel);
    if (mod && (STDLIB_MODULES.has(mod) || RUNNER_MODULES.includes(mod))) {
      return { kind: "whole", reason: `shadows the standard-library or harness module "${mod}" (${root ? `${root}/ is` : "the repo root is"} on sys.path)` };
    }
  }
  if (SECTIONED[name]) return { kind: "section", file: name };
  return null;
}

/** One changed path as the planner needs it. `base` / `after`: text (null = absent), read for section files only. */
export interface ChangedFile {
  path: string;
  inBase: boolean;
  base?: string | null;
  after?: string | null;
}

/** A TOML document as tomllib reads it, or null when it is not valid TOML (pytest would refuse it too). */
function readToml(text: string): Record<string, unknown> | null {
  try {
    return parseToml(text) as Record<string, unknown>;
  } catch {
    return null;
  }
}

/** `tool.pytest` of a pyproject.toml (keys compared case-sensitively, as tomllib does), or undefined. */
function toolPytest(doc: Record<string, unknown>): unknown {
  const tool = doc.tool;
  return tool !== null && typeof tool === "object" ? (tool as Record<string, unknown>).pytest : undefined;
}

/**
 * The pytest part of a pyproject.toml as comparable lines: the `tool.pytest` table (pytest 9's native
 * table and `ini_options`) in canonical JSON. Null when the text is not valid TOML.
 */
export function pyprojectPytestPart(text: string): string[] | null {
  const doc = readToml(text);
  if (doc === null) return null;
  const part = toolPytest(doc);
  return part === undefined ? [] : [JSON.stringify(part)];
}

/** The pytest part of a sectioned config file (`file` is its basename); null when unreadable. */
export function pytestPart(file: string, text: string | null): string[] | null {
  if (text === null) return [];
  const spec = SECTIONED[file];
  if (!spec) return null;
  return spec.format === "toml" ? pyprojectPytestPart(text) : iniSections(text, spec.sections);
}

function samePytestPart(file: string, base: string | null, after: string | null): boolean {
  const a = pytestPart(file, base);
  const b = pytestPart(file, after);
  // Unreadable on either side: only an identical text counts as unchanged.
  if (a === null || b === null) return base === after;
  return a.length === b.length && a.every((line, i) => line === b[i]);
}

/** The plan: what to restore or delete, in path order. Pure. */
export function planConfigReverts(files: readonly ChangedFile[], testDirs: readonly string[], pathDirs: readonly string[] = []): ConfigRevert[] {
  const out: ConfigRevert[] = [];
  for (const f of [...files].sort((x, y) => (x.path < y.path ? -1 : x.path > y.path ? 1 : 0))) {
    const concern = pytestConcern(f.path, testDirs, pathDirs);
    if (!concern) continue;
    let reason: string;
    if (concern.kind === "whole") reason = concern.reason;
    else {
      if (samePytestPart(concern.file, f.base ?? null, f.after ?? null)) continue;
      reason = `${concern.file}: its pytest section changed`;
    }
    out.push({ path: f.path, action: f.inBase ? "restore" : "delete", reason });
  }
  return out;
}

// ---------------------------------------------------------------- pinning the sessions' config

/** Root config files in pytest's order of precedence (pytest 9; older versions lack the .toml ones). */
export const ROOT_CONFIG_NAMES = ["pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"] as const;

export interface PytestPin {
  /** Arguments every grading session gets. */
  args: string[];
  /** The base's root config the sessions are pinned to (-c), or null when the base has none. */
  config: string | null;
  /** addopts tokens of that config left out of the grading sessions (selection and early stop). */
  droppedAddopts: string[];
  note?: string;
}

/** Whether a root file is pytest's config, as pytest decides it. */
function isPytestConfig(name: string, text: string): boolean {
  if (WHOLE_CONFIG.has(name)) return true;
  if (name === "tox.ini") return iniSections(text, ["pytest"]).length > 0;
  if (name === "setup.cfg") return iniSections(text, ["tool:pytest", "pytest"]).length > 0;
  if (name === "pyproject.toml") {
    const doc = readToml(text);
    return doc !== null && toolPytest(doc) !== undefined;
  }
  return false;
}

/** The `addopts` of a config file as pytest would tokenise it; null when absent; "unreadable" when we cannot tell. */
export function configAddopts(name: string, text: string): string[] | null | "unreadable" {
  if (name.endsWith(".toml")) {
    const doc = readToml(text);
    if (doc === null) return "unreadable";
    const tables: unknown[] = [];
    if (name === "pyproject.toml") {
      const pytest = toolPytest(doc) as Record<string, unknown> | undefined;
      if (pytest && typeof pytest === "object") tables.push(pytest.ini_options, pytest);
    } else tables.push(doc.pytest);
    const hit = tables.find((t) => t !== null && typeof t === "object" && "addopts" in (t as object)) as Record<string, unknown> | undefined;
    if (!hit) return null;
    const v = hit.addopts;
    if (typeof v === "string") return shlexSplit(v) ?? "unreadable";
    if (Array.isArray(v) && v.every((x) => typeof x === "string")) return v as string[];
    return "unreadable";
  }
  const v = iniValue(iniSections(text, name === "setup.cfg" ? ["tool:pytest"] : ["pytest"]), "addopts");
  return v === null ? null : (shlexSplit(v) ?? "unreadable");
}

/** Short options of pytest (and xdist) that take a value: the rest of their cluster, or the next argument. */
const SHORT_WITH_VALUE = new Set(["k", "m", "p", "c", "o", "r", "W", "n"]);
/** Long options left out: with their value (`--deselect X` or `--deselect=X`), or a flag. */
const DROP_LONG_WITH_VALUE = new Set(["--keyword", "--deselect", "--maxfail"]);
const DROP_LONG = /^--(keyword|deselect|maxfail|exitfirst)(=|$)/;

/**
 * addopts without the options that drop or never reach cases: -k / --keyword / --deselect (a
 * probe's id can match them), -x / --exitfirst / --maxfail (the official tests run first: an early
 * stop leaves the probes unrun, and gold's probes would never be required). Pure.
 */
export function withoutSelection(tokens: readonly string[]): { kept: string[]; dropped: string[] } {
  const kept: string[] = [];
  const dropped: string[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    const next = tokens[i + 1];
    if (DROP_LONG.test(t)) {
      const withValue = DROP_LONG_WITH_VALUE.has(t) && next !== undefined;
      dropped.push(t, ...(withValue ? [next!] : []));
      if (withValue) i++;
      continue;
    }
    if (!/^-[A-Za-z]/.test(t)) {
      kept.push(t);
      continue;
    }
    // A cluster of short options (-vx, -xkEXPR, -rA), read as argparse reads it: flags up to the
    // first option that takes a value (the rest of the cluster, or else the next argument).
    let flags = "";
    let valued = "";
    for (let j = 1; j < t.length; j++) {
      if (SHORT_WITH_VALUE.has(t[j]!)) {
        valued = t.slice(j);
        break;
      }
      flags += t[j];
    }
    const valueArg = valued.length === 1 && next !== undefined ? [next] : [];
    i += valueArg.length;
    const keptFlags = flags.replaceAll("x", "");
    const dropK = valued.startsWith("k");
    if (keptFlags === flags && !dropK) {
      kept.push(t, ...valueArg);
      continue;
    }
    dropped.push(t, ...(dropK ? valueArg : []));
    const rebuilt = keptFlags + (dropK ? "" : valued);
    if (rebuilt) kept.push(`-${rebuilt}`, ...(dropK ? [] : valueArg));
  }
  return { kept, dropped };
}

/**
 * The pytest arguments that pin every grading session to the base's configuration. Input: the
 * repo root's config files (name → text, absent ones left out), read after the restore.
 *
 * - `--rootdir=.` and `--confcutdir=.` (the launcher runs in the repo root): node ids are always
 *   repo-relative and no conftest.py above the repo is loaded. (`-p no:cacheprovider` is always
 *   passed by the launcher.)
 * - `-c <file>` when the base has a root config: the sessions read that file and no other, whatever
 *   the combination of paths a session runs.
 * - `-o addopts=...` only when that config's addopts hold -k / --deselect / -x / --maxfail: the same
 *   addopts without them.
 */
export function planPytestPin(rootFiles: Readonly<Record<string, string>>): PytestPin {
  const args = ["--rootdir=.", "--confcutdir=."];
  const config = ROOT_CONFIG_NAMES.find((n) => rootFiles[n] !== undefined && isPytestConfig(n, rootFiles[n]!)) ?? null;
  if (!config) return { args, config: null, droppedAddopts: [] };
  args.push("-c", config);
  const addopts = configAddopts(config, rootFiles[config]!);
  if (addopts === "unreadable") return { args, config, droppedAddopts: [], note: `could not read addopts in the base's ${config}; left as pytest reads them` };
  if (addopts === null) return { args, config, droppedAddopts: [] };
  const { kept, dropped } = withoutSelection(addopts);
  if (dropped.length) args.push("-o", `addopts=${kept.map(shlexQuote).join(" ")}`);
  return { args, config, droppedAddopts: dropped };
}
