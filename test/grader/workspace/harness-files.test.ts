import { TEST_FIXTURES } from "../../helpers/paths.js";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { applyPatch } from "../../../src/grader/workspace/apply.js";
import { calibrate } from "../../../src/grader/grade/calibrate.js";
import { gradeSubmission, type GradeMeta } from "../../../src/grader/grade/grade.js";
import { checkPatch } from "../../../src/grader/workspace/patch-check.js";
import type { SandboxFactory } from "../../../src/grader/grade/pipeline.js";
import { iniSections, shlexQuote, shlexSplit } from "../../../src/grader/workspace/pytest-config-readers.js";
import { planSessions } from "../../../src/grader/grade/sessions.js";
import { planConfigReverts, planPytestPin, pyprojectPytestPart, pytestConcern, withoutSelection, type ChangedFile } from "../../../src/grader/workspace/harness-files.js";
import type { Calibration, GradeResult } from "../../../src/grader/grade/types.js";
import { freshWorkspace, installGradingTests, removeWorkspace, revertTestConfig } from "../../../src/grader/workspace/workspace.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../../src/task/public/snapshot.js";

/**
 * The grader's defence against submissions that change how pytest judges the tests from outside
 * the test dirs: the pure planner and pin (test-config.ts, pytest-config.ts), the restore on a real
 * workspace, and real 2-rank grading of hostile and legitimate patches on the tiny-mean fixture.
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const DIRS = ["tests"];
const plan = (...files: ChangedFile[]) => planConfigReverts(files, DIRS).map((a) => `${a.action} ${a.path}`);

describe("which paths can change how pytest judges (pure)", () => {
  it("classifies conftests, configs, start-up hooks, runner shadows and the grader's own folders", () => {
    const whole = ["conftest.py", "tinyinfra/conftest.py", "pytest.ini", "sub/.pytest.ini", "pytest.toml", "sitecustomize.py", "lib/usercustomize.py", "sitecustomize/__init__.py", "x.pth", "tinyinfra/__pycache__/ops.cpython-311.pyc", "infradev_probes/test_fake.py", ".infradev/grade/cpu.all/rank0.results.jsonl", "pytest.py", "pluggy.cpython-311-x86_64-linux-gnu.so", "_pytest/runner.py", "pluggy/__init__.py", "infradev_probe/plugin.py"];
    for (const p of whole) expect(pytestConcern(p, DIRS)?.kind, p).toBe("whole");
    for (const p of ["pyproject.toml", "setup.cfg", "tox.ini", "pkg/setup.cfg"]) expect(pytestConcern(p, DIRS)?.kind, p).toBe("section");
    // Test dirs belong to the test-dir step; ordinary code and a nested "pytest.py" are not pytest's.
    for (const p of ["tests/conftest.py", "tests/pytest.ini", "tinyinfra/ops.py", "tinyinfra/pytest.py", "pytest.md", "py.typed", "README.md", "setup.py"]) expect(pytestConcern(p, DIRS), p).toBeNull();
  });

  it("reverts packaging metadata and modules that shadow the standard library or the harness, only where they are importable", () => {
    const whole = [
      "evil-1.0.dist-info/entry_points.txt", "evil-1.0.dist-info/METADATA", "src/x.egg-info/entry_points.txt", "entry_points.txt", "tinyinfra.egg-link",
      "json.py", "time.py", "faulthandler.cpython-311-x86_64-linux-gnu.so", "xml/__init__.py", "importlib/__init__.py", "torch/__init__.py", "numpy.py", "infradev_rank_boot.py",
    ];
    for (const p of whole) expect(pytestConcern(p, DIRS)?.kind, p).toBe("whole");
    expect(pytestConcern("json.py", DIRS)?.kind === "whole" && (pytestConcern("json.py", DIRS) as { reason: string }).reason).toMatch(/"json".*repo root/);
    // A PYTHONPATH folder of the task is a sys.path root too.
    expect(pytestConcern("src/json.py", DIRS, ["src"])?.kind).toBe("whole");
    expect(pytestConcern("src/json.py", DIRS, ["./src/"])?.kind).toBe("whole");
    // Not importable as a top-level module: a submodule of a package, a namespace folder, other names.
    for (const p of ["tinyinfra/json.py", "src/json.py", "test/helpers.py", "xml/readme.md", "docs/time.rst", "jsonutil.py", "tinyinfra/io/__init__.py", "bench_json.py"]) {
      expect(pytestConcern(p, DIRS), p).toBeNull();
    }
  });

  it("plans restore for files base has and delete for files the patch added", () => {
    expect(
      plan(
        { path: "conftest.py", inBase: false },
        { path: "tinyinfra/conftest.py", inBase: true },
        { path: "infradev_probes/conftest.py", inBase: false },
        { path: "tests/conftest.py", inBase: true },
        { path: "tinyinfra/ops.py", inBase: true },
      ),
    ).toEqual(["delete conftest.py", "delete infradev_probes/conftest.py", "restore tinyinfra/conftest.py"]);
  });

  it("pyproject.toml / setup.cfg / tox.ini count only when their pytest part changed", () => {
    const base = `[project]\nname = "t"\nversion = "0.1.0"\n\n[tool.pytest.ini_options]\naddopts = "-ra"\n`;
    const legit = `[project]\nname = "t"\nversion = "0.2.0"\ndescription = """\n[tool.pytest.ini_options]\naddopts = "-p evil"\n"""\n\n[tool.pytest.ini_options]\naddopts = "-ra"\n\n[tool.black]\nline-length = 100\n`;
    const hostile = [
      base.replace(`"-ra"`, `"-ra --deselect infradev_probes"`),
      `${base}\n[tool]\npytest.ini_options.markers = ["x"]\n`,
      base.replace("[tool.pytest.ini_options]\naddopts", `tool.pytest.ini_options.addopts = "-k not_probe"\n[tool.pytest.ini_options]\nx`),
      `tool = { pytest = { ini_options = { addopts = "-x" } } }\n[project]\nname = "t"\n`,
      `${base}\n[tool.pytest]\naddopts = ["-p", "evil"]\n`,
      `${base}[broken\n`,
    ];
    const view = (after: string | null, b: string | null = base): ChangedFile => ({ path: "pyproject.toml", inBase: b !== null, base: b, after });
    expect(plan(view(legit))).toEqual([]);
    for (const h of hostile) expect(plan(view(h)), h).toEqual(["restore pyproject.toml"]);
    expect(plan(view(null))).toEqual(["restore pyproject.toml"]); // deleted: base's pytest section goes back
    expect(plan(view(`[project]\nname = "t"\n`, null))).toEqual([]); // added without a pytest section
    expect(plan(view(base, null))).toEqual(["delete pyproject.toml"]);

    const cfg = `[metadata]\nname = t\n\n[tool:pytest]\naddopts = -ra\n`;
    const cfgView = (after: string): ChangedFile => ({ path: "setup.cfg", inBase: true, base: cfg, after });
    expect(plan(cfgView(cfg.replace("name = t", "name = t2\n# [tool:pytest] in a comment")))).toEqual([]);
    expect(plan(cfgView(cfg.replace("-ra", "-ra\n  -p evil")))).toEqual(["restore setup.cfg"]);
    expect(plan(cfgView(`${cfg}[pytest]\naddopts = -x\n`))).toEqual(["restore setup.cfg"]);
    const tox = `[tox]\nenvlist = py311\n`;
    expect(plan({ path: "tox.ini", inBase: true, base: tox, after: `${tox}[testenv]\ndeps = pytest\n` })).toEqual([]);
    expect(plan({ path: "tox.ini", inBase: true, base: tox, after: `${tox}[pytest]\naddopts = --deselect x\n` })).toEqual(["restore tox.ini"]);
  });

  it("reads TOML strings, arrays and keys the way tomllib does", () => {
    // Parsed by a TOML 1.0 library: quoting, comments and key spelling do not change the pytest part.
    const a = pyprojectPytestPart(`[tool.pytest.ini_options]\naddopts = "-ra" # c\n`);
    expect(a).toEqual(pyprojectPytestPart(`tool.pytest.ini_options = { addopts = '-ra' }\n`));
    expect(a).toEqual(pyprojectPytestPart(`[tool]\n"pytest".ini_options.addopts = """-ra"""\n`));
    expect(a).not.toEqual(pyprojectPytestPart(`[tool.pytest.ini_options]\naddopts = "-ra -p evil"\n`));
    expect(pyprojectPytestPart(`a = "unterminated\n`)).toBeNull();
    expect(pyprojectPytestPart(`[tool.ruff]\nx = 1\n`)).toEqual([]);
    expect(iniSections(`[Tool:Pytest] # c\naddopts = -x\n  -q\n; c\n[other]\na = 1\n`, ["tool:pytest"])).toEqual(["[tool:pytest]", "addopts = -x", "  -q"]);
  });
});

describe("pinning the sessions' config (pure)", () => {
  it("shlex split / quote round-trip as Python's", () => {
    expect(shlexSplit(`-k 'not slow' -m "a \\"b\\" \\c" x\\ y ''`)).toEqual(["-k", "not slow", "-m", 'a "b" \\c', "x y", ""]);
    expect(shlexSplit(`'open`)).toBeNull();
    const tokens = ["-p", "no:x", "it's", "a b", ""];
    expect(shlexSplit(tokens.map(shlexQuote).join(" "))).toEqual(tokens);
  });

  it("leaves out -k / --deselect / -x / --maxfail, in any spelling, and keeps everything else", () => {
    const { kept, dropped } = withoutSelection(["-ra", "-x", "-vx", "-k", "not probe", "-kfoo", "--deselect", "infradev_probes/t.py", "--deselect=a", "--keyword=b", "--maxfail", "2", "--exitfirst", "-p", "no:x", "-rAx", "-xp", "plug", "--import-mode", "importlib", "-m", "not gpu"]);
    expect(kept).toEqual(["-ra", "-v", "-p", "no:x", "-rAx", "-p", "plug", "--import-mode", "importlib", "-m", "not gpu"]);
    expect(dropped).toEqual(["-x", "-vx", "-k", "not probe", "-kfoo", "--deselect", "infradev_probes/t.py", "--deselect=a", "--keyword=b", "--maxfail", "2", "--exitfirst", "-xp"]);
  });

  it("pins rootdir and confcutdir, the base's root config by pytest's precedence, and addopts only when needed", () => {
    expect(planPytestPin({})).toEqual({ args: ["--rootdir=.", "--confcutdir=."], config: null, droppedAddopts: [] });
    // A pyproject without a pytest table is not pytest's config; setup.cfg's [tool:pytest] is.
    expect(planPytestPin({ "pyproject.toml": `[project]\nname = "t"\n`, "setup.cfg": "[tool:pytest]\naddopts = -ra\n" })).toEqual({
      args: ["--rootdir=.", "--confcutdir=.", "-c", "setup.cfg"],
      config: "setup.cfg",
      droppedAddopts: [],
    });
    expect(planPytestPin({ "pyproject.toml": `[tool.pytest.ini_options]\naddopts = "-ra -x --deselect 'infradev_probes/a b.py'"\n`, "tox.ini": "[pytest]\n" })).toEqual({
      args: ["--rootdir=.", "--confcutdir=.", "-c", "pyproject.toml", "-o", "addopts=-ra"],
      config: "pyproject.toml",
      droppedAddopts: ["-x", "--deselect", "infradev_probes/a b.py"],
    });
    expect(planPytestPin({ "pytest.ini": "[pytest]\naddopts = -k 'not slow'\n    --strict-markers\n" }).args).toEqual(["--rootdir=.", "--confcutdir=.", "-c", "pytest.ini", "-o", "addopts=--strict-markers"]);
    expect(planPytestPin({ "pyproject.toml": `[tool.pytest]\naddopts = ["-x", "-p", "no:randomly"]\n` }).args.slice(-2)).toEqual(["-o", "addopts=-p no:randomly"]);
  });
});

let root: string;
let task: GraderTask;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-grader-config-"));
  task = loadGraderTask("tiny-mean", FIXTURES);
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A submission made the way an agent's diff is (edit a fresh snapshot, diff against base), plus raw extra diff text. */
async function makePatch(name: string, edit: (dir: string) => void, extra = ""): Promise<string> {
  const dir = join(root, `src-${name}`);
  await createSnapshot(task, dir);
  edit(dir);
  const file = join(root, `${name}.patch`);
  writeFileSync(file, (await diffAgainstBase(dir)) + extra);
  return file;
}
const put = (dir: string, rel: string, text: string) => {
  mkdirSync(dirname(join(dir, rel)), { recursive: true });
  writeFileSync(join(dir, rel), text);
};
/** A diff that adds `path` with `text`, for files an agent's `git diff` would not show (ignored ones). */
const newFileDiff = (path: string, text: string) => {
  const lines = text.replace(/\n$/, "").split("\n");
  return `diff --git a/${path} b/${path}\nnew file mode 100644\n--- /dev/null\n+++ b/${path}\n@@ -0,0 +1,${lines.length} @@\n${lines.map((l) => `+${l}`).join("\n")}\n`;
};
/** Applies the ops.py half of one of the task's patches (golden or adversarial) to a snapshot. */
const opsFrom = (file: string) => (dir: string) => {
  const patch = readFileSync(file, "utf8").split(/(?=^diff --git )/m).find((s) => s.includes("tinyinfra/ops.py"))!;
  const body = patch.split("\n").filter((l) => l.startsWith("+") && !l.startsWith("+++")).map((l) => l.slice(1)).join("\n");
  writeFileSync(join(dir, "tinyinfra", "ops.py"), `${readFileSync(join(dir, "tinyinfra", "ops.py"), "utf8")}${body}\n`);
};
const HOOK = `import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n    outcome = yield\n    report = outcome.get_result()\n    if report.failed:\n        report.outcome = "passed"\n        report.longrepr = None\n`;

describe("the restore on a real workspace (git, no ranks)", () => {
  it("restores or removes what the plan says, sees files a .gitignore hides, keeps the rest of the patch", async () => {
    const patch = await makePatch(
      "io",
      (dir) => {
        writeFileSync(join(dir, ".gitignore"), "conftest.py\n");
        put(dir, "pytest/__init__.py", "raise SystemExit(0)\n");
        const pyproject = join(dir, "pyproject.toml");
        writeFileSync(pyproject, readFileSync(pyproject, "utf8").replace('version = "0.1.0"', 'version = "0.2.0"').replace('"-ra -x"', '"-ra -p tinyinfra.evil"'));
        opsFrom(task.hidden.goldenPatch)(dir);
      },
      newFileDiff("conftest.py", HOOK),
    );
    const ws = await freshWorkspace(task);
    try {
      const applied = await applyPatch(ws.repoDir, patch, ws.baseCommit);
      expect(applied.applied).toBe(true);
      if (!applied.applied) return;
      expect(applied.paths).not.toContain("conftest.py"); // hidden from git status by the .gitignore
      const pre = checkPatch(readFileSync(patch));
      const reverts = await revertTestConfig(task, ws, [...(pre.ok ? pre.paths : []), ...applied.paths]);
      expect(reverts.map((a) => `${a.action} ${a.path}`)).toEqual(["delete conftest.py", "restore pyproject.toml", "delete pytest/__init__.py"]);
      expect(existsSync(join(ws.repoDir, "conftest.py"))).toBe(false);
      expect(existsSync(join(ws.repoDir, "pytest/__init__.py"))).toBe(false);
      expect(readFileSync(join(ws.repoDir, "pyproject.toml"), "utf8")).toBe(readFileSync(join(task.source.dir, "pyproject.toml"), "utf8"));
      expect(readFileSync(join(ws.repoDir, "tinyinfra/ops.py"), "utf8")).toContain("def all_mean");
      expect(readFileSync(join(ws.repoDir, ".gitignore"), "utf8")).toBe("conftest.py\n");
      // Sessions are pinned to the restored base config, without its -x.
      const { staged } = await installGradingTests(task, ws, []);
      // Official tests and probes in separate sessions, each pinned the same way.
      const [official, probe] = planSessions(task, ws.repoDir, staged);
      const pin = ["--continue-on-collection-errors", "--rootdir=.", "--confcutdir=.", "-c", "pyproject.toml", "-o", "addopts=-ra"];
      expect(official!.pytestArgs).toEqual(["tests", ...staged.probeOnly.map((f) => `--ignore=${f}`), ...pin]);
      expect(probe!.pytestArgs).toEqual([...staged.probeFiles, ...pin]);
    } finally {
      removeWorkspace(ws);
    }
  });
});

describe("grading hostile and legitimate patches on real ranks", () => {
  let sandboxFactory: SandboxFactory;
  let calibration: Calibration;
  /** What the sessions saw: the workspace as it was when the grader's sandbox started. */
  let seen: { pyproject: string; probes: string[] } | null = null;
  const grade = (patchFile: string) => gradeSubmission({ task, patchFile, outDir: join(root, "out"), calibration, sandboxFactory });
  const meta = (artifactDir: string) => JSON.parse(readFileSync(join(artifactDir, "meta.json"), "utf8")) as GradeMeta;
  const reverted = (m: GradeMeta) => m.reverted_test_config.map((a) => `${a.action} ${a.path}`);
  const probe = (r: GradeResult, name: string) => r.cases.find((c) => c.id.endsWith(`::${name}`));
  const sumNotMean = () => task.hidden.adversarial.find((a) => a.name === "sum-not-mean")!.patchPath;

  beforeAll(async () => {
    const real = graderSandboxFactory("local", [root]);
    sandboxFactory = async (args) => {
      // The staged first test dir: the official tests and, beside them, the probes.
      const staged = args.readOnlyOverlays![0]!.host;
      seen = { pyproject: readFileSync(join(args.hostRepoDir, "pyproject.toml"), "utf8"), probes: readdirSync(staged).filter((n) => n !== "__pycache__").sort() };
      return real(args);
    };
    // One gold run is enough here (flakiness is not under test). With the base's -x kept, gold would
    // stop at its failing official test and its probes would never run (and never be required).
    calibration = (await calibrate({ task, cacheDir: join(root, "calibration"), sandboxFactory, runs: 1 })).calibration;
    expect(calibration.cases).toHaveLength(8);
    expect(calibration.cases.filter((c) => c.suite === "probe").map((c) => c.outcomes)).toEqual([["passed"], ["passed"]]);
  }, 120_000);

  it("a root conftest.py that turns every failure into a pass is removed: the adversarial patch is still caught", async () => {
    const patch = await makePatch("hook", (dir) => {
      opsFrom(sumNotMean())(dir);
      put(dir, "conftest.py", HOOK);
      put(dir, "tinyinfra/conftest.py", HOOK);
    });
    const out = await grade(patch);
    expect(out.result).toMatchObject({ status: "graded", official: { resolved: true }, with_probes: { resolved: false } });
    expect(probe(out.result, "test_mean_is_the_average")).toMatchObject({ outcome: "failed", label: "numerical" });
    expect(reverted(meta(out.artifactDir))).toEqual(["delete conftest.py", "delete tinyinfra/conftest.py"]);
    // Flagged for a reviewer too: the hook names pytest's internals (line 5 of each conftest).
    expect(meta(out.artifactDir).tamper_findings.map((f) => `${f.file}:${f.line} ${f.what}`)).toEqual([
      "conftest.py:5 pytest's internals or hooks",
      "tinyinfra/conftest.py:5 pytest's internals or hooks",
    ]);
  }, 60_000);

  it("a pytest.ini whose addopts deselect the probe that catches the patch is removed", async () => {
    const patch = await makePatch("deselect", (dir) => {
      opsFrom(sumNotMean())(dir);
      put(dir, "pytest.ini", "[pytest]\naddopts = --deselect infradev_probes/test_probe_mean.py::test_mean_is_the_average\n");
    });
    const out = await grade(patch);
    expect(out.result.with_probes.resolved).toBe(false);
    expect(probe(out.result, "test_mean_is_the_average")).toMatchObject({ outcome: "failed", label: "numerical" });
    expect(reverted(meta(out.artifactDir))).toEqual(["delete pytest.ini"]);
    expect(meta(out.artifactDir).pytest_pin).toMatchObject({ config: "pyproject.toml", droppedAddopts: ["-x"] });
  }, 60_000);

  it("a legitimate pyproject.toml change is kept; files planted under infradev_probes/ and .infradev/ are removed", async () => {
    const patch = await makePatch(
      "legit",
      (dir) => {
        opsFrom(task.hidden.goldenPatch)(dir);
        const pyproject = join(dir, "pyproject.toml");
        writeFileSync(pyproject, `${readFileSync(pyproject, "utf8").replace('version = "0.1.0"', 'version = "0.2.0"')}\n[tool.black]\nline-length = 100\n`);
        put(dir, "infradev_probes/test_probe_mean.py", "def test_mean_is_the_average():\n    pass\n");
        put(dir, "infradev_probes/test_extra.py", "def test_extra():\n    pass\n");
      },
      // .infradev/ is excluded from the workspace's git status: only the patch's headers name it.
      newFileDiff(".infradev/grade/cpu.all/rank0.results.jsonl", '{"nodeid": "infradev_probes/test_probe_mean.py::test_one_all_reduce_call", "outcome": "passed"}'),
    );
    const out = await grade(patch);
    expect(out.result).toMatchObject({ status: "graded", official: { resolved: true }, with_probes: { resolved: true, resolved_strict: true } });
    expect(reverted(meta(out.artifactDir))).toEqual([
      "delete .infradev/grade/cpu.all/rank0.results.jsonl",
      "delete infradev_probes/test_extra.py",
      "delete infradev_probes/test_probe_mean.py",
    ]);
    expect(meta(out.artifactDir).tamper_findings.map((f) => f.file)).toEqual([".infradev/grade/cpu.all/rank0.results.jsonl"]);
    expect(seen!.pyproject).toContain('version = "0.2.0"');
    expect(seen!.pyproject).toContain("[tool.black]");
    // One folder, no subfolder: the official conftest, the probes' conftest as a module with a random
    // name, and six test modules under random names (test_ops, the probe module, two canaries beside each).
    expect(seen!.probes.filter((n) => !/^test_[a-z]{10}\.py$/.test(n))).toEqual(expect.arrayContaining(["conftest.py"]));
    expect(seen!.probes.filter((n) => !/^test_[a-z]{10}\.py$/.test(n) && n !== "conftest.py")).toEqual([expect.stringMatching(/^[a-z]{10}\.py$/)]);
    expect(seen!.probes).toHaveLength(8);
  }, 60_000);
});
