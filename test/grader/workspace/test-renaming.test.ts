import { REPO_ROOT } from "../../helpers/paths.js";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CANARY_STYLES, MUST_PASS_STYLES, canariesOf, canaryModules, hashEvidence, hashTree, installedCaseId, mapCaseId, runInstaller, unmapText, type InstallMap } from "../../../src/grader/workspace/test-renaming.js";
import { tamperEvidence, type RankIntegrityRecord, type TamperInput } from "../../../src/grader/grade/tamper.js";
import type { MergedCase } from "../../../src/runner/merge.js";

/**
 * The install under random names (python/host/infradev_grading.py, run on the host as the grader
 * runs it) and the pure tamper verdict. pytest itself collects the renamed tree, so the map is
 * checked against what pytest really calls the tests.
 */

const PY = "/usr/bin/python3";
let scratch: string;
beforeAll(() => {
  scratch = mkdtempSync(join(tmpdir(), "infradev-grader-install-"));
});
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const SOURCE = `"""A module with every shape the install renames."""
import pytest


def helper():
    s = "é"; f = test_alpha  # a same-module reference after a non-ASCII character
    return f, s


@pytest.mark.probe(
    promise="p1",
    kind="numerical",
)
@pytest.mark.parametrize("x", [1, 2], ids=["a", "b"])
def test_alpha(x):
    assert x


async def test_beta():
    pass


def test_gamma():
    assert helper()[0] is test_alpha


class TestGroup:
    def test_m(self):
        self.test_n()

    def test_n(self):
        pass

    def other(self):
        return TestGroup.test_m


@pytest.mark.probe(promise="p2", kind="state")
class TestMarked:
    def test_inner(self):
        pass

    @pytest.mark.probe(promise="p3", kind="resource")  # closest marker wins
    def test_closest(self):
        pass
`;

/** Node ids pytest collects under `dir` (run from `cwd`). */
function collect(cwd: string, dir: string): string[] {
  const out = execFileSync(PY, ["-m", "pytest", "--co", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", dir], { cwd, encoding: "utf8" });
  return out.split("\n").filter((l) => l.includes("::"));
}

describe("install under random names (infradev_grading.py)", () => {
  let map: InstallMap;
  let src: string;
  let repo: string;
  beforeAll(async () => {
    src = join(scratch, "src", "tests");
    mkdirSync(src, { recursive: true });
    writeFileSync(join(src, "test_shapes.py"), SOURCE);
    writeFileSync(join(src, "crlf_test.py"), SOURCE.replace(/\n/g, "\r\n"));
    writeFileSync(join(src, "conftest.py"), "X = 1\n");
    writeFileSync(join(src, "helpers.py"), "Y = 2\n");
    repo = join(scratch, "repo");
    map = await runInstaller(PY, [{ src, dest: join(repo, "tests"), rel: "tests", real: "tests", suite: "probe" }]);
  });

  it("renames every test module, function, class and method; conftest and helpers keep their names", () => {
    const files = readdirSync(join(repo, "tests")).sort();
    expect(files.filter((f) => !/^test_[a-z]{10}\.py$/.test(f))).toEqual(["conftest.py", "helpers.py"]);
    expect(Object.values(map.files).map((f) => f.real).sort()).toEqual(["tests/crlf_test.py", "tests/test_shapes.py"]);
    const [installed, entry] = Object.entries(map.files).find(([, f]) => f.real === "tests/test_shapes.py")!;
    expect(Object.values(entry.names).sort()).toEqual(["TestGroup", "TestMarked", "test_alpha", "test_beta", "test_gamma"]);
    const text = readFileSync(join(repo, installed), "utf8");
    for (const real of ["test_alpha", "test_beta", "test_gamma", "TestGroup", "test_m", "test_n", "probe"]) expect(text).not.toMatch(new RegExp(`\\b${real}\\b`));
    // Docstrings say what a test checks: emptied, on the same line.
    expect(text).not.toContain("every shape the install renames");
    expect(text.split("\n")[0]!.trimEnd()).toBe('""');
    // Same lines: the marker lines are empty, nothing moved.
    expect(text.split("\n")).toHaveLength(SOURCE.split("\n").length);
    const lines = text.split("\n");
    expect(lines[10]).toBe("");
    expect(lines[14]).toMatch(/^def test_[a-z]{10}\(x\):$/);
    expect(lines[5]).toMatch(/^    s = "é"; f = test_[a-z]{10}  # a same-module/);
    expect(lines[5]!.slice(17, 32)).toBe(lines[14]!.slice(4, 19));
    expect(lines[37]).toBe("");
    expect(lines[42]).toMatch(/^ +# closest marker wins$/);
    expect(entry.known).toEqual(expect.arrayContaining(["helper", "pytest"]));
    const crlf = Object.entries(map.files).find(([, f]) => f.real === "tests/crlf_test.py")![0];
    expect(readFileSync(join(repo, crlf), "utf8").split("\r\n")).toHaveLength(SOURCE.split("\n").length);
  });

  it("the ids pytest collects in the renamed tree map back to exactly the real ids", () => {
    const real = collect(join(scratch, "src"), "tests").sort();
    const installed = collect(repo, "tests");
    expect(installed.some((id) => id.includes("test_alpha"))).toBe(false);
    expect(installed.map((id) => mapCaseId(map, id)!.id).sort()).toEqual(real);
    expect(real).toContain("tests/test_shapes.py::test_alpha[a]");
    expect(real).toContain("tests/crlf_test.py::TestMarked::test_closest");
    // And back: each real id names exactly the installed one (task check's fail-fast list, issue 23).
    for (const id of installed) expect(installedCaseId(map, mapCaseId(map, id)!.id)).toBe(id);
    expect(installedCaseId(map, "tests/test_shapes.py::test_no_such")).toBeNull();
    expect(installedCaseId(map, "tests/no_such.py::test_alpha")).toBeNull();
  });

  it("the renamed tests still pass (references followed), and markers are kept by the host, closest first", () => {
    const out = execFileSync(PY, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", "tests"], { cwd: repo, encoding: "utf8" });
    expect(out).toMatch(/14 passed, 2 skipped/); // async tests are skipped without a plugin for them
    const byReal = (real: string) => {
      const [file, ...rest] = real.split("::");
      const [installedFile, f] = Object.entries(map.files).find(([, x]) => x.real === file)!;
      const inv = (d: Record<string, string>, v: string) => Object.entries(d).find(([, r]) => r === v)?.[0] ?? v;
      const top = inv(f.names, rest[0]!.replace(/\[.*/, ""));
      const parts = [installedFile, `${top}${rest.length === 1 ? rest[0]!.slice(rest[0]!.replace(/\[.*/, "").length) : ""}`];
      if (rest[1]) parts.push(inv(f.methods[top] ?? {}, rest[1]));
      return mapCaseId(map, parts.join("::"));
    };
    expect(byReal("tests/test_shapes.py::test_alpha[b]")).toEqual({ id: "tests/test_shapes.py::test_alpha[b]", suite: "probe", probe: { promise: "p1", kind: "numerical" } });
    expect(byReal("tests/test_shapes.py::TestMarked::test_inner")!.probe).toEqual({ promise: "p2", kind: "state" });
    expect(byReal("tests/test_shapes.py::TestMarked::test_closest")!.probe).toEqual({ promise: "p3", kind: "resource" });
    expect(byReal("tests/test_shapes.py::test_gamma")!.probe).toBeUndefined();
  });

  it("ids that were never installed map to nothing; unrenamed module-level names map to themselves", () => {
    const [installed] = Object.entries(map.files)[0]!;
    expect(mapCaseId(map, "tests/test_forged.py::test_x")).toBeNull();
    expect(mapCaseId(map, `${installed}::test_forged`)).toBeNull();
    expect(mapCaseId(map, `${installed}::helper`)!.id).toMatch(/::helper$/);
    expect(mapCaseId(map, installed)!.id).toMatch(/^tests\/(test_shapes|crlf_test)\.py$/);
    const name = Object.keys(map.files[installed]!.names)[0]!;
    expect(unmapText(map, `E   in ${installed}:12 ${name}() failed; tests/abcdefgh/x`, [["tests/abcdefgh", "infradev_probes"]])).toBe(
      `E   in ${map.files[installed]!.real}:12 ${map.files[installed]!.names[name]}() failed; infradev_probes/x`,
    );
  });

  it("in the probes' folder, helper modules get random names too, and every import of them follows", async () => {
    const probes = join(scratch, "probes");
    mkdirSync(probes);
    writeFileSync(join(probes, "my_probe_support.py"), "VALUE = 7\n");
    writeFileSync(join(probes, "conftest.py"), "import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\nfrom my_probe_support import VALUE  # noqa\n");
    writeFileSync(
      join(probes, "test_probe_x.py"),
      "import my_probe_support\nimport my_probe_support as support\nfrom my_probe_support import (\n    VALUE,\n)\n\n\ndef test_x():\n    assert my_probe_support.VALUE == support.VALUE == VALUE == 7\n",
    );
    const out = join(scratch, "probe-repo");
    const m = await runInstaller(PY, [{ src: probes, dest: join(out, "tests", "abcdefgh"), rel: "tests/abcdefgh", real: "infradev_probes", suite: "probe", rename_helpers: true }]);
    const names = readdirSync(join(out, "tests", "abcdefgh")).sort();
    expect(names.filter((n) => /probe/.test(n))).toEqual([]);
    expect(Object.values(m.helpers!)).toEqual(["infradev_probes/my_probe_support.py"]);
    const helper = Object.keys(m.helpers!)[0]!.split("/").at(-1)!.replace(/\.py$/, "");
    expect(readFileSync(join(out, "tests", "abcdefgh", "conftest.py"), "utf8")).toContain(`from ${helper} import VALUE  # noqa`);
    const run = execFileSync(PY, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], { cwd: out, encoding: "utf8" });
    expect(run).toMatch(/1 passed/);
    expect(unmapText(m, `File "tests/abcdefgh/${helper}.py", line 1`)).toBe('File "infradev_probes/my_probe_support.py", line 1');
  });

  it("a probe marker whose arguments are not literals is refused, with the file named", async () => {
    const bad = join(scratch, "bad");
    mkdirSync(bad);
    writeFileSync(join(bad, "test_bad.py"), "import pytest\nP = 'x'\n\n@pytest.mark.probe(promise=P, kind='state')\ndef test_x():\n    pass\n");
    await expect(runInstaller(PY, [{ src: bad, dest: join(scratch, "bad-out"), rel: "t", real: "t", suite: "probe" }])).rejects.toThrow(/t\/test_bad\.py: line 4: the probe marker's arguments must be literals/);
  });
});

describe("twin canaries", () => {
  it("run a real test of their module with the same fixtures, then fail; map to the canaries, never to a real id", async () => {
    const src = join(scratch, "twin-src", "tests");
    mkdirSync(src, { recursive: true });
    writeFileSync(join(src, "conftest.py"), "import pytest\n\n@pytest.fixture\ndef seven():\n    return 7\n");
    writeFileSync(
      join(src, "test_plain.py"),
      [
        "import pytest",
        "CALLS = []",
        "",
        "def test_uses_fixture(seven):",
        "    CALLS.append(seven)",
        "    assert seven == 7",
        "",
        "def test_plain():",
        "    CALLS.append(0)",
        "",
        "@pytest.mark.parametrize('x', [1])",
        "def test_decorated(x):",
        "    pass",
        "",
        "def test_kw(a=1):",
        "    pass",
        "",
        "def test_zz_seen_by_the_twins():",
        "    # Twins are appended after this one: when it runs, no twin has run yet.",
        "    assert CALLS == [7, 0]",
        "",
      ].join("\n"),
    );
    const repo = join(scratch, "twin-repo");
    const map = await runInstaller(PY, [{ src, dest: join(repo, "tests"), rel: "tests", real: "tests", suite: "official", twins: 5 }]);
    const [installed, entry] = Object.entries(map.files)[0]!;
    // Only the plain tests can be twinned (no decorator, no default, no *args): three here, so three twins.
    expect(Object.values(entry.twins ?? {}).sort()).toEqual(["test_plain", "test_uses_fixture", "test_zz_seen_by_the_twins"]);
    // Appended after the module's last line: the first 20 lines are the renamed module, unmoved.
    const text = readFileSync(join(repo, installed), "utf8").split("\n");
    expect(text[3]).toMatch(/^def test_[a-z]{10}\(seven\):$/);
    // A mutant twin (python/host/infradev_twins.py): the test's own body, its last assertion made false.
    expect(text.slice(20).join("\n")).toMatch(/^def test_[a-z]{10}\(seven\):\n {4}CALLS\.append\(seven\)\n {4}assert .*\band not\b/m);
    const canaries = canariesOf(map).filter((c) => c.expected === "not_passed");
    expect(canaries).toHaveLength(3);
    for (const c of canaries) {
      expect(c.real).toMatch(/^infradev_canaries\/twin\/tests\/test_plain\.py::test_/);
      expect(mapCaseId(map, c.installed)).toEqual({ id: c.real, suite: "canary" });
    }
    // Run them: every twin fails (after running its test: the counter saw it), every real test passes.
    const run = spawnSync(PY, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "tests"], { cwd: repo, encoding: "utf8" });
    const outcome = (line: string) => /^(PASSED|FAILED|ERROR|SKIPPED) (\S+)/.exec(line);
    const results = new Map(run.stdout.split("\n").map(outcome).filter((m): m is RegExpExecArray => m !== null).map((m) => [m[2]!.replace(/ - .*$/, ""), m[1]!]));
    for (const c of canaries) expect(results.get(c.installed), `${c.installed}\n${run.stdout}`).toBe("FAILED");
    const real = [...results].filter(([id]) => !canaries.some((c) => c.installed === id));
    expect(real.length).toBe(5);
    expect(real.every(([, o]) => o === "PASSED"), run.stdout).toBe(true);
  });
});

describe("canaries", () => {
  it("are fresh each time, each assertion style once must-pass and once must-fail per location, and behave as they say", async () => {
    const a = canaryModules();
    const b = canaryModules();
    expect(Object.keys(a)).toEqual(["test_c0.py", "test_c1.py"]);
    expect(JSON.stringify(a)).not.toBe(JSON.stringify(b));
    const dir = join(scratch, "canaries");
    mkdirSync(dir);
    for (const [n, t] of Object.entries(a)) writeFileSync(join(dir, n), t);
    const map = await runInstaller(PY, [{ src: dir, dest: join(scratch, "canary-repo", "tests"), rel: "tests", real: "infradev_canaries/official", suite: "canary" }]);
    const canaries = canariesOf(map);
    // Every assertion style once as must-pass and once as must-fail.
    expect(canaries.filter((c) => c.expected === "passed")).toHaveLength(MUST_PASS_STYLES.length);
    expect(canaries.filter((c) => c.expected === "failed")).toHaveLength(CANARY_STYLES.length);
    // One process, no process group: each canary's outcome is the one it must have.
    const helpers = join(REPO_ROOT, "python", "sandbox");
    let out = "";
    try {
      execFileSync(PY, ["-m", "pytest", "-rA", "-p", "no:cacheprovider", "tests"], { cwd: join(scratch, "canary-repo"), encoding: "utf8", env: { ...process.env, PYTHONPATH: helpers } });
    } catch (e) {
      out = String((e as { stdout: string }).stdout);
    }
    for (const c of canaries) expect(out, out).toContain(`${c.expected === "passed" ? "PASSED" : "FAILED"} ${c.installed}`);
  });
});

// ---------------------------------------------------------------- the verdict (pure)

const MAP: InstallMap = {
  files: {
    "tests/test_aaaaaaaaaa.py": { real: "tests/test_ops.py", suite: "official", names: { test_bbbbbbbbbb: "test_sum" }, methods: {}, known: [] },
    "tests/qwertyui/test_cccccccccc.py": { real: "infradev_probes/test_probe.py", suite: "probe", names: { test_dddddddddd: "test_mean" }, methods: {}, known: [] },
    "tests/test_eeeeeeeeee.py": { real: "infradev_canaries/official/test_c0.py", suite: "canary", names: { test_ffffffffff: "test_pass_0", test_gggggggggg: "test_fail_1" }, methods: {}, known: [] },
  },
  markers: {},
};
const CANARIES = canariesOf(MAP);
const OFFICIAL = "tests/test_aaaaaaaaaa.py::test_bbbbbbbbbb";
const PROBE = "tests/qwertyui/test_cccccccccc.py::test_dddddddddd";
const PASS = "tests/test_eeeeeeeeee.py::test_ffffffffff";
const FAIL = "tests/test_eeeeeeeeee.py::test_gggggggggg";

function mc(id: string, ...outcomes: Array<MergedCase["ranks"][number]["outcome"]>): MergedCase {
  const ranks = outcomes.map((outcome, rank) => ({ rank, outcome, message: "", excerpt: "" }));
  const worst = outcomes.includes("failed") || outcomes.includes("missing") ? "failed" : (outcomes[0] as "passed");
  return { id, outcome: worst, timeSec: 0, ranks };
}
const honestCases = () => [mc(OFFICIAL, "passed", "passed"), mc(PROBE, "failed", "failed"), mc(PASS, "passed", "passed"), mc(FAIL, "failed", "failed")];
const counts = (passed: number, failed: number, error = 0, skipped = 0) => ({ passed, failed, error, skipped });
const junit = (outcomes: Record<string, "passed" | "failed" | "error" | "skipped">) => {
  const c = counts(0, 0);
  for (const o of Object.values(outcomes)) c[o]++;
  return { ...c, outcomes };
};
const honestIntegrity = (): RankIntegrityRecord[] =>
  [0, 1].map((rank) => ({ rank, exit_code: 1, plugin: counts(2, 2), summary: counts(2, 2), pytest_junit: junit({ [OFFICIAL]: "passed", [PROBE]: "failed", [PASS]: "passed", [FAIL]: "failed" }) }));
const input = (over: Partial<TamperInput> = {}): TamperInput => ({
  session: "cpu.all",
  ranks: 2,
  cases: honestCases(),
  integrity: honestIntegrity(),
  events: [],
  map: MAP,
  canaries: CANARIES,
  hashesBefore: { "tests/test_aaaaaaaaaa.py": "h1", "tests/qwertyui/test_cccccccccc.py": "h2" },
  hashesAfter: { "tests/test_aaaaaaaaaa.py": "h1", "tests/qwertyui/test_cccccccccc.py": "h2" },
  extra: [["tests/qwertyui", "infradev_probes"]],
  ...over,
});

describe("tamper verdict (pure)", () => {
  it("an honest session gives no evidence", () => {
    expect(tamperEvidence(input())).toEqual([]);
    // A rank without pytest's own records because it was killed (by a signal, or by the launcher) is not evidence by itself.
    expect(tamperEvidence(input({ integrity: honestIntegrity().map((r) => ({ ...r, exit_code: -9, summary: null, pytest_junit: null })) }))).toEqual([]);
    expect(tamperEvidence(input({ integrity: honestIntegrity().map((r) => ({ ...r, exit_code: null, summary: null, pytest_junit: null, comm_written: false })) }))).toEqual([]);
    // The wire record (the kernel's count beside the counters) is a measurement, never evidence.
    const wired = honestIntegrity().map((r) => ({ ...r, comm_written: true, refused_groups: [], wire: { measured_segments: 900, explained_segments: 1000, payload_bytes: 1000, counted_bytes: 1000, verdict: false as const } }));
    expect(tamperEvidence(input({ integrity: wired }))).toEqual([]);
    expect(tamperEvidence(input({ integrity: honestIntegrity().map((r) => ({ ...r, wire: { skip: "NCCL groups" } })) }))).toEqual([]);
  });

  it("a rank that ended normally without its JUnit report, summary line or collective totals is evidence (issue 21, property 5)", () => {
    const one = (patch: Partial<RankIntegrityRecord>) => [honestIntegrity()[0]!, { ...honestIntegrity()[1]!, ...patch }];
    expect(tamperEvidence(input({ integrity: one({ pytest_junit: null }) }))).toEqual([expect.stringMatching(/^cpu\.all: rank 1: pytest exited 1 but pytest's JUnit report is missing/)]);
    expect(tamperEvidence(input({ integrity: one({ summary: null, pytest_junit: null }) }))).toEqual([expect.stringMatching(/rank 1: pytest exited 1 but pytest's JUnit report, pytest's summary line are missing/)]);
    expect(tamperEvidence(input({ integrity: one({ comm_written: false }) }))).toEqual([expect.stringMatching(/rank 1: pytest exited 1 but the collective totals is missing/)]);
    // Not while the launcher had to stop the session (a hang restarts every rank).
    const hang = { kind: "hang", rank: 1, test: OFFICIAL, after_s: 1, detail: "", session: 0, t: 0 } as unknown as NonNullable<TamperInput["events"]>[number];
    expect(tamperEvidence(input({ integrity: one({ summary: null, pytest_junit: null }), events: [hang] }))).toEqual([]);
  });

  it("a refused group= object is evidence; the wire record, however far off, is not (issue 21, property 3)", () => {
    const one = (patch: Partial<RankIntegrityRecord>) => [{ ...honestIntegrity()[0]!, ...patch }, honestIntegrity()[1]!];
    expect(tamperEvidence(input({ integrity: one({ refused_groups: ["all_reduce(group=<pkg.Fake>)"] }) }))).toEqual([expect.stringMatching(/rank 0: a collective was handed a group that is not a torch ProcessGroup: all_reduce\(group=<pkg\.Fake>\)/)]);
    expect(tamperEvidence(input({ integrity: one({ wire: { measured_segments: 20000, explained_segments: 1000, payload_bytes: 2_000_000, counted_bytes: 1000, payload_ratio: 2000, verdict: false } }) }))).toEqual([]);
  });

  it("a must-fail canary that passes, or a must-pass one that fails or is skipped, is evidence, on any rank", () => {
    const flipped = honestCases().map((c) => (c.id === FAIL ? mc(FAIL, "failed", "passed") : c));
    expect(tamperEvidence(input({ cases: flipped, integrity: undefined }))).toEqual(["cpu.all: canary infradev_canaries/official/test_c0.py::test_fail_1 must fail but is passed on rank 1"]);
    const skipped = honestCases().map((c) => (c.id === PASS ? mc(PASS, "skipped", "skipped") : c));
    expect(tamperEvidence(input({ cases: skipped, integrity: undefined }))).toHaveLength(2);
  });

  it("a twin must not pass; missing, it is evidence unless its module did not import (then its test did not run either)", () => {
    const withTwin: InstallMap = { ...MAP, files: { ...MAP.files, "tests/test_aaaaaaaaaa.py": { ...MAP.files["tests/test_aaaaaaaaaa.py"]!, twins: { test_tttttttttt: "test_sum" } } } };
    const twins = canariesOf(withTwin).filter((c) => c.expected === "not_passed");
    expect(twins.map((c) => c.real)).toEqual(["infradev_canaries/twin/tests/test_ops.py::test_sum"]);
    const TWIN = "tests/test_aaaaaaaaaa.py::test_tttttttttt";
    const base = { map: withTwin, canaries: canariesOf(withTwin), integrity: undefined };
    expect(tamperEvidence(input({ ...base, cases: [...honestCases(), mc(TWIN, "failed", "error")] }))).toEqual([]);
    expect(tamperEvidence(input({ ...base, cases: [...honestCases(), mc(TWIN, "failed", "passed")] }))).toEqual([
      "cpu.all: canary infradev_canaries/twin/tests/test_ops.py::test_sum must not pass but is passed on rank 1",
    ]);
    expect(tamperEvidence(input({ ...base, cases: honestCases() }))).toHaveLength(2);
    const brokenModule = honestCases().filter((c) => c.id !== OFFICIAL);
    expect(tamperEvidence(input({ ...base, cases: brokenModule, collectionErrors: ["tests/test_aaaaaaaaaa.py"] }))).toEqual([]);
  });

  it("a canary missing on a rank is evidence, unless the launcher had to stop that session (crash, hang, out of time)", () => {
    const gone = honestCases().filter((c) => c.id !== PASS);
    expect(tamperEvidence(input({ cases: gone, integrity: undefined }))).toEqual([
      "cpu.all: canary infradev_canaries/official/test_c0.py::test_pass_0 (must pass) was not reported by rank 0",
      "cpu.all: canary infradev_canaries/official/test_c0.py::test_pass_0 (must pass) was not reported by rank 1",
    ]);
    const crash = { kind: "crash" as const, rank: 1, test: OFFICIAL, after_s: 1, detail: "exit 1" };
    expect(tamperEvidence(input({ cases: gone, integrity: undefined, events: [crash] }))).toEqual([]);
  });

  it("fail fast: the canary a slower rank was in when the launcher stopped it is not evidence; a canary that really failed is", () => {
    const stop = { kind: "fail_fast" as const, rank: 0, test: OFFICIAL, after_s: 1, detail: "stop on fail" };
    const cut = mc(PASS, "passed", "failed");
    cut.ranks[1]!.killed = "fail_fast";
    const cases = honestCases().map((c) => (c.id === PASS ? cut : c));
    expect(tamperEvidence(input({ cases, integrity: undefined, events: [stop] }))).toEqual([]);
    // The same record without the launcher's stop is the code under test's doing.
    expect(tamperEvidence(input({ cases, integrity: undefined }))).toEqual([
      "cpu.all: canary infradev_canaries/official/test_c0.py::test_pass_0 must pass but is failed on rank 1",
    ]);
    // A must-pass canary that failed on its own (not killed) stays evidence in a stopped session.
    const failedOnItsOwn = honestCases().map((c) => (c.id === PASS ? mc(PASS, "passed", "failed") : c));
    expect(tamperEvidence(input({ cases: failedOnItsOwn, integrity: undefined, events: [stop] }))).toEqual([
      "cpu.all: canary infradev_canaries/official/test_c0.py::test_pass_0 must pass but is failed on rank 1",
    ]);
  });

  it("pytest's exit status, its summary and its JUnit report are held against the plugin's records, per rank", () => {
    const one = (patch: Partial<RankIntegrityRecord>) => [honestIntegrity()[0]!, { ...honestIntegrity()[1]!, ...patch }];
    expect(tamperEvidence(input({ integrity: one({ exit_code: 0 }) }))).toEqual([expect.stringMatching(/^cpu\.all: rank 1: pytest exited 0 although failures were recorded/)]);
    expect(tamperEvidence(input({ integrity: one({ plugin: counts(4, 0), summary: counts(4, 0), pytest_junit: junit({ [OFFICIAL]: "passed", [PROBE]: "passed", [PASS]: "passed", [FAIL]: "passed" }) }) }))).toEqual([
      expect.stringMatching(/rank 1: pytest exited 1 \(tests failed\) but no failure/),
      expect.stringMatching(/rank 1: the recording plugin and pytest's own JUnit report disagree on 2 test\(s\): infradev_probes\/test_probe\.py::test_mean: plugin failed, junit passed/),
    ]);
    // Forged passes appended to the plugin's records: more passes than pytest counted.
    expect(tamperEvidence(input({ integrity: one({ plugin: counts(4, 0) }) }))).toEqual([
      expect.stringMatching(/rank 1: the recording plugin's counts \(4 passed, 0 failed, 0 errors, 0 skipped\) disagree with pytest's summary line \(2 passed, 2 failed/),
      expect.stringMatching(/rank 1: the recording plugin's counts \(4 passed, 0 failed, 0 errors, 0 skipped\) disagree with pytest's own JUnit report \(2 passed, 2 failed/),
    ]);
    // A teardown error after a passed call: one pass and one error in all three (summary units), one test outcome "error".
    const teardown = one({ plugin: counts(2, 2, 1), summary: counts(2, 2, 1), pytest_junit: { ...counts(2, 2, 1), outcomes: { [OFFICIAL]: "error", [PROBE]: "failed", [PASS]: "passed", [FAIL]: "failed" } } });
    const cases = honestCases().map((c) => (c.id === OFFICIAL ? mc(OFFICIAL, "passed", "error") : c));
    expect(tamperEvidence(input({ cases, integrity: teardown }))).toEqual([]);
  });

  it("a module that fails to import is an error case in pytest's junit and a collection error in the plugin's records: not evidence", () => {
    const broken = "tests/test_aaaaaaaaaa.py";
    const cases = honestCases().filter((c) => c.id !== OFFICIAL);
    const integrity = [0, 1].map((rank) => ({ rank, exit_code: 1, plugin: counts(1, 2, 1), summary: counts(1, 2, 1), pytest_junit: { ...counts(1, 2, 1), outcomes: { [broken]: "error" as const, [PROBE]: "failed" as const, [PASS]: "passed" as const, [FAIL]: "failed" as const } } }));
    expect(tamperEvidence(input({ cases, integrity, collectionErrors: [broken] }))).toEqual([]);
    // The same error case with no collection error behind it is a disagreement.
    expect(tamperEvidence(input({ cases, integrity }))).toEqual([expect.stringMatching(/rank 0: .*disagree on 1 test\(s\): tests\/test_ops\.py: plugin missing, junit error/), expect.stringMatching(/rank 1: /)]);
  });

  it("results that name a test never installed are evidence (the id as the ranks reported it, real names where known)", () => {
    const forged = [...honestCases(), mc("tests/test_forged.py::test_x", "passed", "passed"), mc("tests/test_aaaaaaaaaa.py::test_zzz", "passed", "passed")];
    expect(tamperEvidence(input({ cases: forged, integrity: undefined }))).toEqual([
      "cpu.all: the results name 2 test(s) that were never installed: tests/test_forged.py::test_x, tests/test_ops.py::test_zzz",
    ]);
  });

  it("a staged file changed on disk during the session is evidence (hashes of the real staging folder)", () => {
    const stage = join(scratch, "stage");
    mkdirSync(join(stage, "qwertyui"), { recursive: true });
    writeFileSync(join(stage, "test_aaaaaaaaaa.py"), "def test_bbbbbbbbbb():\n    assert False\n");
    writeFileSync(join(stage, "qwertyui", "test_cccccccccc.py"), "def test_dddddddddd():\n    assert False\n");
    const key = (h: Record<string, string>) => Object.fromEntries(Object.entries(h).map(([p, v]) => [`tests/${p}`, v]));
    const before = key(hashTree(stage));
    expect(Object.keys(before).sort()).toEqual(["tests/qwertyui/test_cccccccccc.py", "tests/test_aaaaaaaaaa.py"]);
    writeFileSync(join(stage, "qwertyui", "test_cccccccccc.py"), "def test_dddddddddd():\n    assert True\n");
    writeFileSync(join(stage, "conftest.py"), "");
    const after = key(hashTree(stage));
    expect(hashEvidence(before, before)).toEqual([]);
    expect(tamperEvidence(input({ hashesBefore: before, hashesAfter: after }))).toEqual([
      expect.stringMatching(/^cpu\.all: staged test file infradev_probes\/test_probe\.py changed during the session \(sha256 [0-9a-f]{12} → [0-9a-f]{12}\)$/),
      "cpu.all: a file appeared among the staged tests during the session: tests/conftest.py",
    ]);
  });
});
