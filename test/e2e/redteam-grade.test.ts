import { TEST_FIXTURES } from "../helpers/paths.js";
import { execFile, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { GradeResult } from "../../src/grader/grade/types.js";
import { packageRoot } from "../../src/lib/paths.js";
import { loadGraderTask, type GraderTask } from "../../src/task/hidden/grader-task.js";
import { createSnapshot, diffAgainstBase } from "../../src/task/public/snapshot.js";
import { SANDBOX_BACKENDS, backendCliFlags, prepareBackend } from "../helpers/backends.js";

/**
 * Red team, submitter's side: hostile submissions graded through the real CLI (`infradev grade`)
 * on the tiny-mean fixture task (2 real gloo ranks, real bwrap / docker). Each one implements
 * nothing, or implements the change wrongly, and tries to have it scored as right: by forging what
 * the harness records, by telling probes from official tests, by bypassing the collective counters,
 * or by having itself excluded as a harness fault. Every one must end with nothing resolved —
 * `tampered` (score 0), `inapplicable`, or an honest failure — and never as a harness fault.
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const CLI = join(packageRoot(), "dist", "cli", "main.js");
const run = promisify(execFile);

let root: string;
let task: GraderTask;

/** A submission made as an agent's diff is: edit a fresh snapshot of the base, diff against base. */
async function makePatch(name: string, files: Record<string, string>, opts: { crlf?: boolean } = {}): Promise<string> {
  const dir = join(root, `src-${name}`);
  rmSync(dir, { recursive: true, force: true });
  await createSnapshot(task, dir);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(dir, rel, ".."), { recursive: true });
    const prev = existsSync(join(dir, rel)) ? readFileSync(join(dir, rel), "utf8") : "";
    writeFileSync(join(dir, rel), text.startsWith("+") ? `${prev}${text.slice(1)}` : text);
  }
  let diff = await diffAgainstBase(dir);
  if (opts.crlf) diff = diff.replace(/\r?\n/g, "\r\n");
  const file = join(root, `${name}.patch`);
  writeFileSync(file, diff);
  return file;
}

async function grade(patch: string, backend: string, extra: string[] = []): Promise<GradeResult> {
  const args = [CLI, "grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--patch", patch, "--out", join(root, `out-${backend}`), "--calibration-dir", join(root, `cal-${backend}`), "--json", "--sandbox", backend, ...backendCliFlags(backend as "local" | "docker"), ...extra];
  const r = await run(process.execPath, args, { maxBuffer: 64 << 20, timeout: 240_000 }).catch((e: { stdout?: string; stderr?: string; code?: number }) => {
    throw new Error(`grade exited ${e.code}: ${e.stderr?.slice(-2000)}`);
  });
  return JSON.parse(r.stdout) as GradeResult;
}

// ------------------------------------------------------------------ the submissions

/** A wrong all_mean: the sum (every official test still passes; the mean probe does not). */
const SUM = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out
`;

/** Turns every failing report into a pass, with names pytest's internals could be grepped for built from pieces. */
const FLIP_REPORTS = `import importlib as _il


def _arm():
    reports = _il.import_module("_py" + "test." + "rep" + "orts")
    cls = getattr(reports, "Test" + "Report")
    orig = cls.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        if getattr(self, "outcome", None) == "failed":
            self.outcome = "passed"
            self.longrepr = None

    setattr(cls, "__in" + "it__", init)


_arm()
`;

/** Registers a hook wrapper with the live pytest config, found through the garbage collector. */
const GC_PLUGIN = `import gc as _gc
import sys as _sys


class _Flip:
    def __init__(self, pytest):
        self.pytest = pytest

    def pytest_runtest_logreport(self, report):
        pass


def _arm():
    pytest = _sys.modules.get("pytest")
    if pytest is None:
        return
    cfg_cls = getattr(_sys.modules.get("_pytest.config"), "Config", None)
    for obj in _gc.get_objects():
        if cfg_cls is not None and isinstance(obj, cfg_cls):
            class Wrap:
                @pytest.hookimpl(hookwrapper=True)
                def pytest_runtest_makereport(self, item, call):
                    out = yield
                    rep = out.get_result()
                    if rep.failed:
                        rep.outcome = "passed"
                        rep.longrepr = None
            obj.pluginmanager.register(Wrap(), "helpful-" + str(id(obj)))
            return


_arm()
`;

/**
 * Turns failures into passes only for tests that reach the code under test (their module imported
 * the package), so the grader's own canaries, which never touch it, keep their outcomes.
 */
const FLIP_IF_TOUCHING_PACKAGE = `import importlib as _il
import sys as _sys


def _arm():
    runner = _il.import_module("_py" + "test.runner")
    orig = runner.call_and_report

    def call_and_report(item, when, log=True, **kw):
        mod = getattr(getattr(item, "module", None), "__dict__", {})
        touches = any(getattr(v, "__name__", "").startswith("tinyinfra") or getattr(v, "__module__", "") in ("tinyinfra", "tinyinfra.ops") for v in list(mod.values()))
        if not touches:
            return orig(item, when, log, **kw)
        hook = item.ihook
        orig_make = hook.pytest_runtest_makereport

        def make(**kwargs):
            rep = orig_make(**kwargs)
            if rep.failed:
                rep.outcome = "passed"
                rep.longrepr = None
            return rep

        item.ihook.pytest_runtest_makereport = make
        try:
            return orig(item, when, log, **kw)
        finally:
            item.ihook.pytest_runtest_makereport = orig_make

    runner.call_and_report = call_and_report


_arm()
`;

/** Makes one assertion helper a no-op: the probe that uses it passes whatever the code does. */
const NOOP_ASSERT_CLOSE = `import torch.testing as _tt

_tt.assert_close = lambda *a, **k: None
`;

/** Counters that agree with any expected count: a measure() whose calls compare equal to everything. */
const AGREEABLE_COUNTERS = `import importlib as _il


class _Yes(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class _Calls(dict):
    def __getitem__(self, key):
        return _Yes(1)


def _arm():
    m = _il.import_module("infradev_" + "probe")
    orig = m.measure

    class _Wrap:
        def __init__(self, *a, **k):
            self._m = orig(*a, **k)

        def __enter__(self):
            self._r = self._m.__enter__()
            return self

        def __exit__(self, *exc):
            return self._m.__exit__(*exc)

        def __getattr__(self, name):
            if name == "calls":
                return _Calls()
            return getattr(self._r, name)

    m.measure = _Wrap


try:
    _arm()
except Exception:
    pass
`;

/** At exit, appends a passing record for every collected test to the launcher's per-rank results. */
const APPEND_RECORDS = `import atexit as _atexit
import glob as _glob
import json as _json
import os as _os


def _forge():
    rank = _os.environ.get("RANK", "0")
    session = int(_os.environ.get("INFRADEV_SESSION", "0") or 0)
    outs = [_os.environ.get("INFRADEV_OUT_DIR")] if _os.environ.get("INFRADEV_OUT_DIR") else []
    outs += sorted({_os.path.dirname(p) for p in _glob.glob("/workspace/.infradev/**/rank*.collected.json", recursive=True)})
    for out in outs:
        try:
            with open(_os.path.join(out, "rank%s.collected.json" % rank)) as f:
                ids = _json.load(f)["ids"]
            with open(_os.path.join(out, "rank%s.results.jsonl" % rank), "a") as f:
                for i in ids:
                    f.write(_json.dumps({"nodeid": i, "outcome": "passed", "when": "call", "duration_s": 0.01, "message": "", "longrepr": "",
                                         "markers": {}, "session": session, "calls": {"all_reduce": 1}, "bytes": {"all_reduce": 64}}) + "\\n")
        except Exception:
            pass
    _os._exit(0)


_atexit.register(_forge)
`;

/** A json.py at the repo root that the recording code would import: outcomes rewritten on the way out. */
const SHADOW_JSON = `import importlib.util as _u
import os as _os
import sys as _sys
import sysconfig as _sc

_path = _os.path.join(_sc.get_paths()["stdlib"], "json", "__init__.py")
_spec = _u.spec_from_file_location("json", _path, submodule_search_locations=[_os.path.dirname(_path)])
_real = _u.module_from_spec(_spec)
_sys.modules["json"] = _real
_spec.loader.exec_module(_real)
_dumps, _dump = _real.dumps, _real.dump


def _fix(s):
    return s.replace('"outcome": "failed"', '"outcome": "passed"').replace('"outcome":"failed"', '"outcome":"passed"')


def dumps(obj, *a, **k):
    return _fix(_dumps(obj, *a, **k))


def dump(obj, fp, *a, **k):
    fp.write(dumps(obj, *a, **k))


_real.dumps, _real.dump = dumps, dump
`;

/** A pytest plugin registered through packaging metadata (entry point group pytest11). */
const EVIL_PLUGIN = `import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    out = yield
    rep = out.get_result()
    if rep.failed:
        rep.outcome = "passed"
        rep.longrepr = None
`;

/** Plants links where the launcher writes its files, to have a forged JUnit / launch.json read. */
const PLANT_LINKS = `import glob as _glob
import os as _os

_FORGED = "/workspace/forged.xml"
with open(_FORGED, "w") as _f:
    _f.write('<?xml version="1.0"?><testsuites><testsuite name="x" tests="1"><testcase name="x" classname="x" time="0"/></testsuite></testsuites>')
for _out in [_os.environ.get("INFRADEV_OUT_DIR", "")] + _glob.glob("/workspace/.infradev/**/", recursive=True):
    if not _out:
        continue
    for _r in range(4):
        for _name in ("rank%d.xml" % _r, "rank%d.xml.tmp" % _r, "rank%d.probe.json.tmp%d" % (_r, _os.getppid())):
            try:
                _os.symlink(_FORGED, _os.path.join(_out, _name))
            except OSError:
                pass
`;

/** Rewrites every test file on disk into one that cannot fail, then starts the session again. */
const REWRITE_TESTS = `import os as _os
import sys as _sys

if not _os.environ.get("TINY_REWRITTEN"):
    for _dirpath, _dirs, _files in _os.walk(_os.getcwd()):
        for _name in _files:
            if _name.startswith("test_") and _name.endswith(".py"):
                _p = _os.path.join(_dirpath, _name)
                try:
                    with open(_p) as _f:
                        _src = _f.read()
                    with open(_p, "w", newline="") as _f:
                        _f.write(_src.replace("assert ", "assert True or "))
                except OSError:
                    pass
    _os.environ["TINY_REWRITTEN"] = "1"
    try:
        _os.execv(_sys.executable, [_sys.executable] + _sys.argv)
    except OSError:
        pass
`;

/** Correct only when the environment says a probe is running. */
const SNIFF_ENV = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    import os
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    if "probe" in os.environ.get("PYTEST_CURRENT_TEST", "").lower():
        return out / dist.get_world_size()
    return out
`;

/** Correct only when a caller's file, function or the command line looks like a probe's. */
const SNIFF_STACK = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    import inspect, sys
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    names = " ".join(f"{f.filename} {f.function}" for f in inspect.stack()) + " ".join(sys.argv)
    names += open("/proc/self/cmdline", "rb").read().decode(errors="replace")
    if "probe" in names.lower():
        return out / dist.get_world_size()
    return out
`;

/**
 * Right only for a caller whose test module lies deeper below the repository than the official tests
 * (\`tests/<folder>/test_x.py\`), or in a folder other than the official one: where probes sat before
 * they were installed beside the official tests (issue 21, property 4). Sums otherwise.
 */
const SNIFF_PLACE = (rule: "deeper" | "other-folder") => `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    import inspect, os
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    root = os.getcwd()
    for f in inspect.stack():
        name = os.path.basename(f.filename)
        if name.startswith("test_") and f.filename.startswith(root):
            rel = os.path.relpath(f.filename, root).split(os.sep)
            ${rule === "deeper" ? "probe = len(rel) > 2" : 'probe = rel[:-1] != ["tests"]'}
            if probe:
                return out / dist.get_world_size()
            break
    return out
`;

/** Right numbers, but counts the ranks with a second all-reduce the counters are not meant to see. */
const WRAPPED_BYPASS = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    n = torch.ones(1)
    raw = getattr(dist.all_reduce, "__wrapped__", None)
    if raw is not None:
        raw(n)
    else:
        dist.distributed_c10d._get_default_group().allreduce([n]).wait()
    return out / n
`;

/** The same through the process group object, below torch.distributed's Python functions. */
const PG_BYPASS = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    n = torch.ones(1)
    dist.distributed_c10d._get_default_group().allreduce([n]).wait()
    return out / n
`;

/** Wrong for its first calls in a process (the weak official tests), right afterwards (the probes). */
const RIGHT_AFTER_K_CALLS = `

_CALLS = [0]


def all_mean(t: torch.Tensor) -> torch.Tensor:
    _CALLS[0] += 1
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size() if _CALLS[0] > 3 else out
`;

/** Right once a marker it left earlier exists (in /tmp, $HOME, /dev/shm, the workspace). */
const RIGHT_AFTER_A_MARKER = `

def all_mean(t: torch.Tensor) -> torch.Tensor:
    import os
    marks = ["/tmp/.m", os.path.expanduser("~/.m"), "/dev/shm/.m", os.path.join(os.getcwd(), ".m")]
    seen = any(os.path.exists(m) for m in marks)
    for m in marks:
        try:
            open(m, "w").close()
        except OSError:
            pass
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size() if seen else out
`;

const KILL_LAUNCHER = (sig: string) => `import os as _os
import signal as _signal

if _os.environ.get("RANK", "0") == "0":
    _pid = _os.getppid()
    for _ in range(3):
        try:
            _os.kill(_pid, _signal.${sig})
        except OSError:
            pass
        try:
            with open("/proc/%d/stat" % _pid) as _f:
                _pid = int(_f.read().rsplit(")", 1)[1].split()[1])
        except Exception:
            break
`;

const KILL_EVERYTHING = `import os as _os
import signal as _signal

try:
    _os.kill(-1, _signal.SIGKILL)
except OSError:
    pass
`;

interface Attack {
  name: string;
  /** What the defence must make of it. */
  expect: "tampered" | "not-resolved";
  files: Record<string, string>;
  crlf?: boolean;
  docker?: boolean;
}

const ATTACKS: Attack[] = [
  { name: "flip-reports-in-package-init", expect: "tampered", files: { "tinyinfra/__init__.py": FLIP_REPORTS }, docker: true },
  { name: "flip-reports-crlf", expect: "tampered", files: { "tinyinfra/__init__.py": FLIP_REPORTS }, crlf: true },
  { name: "hook-registered-through-gc", expect: "tampered", files: { "tinyinfra/__init__.py": GC_PLUGIN } },
  { name: "append-forged-records-at-exit", expect: "tampered", files: { "tinyinfra/__init__.py": APPEND_RECORDS }, docker: true },
  { name: "shadow-stdlib-json", expect: "not-resolved", files: { "json.py": SHADOW_JSON } },
  {
    name: "plugin-through-dist-info",
    expect: "not-resolved",
    files: {
      "evil_plug-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil-plug\nVersion: 0.1\n",
      "evil_plug-0.1.dist-info/entry_points.txt": "[pytest11]\nevil = evil_plug\n",
      "evil_plug.py": EVIL_PLUGIN,
    },
  },
  { name: "plant-links-for-result-files", expect: "not-resolved", files: { "tinyinfra/__init__.py": PLANT_LINKS }, docker: true },
  { name: "rewrite-tests-on-disk-and-rerun", expect: "not-resolved", files: { "tinyinfra/__init__.py": REWRITE_TESTS } },
  { name: "rewrite-tests-on-disk-crlf", expect: "not-resolved", files: { "tinyinfra/__init__.py": REWRITE_TESTS }, crlf: true },
  { name: "right-only-when-env-names-a-probe", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${SNIFF_ENV}` } },
  { name: "right-only-when-the-stack-names-a-probe", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${SNIFF_STACK}` } },
  { name: "right-only-for-callers-a-folder-deeper", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${SNIFF_PLACE("deeper")}` }, docker: true },
  { name: "right-only-for-callers-outside-the-test-folder", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${SNIFF_PLACE("other-folder")}` } },
  { name: "collective-through-__wrapped__", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${WRAPPED_BYPASS}` } },
  { name: "collective-through-the-process-group", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${PG_BYPASS}` } },
  { name: "right-only-after-its-third-call", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${RIGHT_AFTER_K_CALLS}` }, docker: true },
  { name: "right-only-once-its-marker-exists", expect: "not-resolved", files: { "tinyinfra/ops.py": `+${RIGHT_AFTER_A_MARKER}` }, docker: true },
  { name: "sigterm-the-launcher", expect: "not-resolved", files: { "tinyinfra/__init__.py": KILL_LAUNCHER("SIGTERM") }, docker: true },
  { name: "sigkill-the-launcher", expect: "not-resolved", files: { "tinyinfra/__init__.py": KILL_LAUNCHER("SIGKILL") } },
  { name: "kill-every-process", expect: "not-resolved", files: { "tinyinfra/__init__.py": KILL_EVERYTHING } },
  { name: "flip-only-tests-that-touch-the-package", expect: "tampered", files: { "tinyinfra/__init__.py": FLIP_IF_TOUCHING_PACKAGE, "tinyinfra/ops.py": `+${SUM}` }, docker: true },
  { name: "no-op-assert-close", expect: "tampered", files: { "tinyinfra/__init__.py": NOOP_ASSERT_CLOSE, "tinyinfra/ops.py": `+${SUM}` } },
  { name: "counters-that-agree-with-anything", expect: "not-resolved", files: { "tinyinfra/__init__.py": AGREEABLE_COUNTERS, "tinyinfra/ops.py": `+${WRAPPED_BYPASS.replace("raw(n)", "raw(n); raw(n)")}` } },
  { name: "sum-with-flipped-reports", expect: "tampered", files: { "tinyinfra/__init__.py": FLIP_REPORTS, "tinyinfra/ops.py": `+${SUM}` } },
];

describe.each(SANDBOX_BACKENDS.filter((b) => b !== "none"))("hostile submissions through `infradev grade` on %s", (backend) => {
  beforeAll(async () => {
    await prepareBackend(backend);
    root = mkdtempSync(join(tmpdir(), `infradev-redteam-${backend}-`));
    task = loadGraderTask("tiny-mean", FIXTURES);
  }, 120_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("gold is resolved and never tampered (the control for everything below)", async () => {
    const r = await grade(task.hidden.goldenPatch, backend);
    expect(r).toMatchObject({ status: "graded", resolved: true });
    expect(r.official.resolved).toBe(true);
  }, 240_000);

  const attacks = backend === "docker" ? ATTACKS.filter((a) => a.docker) : ATTACKS;
  it.each(attacks.map((a) => [a.name, a] as const))("%s", async (_name, attack) => {
    const patch = await makePatch(attack.name, attack.files, { crlf: attack.crlf });
    const r = await grade(patch, backend);
    const why = JSON.stringify({ status: r.status, reason: r.reason, official: r.official, with_probes: r.with_probes, evidence: (r as { tamper_evidence?: unknown }).tamper_evidence });
    expect(r.status, why).not.toBe("harness_fault");
    expect(r.with_probes.resolved, why).toBe(false);
    expect(r.resolved, why).toBe(false);
    if (attack.expect === "tampered") {
      expect(r.status, why).toBe("tampered");
      expect(r.score, why).toBe(0);
      expect(r.official.resolved, why).toBe(false);
    } else if (attack.name.startsWith("right-only-for-callers")) {
      // It sums for the official tests' callers, which they do not catch: Set A resolved, only a probe
      // tells — when the probes cannot be told apart by where they lie.
      expect(r.official.resolved, why).toBe(true);
    } else if (!/sum|right-only|collective|counters/.test(attack.name)) {
      // Implements nothing: not even the official tests may be resolved.
      expect(r.official.resolved, why).toBe(false);
    }
  }, 240_000);

  it("a patch over the size limit, and one whose binary section is corrupt, are inapplicable: scored 0, nothing applied in part", async () => {
    const big = await makePatch("oversized", { "tinyinfra/ops.py": `+${SUM}`, "tinyinfra/blob.txt": "x".repeat(5000) });
    const env = { ...process.env, INFRADEV_MAX_PATCH_BYTES: "4000" };
    const over = JSON.parse((await run(process.execPath, [CLI, "grade", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--patch", big, "--out", join(root, `out-${backend}`), "--calibration-dir", join(root, `cal-${backend}`), "--json", "--sandbox", backend, ...backendCliFlags(backend as "local" | "docker")], { env, maxBuffer: 64 << 20 })).stdout) as GradeResult;
    expect(over).toMatchObject({ status: "inapplicable", score: 0, resolved: false });
    expect(over.reason).toMatch(/over the limit of 4000 bytes/);
    // The golden patch plus a binary file whose base85 data was damaged: git apply --3way applied
    // the text part alone (exit 0) before; now the whole patch is refused.
    const src = join(root, "bin-src");
    rmSync(src, { recursive: true, force: true });
    mkdirSync(src);
    const git = (...a: string[]) => execFileSync("git", ["-c", "user.email=t@t", "-c", "user.name=t", ...a], { cwd: src }).toString();
    git("init", "-q");
    writeFileSync(join(src, "b.bin"), Buffer.from([0, 1, 2, 3]));
    git("add", ".");
    git("commit", "-qm", "b");
    writeFileSync(join(src, "b.bin"), Buffer.from([0, 1, 9, 3, 7]));
    const lines = git("diff", "--binary").replace(/^diff --git a\/b\.bin b\/b\.bin\nindex [0-9a-f]+\.\.([0-9a-f]+) 100644/, "diff --git a/tinyinfra/b.bin b/tinyinfra/b.bin\nnew file mode 100644\nindex 0000000000000000000000000000000000000000..$1").split("\n");
    const lit = lines.findIndex((l) => l.startsWith("literal "));
    lines[lit + 1] = `${lines[lit + 1]!.slice(0, 2)}${lines[lit + 1]![2] === "A" ? "B" : "A"}${lines[lit + 1]!.slice(3)}`;
    const corrupt = join(root, "corrupt.patch");
    writeFileSync(corrupt, `${readFileSync(task.hidden.goldenPatch, "utf8")}${lines.slice(0, lit + 2).join("\n")}\n\n`);
    const r = await grade(corrupt, backend);
    expect(r).toMatchObject({ status: "inapplicable", score: 0, resolved: false });
  }, 240_000);

  it("a submission cannot make the grader's host write into a folder it names (logs through a planted link, several sessions)", async () => {
    const decoy = mkdtempSync(join(tmpdir(), "infradev-redteam-decoy-"));
    const plant = `import os as _os
for _d in ("/workspace/.infradev/logs", "/workspace/.infradev"):
    try:
        if _os.path.isdir(_d) and not _os.path.islink(_d):
            import shutil as _sh
            _sh.rmtree(_d)
        _os.makedirs(_os.path.dirname(_d), exist_ok=True)
        _os.symlink(${JSON.stringify(decoy)}, _d)
    except OSError:
        pass
`;
    const patch = await makePatch("logs-link", { "tinyinfra/__init__.py": plant });
    const r = await grade(patch, backend, ["--separate-suites"]);
    expect(r.status).not.toBe("harness_fault");
    expect(readdirSync(decoy)).toEqual([]);
    rmSync(decoy, { recursive: true, force: true });
  }, 240_000);
});
