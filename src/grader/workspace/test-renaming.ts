import { randomInt } from "node:crypto";
import { lstatSync, mkdirSync, readFileSync, readdirSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { execa } from "execa";
import { hostPythonDir } from "../../lib/paths.js";
import type { ProbeMarker } from "../../runner/merge.js";
import { sha256 } from "../../lib/files.js";
import type { Suite } from "../grade/types.js";

/**
 * The install map of one grading run: which installed test (random file, class and function names)
 * is which real test. Pure functions over the map written by python/host/infradev_grading.py, plus
 * the canaries and the content hashes of the staged files.
 *
 * Installed ids never leave the grader: every case id, collection error and message is mapped back
 * to the real id before it is saved, so results, calibrations and scores read as they always have.
 */

export type InstalledSuite = Suite | "canary";

export interface InstalledFile {
  /** The real repo-relative path (probes: `infradev_probes/<file>`; canaries: `infradev_canaries/...`). */
  real: string;
  suite: InstalledSuite;
  /** installed module-level name → real name (test functions and Test* classes). */
  names: Record<string, string>;
  /** installed class name → { installed method → real method }. */
  methods: Record<string, Record<string, string>>;
  /** Other names bound at module level (not renamed): a unittest class, an imported test. */
  known: string[];
  /** Twin canaries appended to this module: installed twin name → real name of the test it runs. */
  twins?: Record<string, string>;
}

export interface InstallMap {
  /** Keyed by the installed repo-relative path (`tests/test_qkzjd….py`). */
  files: Record<string, InstalledFile>;
  /** Probe markers by real id without parameters (`infradev_probes/f.py::test_x`, or a class). */
  markers: Record<string, ProbeMarker>;
  /** The probes' helper modules, renamed too: installed path → real path. */
  helpers?: Record<string, string>;
  /** The probes' conftest, installed as a module with a random name and loaded as a plugin by the probe sessions. */
  plugins?: string[];
}

export interface MappedId {
  id: string;
  suite: InstalledSuite;
  probe?: ProbeMarker;
}

/** `name[params]` → [name, "[params]"]. */
function splitParams(part: string): [string, string] {
  const i = part.indexOf("[");
  return i < 0 ? [part, ""] : [part.slice(0, i), part.slice(i)];
}

/**
 * The real id of an installed case id, or null when it names nothing that was installed (a file not
 * in the map, or a module-level name that is neither renamed nor bound in that module). Parameter
 * suffixes are kept as they are; names below a class that were not renamed (inherited methods) are
 * kept too.
 */
export function mapCaseId(map: InstallMap, installed: string): MappedId | null {
  const parts = installed.split("::");
  const file = map.files[parts[0]!];
  if (!file) return null;
  const out = [file.real];
  if (parts.length > 1) {
    const last = parts.length - 1;
    const [top, topParams] = splitParams(parts[1]!);
    const twin = file.twins?.[top];
    if (twin !== undefined) return { id: `${CANARIES_REAL_DIR}/twin/${file.real}::${twin}${topParams}`, suite: "canary" };
    const realTop = file.names[top] ?? (file.known.includes(top) ? top : null);
    if (realTop === null) return null;
    out.push(`${realTop}${last === 1 ? topParams : ""}`);
    if (last >= 2) {
      const [method, params] = splitParams(parts[2]!);
      out.push(`${file.methods[top]?.[method] ?? method}${last === 2 ? params : ""}`);
      out.push(...parts.slice(3));
    }
  }
  const id = out.join("::");
  // The closest marker wins, as pytest's get_closest_marker does: the method's, then its class's.
  const bare = out.map((p, i) => (i === out.length - 1 ? splitParams(p)[0] : p));
  let probe: ProbeMarker | undefined;
  for (let n = bare.length; n >= 2 && !probe; n--) probe = map.markers[bare.slice(0, n).join("::")];
  return { id, suite: file.suite, ...(probe ? { probe } : {}) };
}

/**
 * The installed id of a real case id (the inverse of mapCaseId for the tests and probes; canaries
 * and twins have no real id to start from), or null when nothing installed is that test.
 */
export function installedCaseId(map: InstallMap, real: string): string | null {
  const parts = real.split("::");
  const entry = Object.entries(map.files).find(([, f]) => f.real === parts[0] && f.suite !== "canary");
  if (!entry) return null;
  const [installedPath, file] = entry;
  const out = [installedPath];
  if (parts.length > 1) {
    const [top, topParams] = splitParams(parts[1]!);
    const installedTop = Object.keys(file.names).find((k) => file.names[k] === top) ?? (file.known.includes(top) ? top : null);
    if (installedTop === null) return null;
    out.push(`${installedTop}${topParams}`);
    if (parts.length > 2) {
      const [method, params] = splitParams(parts[2]!);
      const methods = file.methods[installedTop] ?? {};
      out.push(`${Object.keys(methods).find((k) => methods[k] === method) ?? method}${params}`);
      out.push(...parts.slice(3));
    }
  }
  return out.join("::");
}

/**
 * Every installed path and name in a text replaced by the real one (messages, tracebacks, collection
 * errors). Installed names are random, long and unique, so a plain replacement cannot hit anything else.
 */
export function unmapText(map: InstallMap, text: string, extra: ReadonlyArray<[string, string]> = []): string {
  if (!text) return text;
  let out = text;
  for (const [installed, f] of Object.entries(map.files)) {
    out = out.split(installed).join(f.real);
    const base = installed.split("/").at(-1)!;
    const realBase = f.real.split("/").at(-1)!;
    out = out.split(base).join(realBase).split(base.replace(/\.py$/, "")).join(realBase.replace(/\.py$/, ""));
    for (const [a, b] of Object.entries(f.names)) out = out.split(a).join(b);
    for (const ms of Object.values(f.methods)) for (const [a, b] of Object.entries(ms)) out = out.split(a).join(b);
  }
  for (const [installed, real] of Object.entries(map.helpers ?? {})) {
    out = out.split(installed).join(real);
    const stem = (p: string) => p.split("/").at(-1)!.replace(/\.py$/, "");
    out = out.split(stem(installed)).join(stem(real));
  }
  for (const [from, to] of extra) out = out.split(from).join(to);
  return out;
}

// ---------------------------------------------------------------- canaries

/** not_passed: a twin canary (it runs a real test, then fails): anything but a pass. */
export type CanaryOutcome = "passed" | "failed" | "not_passed";
/** Where a canary lies: beside the official tests, or beside the probes. */
export type CanaryLocation = "official" | "probe";

export const CANARIES_REAL_DIR = "infradev_canaries";

export interface Canary {
  /** The installed id (what the ranks report). */
  installed: string;
  /** The real id (`infradev_canaries/<location>/test_cN.py::test_pass_M`). */
  real: string;
  expected: CanaryOutcome;
  location: CanaryLocation;
}

/** A random integer in [lo, hi]. */
const rnd = (lo: number, hi: number) => randomInt(lo, hi + 1);
/** A float literal with a few decimals, exactly representable enough for allclose. */
const num = (lo: number, hi: number) => (rnd(lo * 100, hi * 100) / 100).toFixed(2);

/**
 * The ways a test can assert, each a separate canary: a submission that neutralises one of them
 * (a no-op `assert_close`, a `torch.equal` that always says yes, a counter that always matches,
 * a `pytest.raises` that swallows "did not raise") turns the must-fail canary of that style into a
 * pass, whatever the other styles do.
 */
export const CANARY_STYLES = ["assert_close", "torch_equal", "allclose", "isclose", "approx", "int_eq", "calls", "bytes", "raises"] as const;
export type CanaryStyle = (typeof CANARY_STYLES)[number];

/**
 * The must-pass canaries: a submission gains nothing by making a passing check fail, except where a
 * check it silenced would read as "nothing happened" (counters that count nothing, a no-op
 * comparison): those styles get a must-pass twin. Fewer canaries, less time per grade.
 */
export const MUST_PASS_STYLES: readonly CanaryStyle[] = ["calls", "bytes", "assert_close", "int_eq"];

/** One canary's body in one assertion style, with constants drawn now; must-fail ones are off by a little. */
export function canaryBody(style: CanaryStyle, mustPass: boolean): string {
  const off = () => (mustPass ? "" : ` + ${num(1, 9)}`);
  const n = rnd(3, 40);
  const c = num(1, 50);
  switch (style) {
    case "assert_close":
      return [
        `    t = torch.full((${n},), ${c}, dtype=torch.float64, device=_device())`,
        "    if _dist():",
        "        dist.all_reduce(t)",
        `    expected = torch.full((${n},), ${c} * _world()${off()}, dtype=torch.float64, device=t.device)`,
        "    torch.testing.assert_close(t, expected)",
      ].join("\n");
    case "torch_equal": {
      const k = rnd(2, 60);
      return [`    x = torch.arange(${k}, dtype=torch.int64) * ${rnd(2, 9)}`, `    y = x.clone()${mustPass ? "" : ` + ${rnd(1, 5)}`}`, "    assert torch.equal(x, y)"].join("\n");
    }
    case "allclose": {
      const r = rnd(2, 9);
      const k = rnd(2, 9);
      const sc = num(0.5, 4);
      return [
        `    a = torch.arange(${r * k}, dtype=torch.float64).reshape(${r}, ${k}) * ${sc}`,
        "    with measure() as m:",
        "        b = (a @ torch.eye(" + k + ", dtype=torch.float64))",
        "    assert m.wall_time_s >= 0.0",
        `    assert torch.allclose(b, a${mustPass ? "" : ` + ${num(1, 3)}`})`,
      ].join("\n");
    }
    case "isclose":
      return [
        `    v = torch.full((${n},), ${c}, dtype=torch.float64)`,
        "    norm = float(torch.linalg.norm(v))",
        `    expected = math.sqrt(${n}) * ${c}${off()}`,
        "    assert math.isclose(norm, expected, rel_tol=1e-9), (norm, expected)",
      ].join("\n");
    case "approx":
      return [`    x = torch.linspace(0, ${c}, ${n}, dtype=torch.float64)`, `    assert float(x.mean()) == pytest.approx(${c} / 2${off()})`].join("\n");
    case "int_eq": {
      const k = rnd(5, 200);
      return [`    x = torch.arange(1, ${k + 1}, dtype=torch.int64)`, "    total = int(torch.cumsum(x, 0)[-1])", `    assert total == ${(k * (k + 1)) / 2}${mustPass ? "" : ` + ${rnd(1, 9)}`}, total`].join("\n");
    }
    case "calls":
      return [
        `    t = torch.ones(${n}, dtype=torch.float32, device=_device())`,
        "    with measure() as m:",
        "        if _dist():",
        "            dist.all_reduce(t)",
        `    assert m.calls["all_reduce"] == (1 if _dist() else 0)${mustPass ? "" : ` + ${rnd(1, 3)}`}, dict(m.calls)`,
      ].join("\n");
    case "bytes":
      return [
        `    t = torch.ones(${n}, dtype=torch.float64, device=_device())`,
        "    with measure() as m:",
        "        if _dist():",
        "            dist.all_reduce(t)",
        `    assert m.bytes["all_reduce"] == (${n * 8} if _dist() else 0)${mustPass ? "" : ` + ${rnd(1, 64)}`}, dict(m.bytes)`,
      ].join("\n");
    case "raises":
      return [
        `    x = torch.zeros(${n})`,
        "    with pytest.raises(RuntimeError):",
        mustPass ? `        x.view(${n + rnd(1, 9)}, -1, ${rnd(7, 13)})` : `        x.view(${n}, 1)`,
      ].join("\n");
  }
}

const CANARY_HEAD = `import math

import pytest
import torch
import torch.distributed as dist

from infradev_probe import measure


def _dist():
    return dist.is_available() and dist.is_initialized()


def _world():
    return dist.get_world_size() if _dist() else 1


def _device():
    if _dist() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
`;

/**
 * Fresh canary modules for one location: every assertion style once as must-fail, and the styles of
 * MUST_PASS_STYLES once as must-pass, shuffled over `files` modules, with constants drawn now (their source differs every
 * grade). Real names say what they expect (`test_pass_N` / `test_fail_N`); installed names are random.
 */
export function canaryModules(files = 2): Record<string, string> {
  const tests = [
    ...CANARY_STYLES.map((style) => ({ style, pass: false })),
    ...MUST_PASS_STYLES.map((style) => ({ style, pass: true })),
  ];
  for (let i = tests.length - 1; i > 0; i--) {
    const j = randomInt(i + 1);
    [tests[i], tests[j]] = [tests[j]!, tests[i]!];
  }
  const bodies = tests.map(({ style, pass }, n) => `\n\ndef test_${pass ? "pass" : "fail"}_${n}():\n${canaryBody(style, pass)}\n`);
  const out: Record<string, string> = {};
  for (let f = 0; f < files; f++) out[`test_c${f}.py`] = `${CANARY_HEAD}${bodies.filter((_, i) => i % files === f).join("")}`;
  return out;
}

/** The canaries of an install map (canary files' real names say what they expect). */
export function canariesOf(map: InstallMap): Canary[] {
  const out: Canary[] = [];
  for (const [installed, f] of Object.entries(map.files)) {
    if (f.suite !== "canary") continue;
    const location: CanaryLocation = f.real.startsWith(`${CANARIES_REAL_DIR}/probe/`) ? "probe" : "official";
    for (const [inst, real] of Object.entries(f.names)) {
      const expected: CanaryOutcome = real.startsWith("test_pass_") ? "passed" : "failed";
      out.push({ installed: `${installed}::${inst}`, real: `${f.real}::${real}`, expected, location });
    }
  }
  // Twins live in official and probe modules: they run one of that module's tests, then fail.
  for (const [installed, f] of Object.entries(map.files)) {
    if (f.suite === "canary") continue;
    const location: CanaryLocation = f.suite === "probe" ? "probe" : "official";
    for (const [inst, real] of Object.entries(f.twins ?? {})) {
      out.push({ installed: `${installed}::${inst}`, real: `${CANARIES_REAL_DIR}/twin/${f.real}::${real}`, expected: "not_passed", location });
    }
  }
  return out.sort((a, b) => a.real.localeCompare(b.real));
}

// ---------------------------------------------------------------- staging

/** 8 random lowercase letters: the probe folder's name. */
export function randomFolderName(taken: ReadonlySet<string> = new Set()): string {
  for (;;) {
    const name = Array.from({ length: 8 }, () => String.fromCharCode(97 + randomInt(26))).join("");
    if (!taken.has(name) && !/^test/.test(name)) return name;
  }
}

export interface InstallJob {
  src: string;
  dest: string;
  /** Installed repo-relative folder. */
  rel: string;
  /** Real repo-relative folder (what ids say). */
  real: string;
  suite: InstalledSuite;
  /** The probes' folder: its helper modules get random names too. */
  rename_helpers?: boolean;
  /** The probes beside the official tests: their top-level conftest.py becomes a plugin module with a random name. */
  conftest_plugin?: boolean;
  /** Twin canaries to append among this job's plain tests (infradev_grading.py twin_source). */
  twins?: number;
}

/** Twins per grade beside the official tests and beside the probes (each runs one real test once more). */
export const TWINS_PER_LOCATION = 2;

/**
 * Runs python/host/infradev_grading.py on the host over trusted files (the task's hidden tests and
 * probes, base's tests, the grader's canaries). `python`: the task's interpreter; the host's python3
 * when the task names one that is not on this host (a container-only interpreter).
 */
export async function runInstaller(python: string, jobs: InstallJob[]): Promise<InstallMap> {
  const script = join(hostPythonDir(), "infradev_grading.py");
  const input = JSON.stringify({ jobs });
  const run = (exe: string) => execa(exe, ["-I", "-S", script], { input, reject: false, stripFinalNewline: false, env: { PATH: process.env.PATH ?? "/usr/bin:/bin" }, extendEnv: false });
  let r = await run(python);
  if ((r as { code?: string }).code === "ENOENT" || (r.exitCode === undefined && python !== "python3")) r = await run("python3");
  if (r.exitCode !== 0) throw new Error(`installing the grading tests failed (${python} infradev_grading.py, exit ${r.exitCode ?? r.signal}): ${String(r.stderr).trim() || r.shortMessage}`);
  const map = JSON.parse(String(r.stdout)) as InstallMap;
  return map;
}

/** sha256 of every file (and link target) under a host folder, keyed by its path relative to it. */
export function hashTree(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (rel: string): void => {
    const abs = rel ? join(root, rel) : root;
    let names: string[];
    try {
      names = readdirSync(abs).sort();
    } catch {
      return;
    }
    for (const name of names) {
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(join(root, r));
      if (st.isDirectory()) walk(r);
      else if (st.isSymbolicLink()) out[r] = `link:${readlinkSync(join(root, r))}`;
      else if (st.isFile()) out[r] = sha256(readFileSync(join(root, r)));
      else out[r] = `special:${st.mode}`;
    }
  };
  walk("");
  return out;
}

/** Evidence lines for staged files whose content changed, vanished or appeared (pure). */
export function hashEvidence(before: Readonly<Record<string, string>>, after: Readonly<Record<string, string>>, label = (p: string) => p): string[] {
  const out: string[] = [];
  for (const [p, h] of Object.entries(before)) {
    if (!(p in after)) out.push(`staged test file ${label(p)} was removed during the session`);
    else if (after[p] !== h) out.push(`staged test file ${label(p)} changed during the session (sha256 ${h.slice(0, 12)} → ${after[p]!.slice(0, 12)})`);
  }
  for (const p of Object.keys(after)) if (!(p in before)) out.push(`a file appeared among the staged tests during the session: ${label(p)}`);
  return out;
}

/** Writes canary modules for both locations under `dir` (`official/`, `probe/`). */
export function writeCanarySources(dir: string): { official: string; probe: string } {
  const out = { official: join(dir, "official"), probe: join(dir, "probe") };
  for (const d of Object.values(out)) {
    mkdirSync(d, { recursive: true });
    for (const [name, text] of Object.entries(canaryModules())) writeFileSync(join(d, name), text);
  }
  return out;
}
