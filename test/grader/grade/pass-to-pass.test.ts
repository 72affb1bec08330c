/**
 * task.yaml's pass_to_pass (SWE-bench's PASS_TO_PASS): the repository's older tests that a patch must
 * keep passing. The loader's checks, each error naming the field; then a fixture task
 * (test/fixtures/pass-to-pass/tasks/p2p-scale: a PR adds halve() beside an older scale()) graded on the
 * real bubblewrap sandbox and launcher: gold, a patch that adds halve() right but changes scale()'s
 * default (test/fixtures/pass-to-pass/regression.patch: every official test passes, the older tests do
 * not), and the base.
 */
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatResult } from "../../../src/cli/grade.js";
import { acceptanceProblems, failingCases } from "../../../src/grader/check/acceptance-rules.js";
import { calibrate } from "../../../src/grader/grade/calibrate.js";
import { gradeSubmission } from "../../../src/grader/grade/grade.js";
import { junitSuites } from "../../../src/grader/grade/junit-report.js";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";
import { loadPublicTask, loadTaskSpec } from "../../../src/task/public/loader.js";
import { TEST_FIXTURES } from "../../helpers/paths.js";

const TASKS = join(TEST_FIXTURES, "pass-to-pass", "tasks");
const ID = "p2p-scale";
let root: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-p2p-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("task.yaml pass_to_pass: the loader", () => {
  /** A copy of the fixture task with its task.yaml's pass_to_pass block (and official_tests) replaced. */
  function variant(name: string, edit: (yaml: string) => string): string {
    const dir = join(root, "variants", name, ID);
    cpSync(join(TASKS, ID), dir, { recursive: true });
    writeFileSync(join(dir, "task.yaml"), edit(readFileSync(join(TASKS, ID, "task.yaml"), "utf8")));
    return dir;
  }

  it("reads the fixture's lists; the agent's view of the task has no pass_to_pass", () => {
    const spec = loadTaskSpec(join(TASKS, ID));
    expect(spec.pass_to_pass).toEqual({
      paths: ["tests/test_scale.py"],
      deselect: [{ id: "tests/test_scale.py::test_scale_of_a_string_is_known_broken", reason: "fails before and after the PR: a known bug outside it" }],
    });
    const pub = loadPublicTask(ID, TASKS);
    expect(Object.keys(pub.spec)).not.toContain("pass_to_pass");
    expect(Object.keys(pub.spec)).not.toContain("official_tests");
  });

  it.each([
    ["no official_tests.paths", (y: string) => y.replace(/official_tests:\n  paths: \[tests\/test_halve.py\]\n/, ""), /task\.yaml: pass_to_pass: needs official_tests\.paths/],
    ["a module in both lists", (y: string) => y.replace("paths: [tests/test_scale.py]", "paths: [tests/test_scale.py, tests/test_halve.py]"), /pass_to_pass\.paths: "tests\/test_halve\.py" is in official_tests\.paths too/],
    ["a deselect outside its modules", (y: string) => y.replace('id: "tests/test_scale.py::', 'id: "tests/test_halve.py::'), /pass_to_pass\.deselect: "tests\/test_halve\.py::test_scale_of_a_string_is_known_broken" is not in a module of pass_to_pass\.paths/],
    ["a path that is no module", (y: string) => y.replace("paths: [tests/test_scale.py]", "paths: [tests/]"), /pass_to_pass\.paths\.0.*expected a test module/],
    ["a short reason", (y: string) => y.replace("fails before and after the PR: a known bug outside it", "bug"), /pass_to_pass\.deselect\.0\.reason/],
  ])("refuses %s, naming the field", (name, edit, message) => {
    const dir = variant(name.replace(/\W+/g, "-"), edit);
    expect(() => loadTaskSpec(dir)).toThrow(message);
  });
});

describe("pass_to_pass graded on the local sandbox (1 rank)", () => {
  it("gold passes both suites; a patch that breaks the older tests passes every official test and is not resolved; the base passes only the older ones", async () => {
    const task = loadGraderTask(ID, TASKS);
    const sandboxFactory = graderSandboxFactory("local", [root]);
    const cacheDir = join(root, "calibration");
    const { calibration } = await calibrate({ task, cacheDir, sandboxFactory });
    // The PR's module as official, the older one as pass_to_pass less its deselected case, the probe;
    // the module in neither list never ran.
    expect(calibration.cases.map((c) => [c.id, c.suite, c.outcomes.join("/")]).sort()).toEqual(
      [
        ["infradev_probes/test_probe_halve.py::test_halve_of_negatives", "probe", "passed/passed/passed"],
        // The probes' conftest ran (probe sessions only) and its fixture won over the official one of the same name.
        ["infradev_probes/test_probe_halve.py::test_probe_fixtures_win_and_the_conftest_ran", "probe", "passed/passed/passed"],
        ["tests/test_halve.py::test_halve_even", "official", "passed/passed/passed"],
        ["tests/test_halve.py::test_halve_odd", "official", "passed/passed/passed"],
        ["tests/test_halve.py::test_official_fixtures_and_no_probe_conftest", "official", "passed/passed/passed"],
        ["tests/test_scale.py::test_scale_default_factor", "pass_to_pass", "passed/passed/passed"],
        ["tests/test_scale.py::test_scale_given_factor", "pass_to_pass", "passed/passed/passed"],
      ].sort(),
    );

    const grade = (name: string, patchFile: string | null) =>
      gradeSubmission({ task, patchFile, ...(patchFile === null ? { baseAsIs: true } : {}), outDir: join(root, `out-${name}`), calibrationDir: cacheDir, sandboxFactory });

    const gold = (await grade("gold", task.hidden.goldenPatch)).result;
    expect(gold.status).toBe("graded");
    expect(gold.official).toMatchObject({ n_cases: 5, passed: 5, resolved: true, resolved_strict: true });
    expect(gold.pass_to_pass).toMatchObject({ n_cases: 2, passed: 2, resolved: true });
    expect(gold.with_probes).toMatchObject({ n_cases: 7, passed: 7, resolved: true });

    // halve() as asked, and scale()'s default changed on the way: code the PR did not touch.
    const regression = join(TEST_FIXTURES, "pass-to-pass", "regression.patch");
    const reg = (await grade("regression", regression)).result;
    expect(reg.status, reg.reason).toBe("graded");
    const bySuite = (suite: string) => reg.cases.filter((c) => c.suite === suite).map((c) => [c.id.split("::")[1], c.outcome]);
    expect(bySuite("official")).toEqual([["test_halve_even", "passed"], ["test_halve_odd", "passed"], ["test_official_fixtures_and_no_probe_conftest", "passed"]]);
    expect(bySuite("pass_to_pass")).toEqual([["test_scale_default_factor", "failed"], ["test_scale_given_factor", "passed"]]);
    expect(reg.official).toMatchObject({ n_cases: 5, passed: 4, resolved: false });
    expect(reg.pass_to_pass).toMatchObject({ n_cases: 2, passed: 1, resolved: false });
    expect(reg.with_probes.resolved).toBe(false);
    expect(reg.cases.find((c) => c.id.endsWith("test_scale_default_factor"))?.label).toBe("assertion");
    expect(formatResult(reg, "result.json")).toMatch(/Set A \(official \+ p2p\)\s+4\/5 passed.*resolved no[\s\S]*of which pass-to-pass\s+1\/2 passed/);
    expect(junitSuites(reg, new Map()).map((s) => [s.name, s.cases.length])).toEqual([["official", 3], ["pass_to_pass", 2], ["probe", 2]]);
    // As a task's adversarial patch it would be refused: it does not pass Set A.
    expect(acceptanceProblems("adversarial", reg, failingCases(reg, () => null))).toContain("not resolved in Set A (an adversarial patch must pass the official tests: adversarial ≥ gold)");

    // The base: no halve(), the older tests pass (what makes them pass-to-pass), not resolved.
    const base = (await grade("base", null)).result;
    expect(base.pass_to_pass).toMatchObject({ n_cases: 2, passed: 2, resolved_strict: true });
    expect(base.official.resolved).toBe(false);
    expect(acceptanceProblems("base", base, failingCases(base, () => null))).toEqual([]);
    // A pass-to-pass case the base fails is the author's error (it is fail-to-pass), which task check names.
    expect(acceptanceProblems("base", reg, failingCases(reg, () => null)).join("\n")).toMatch(/the pre-PR base fails pass-to-pass case\(s\) gold passes .*test_scale_default_factor/);

    // As task check grades the base of a task with pass_to_pass: stop after the official session, but
    // run that session whole (cut at its first failure, the older modules may never run: installed
    // names are random, so their order is too).
    const checkBase = (await gradeSubmission({ task, patchFile: null, baseAsIs: true, stopEarly: true, failFast: false, outDir: join(root, "out-base-check"), calibrationDir: cacheDir, sandboxFactory })).result;
    expect(checkBase.partial?.skipped.length).toBeGreaterThan(0); // the probe session was not needed
    expect(checkBase.pass_to_pass).toMatchObject({ n_cases: 2, passed: 2, resolved_strict: true });
    expect(acceptanceProblems("base", checkBase, failingCases(checkBase, () => null))).toEqual([]);
    // Pass-to-pass cases that did not run are not called failures of the base: the check says they did not run.
    const notRun = { ...base, pass_to_pass: { ...base.pass_to_pass!, passed: 0, resolved: false, resolved_strict: false }, cases: base.cases.map((c) => (c.suite === "pass_to_pass" ? { ...c, outcome: "not_run" as const } : c)) };
    const said = acceptanceProblems("base", notRun, failingCases(notRun, () => null)).join("\n");
    expect(said).toMatch(/pass-to-pass case\(s\) did not run.*test_scale_default_factor/);
    expect(said).not.toMatch(/fails pass-to-pass/);
  }, 300_000);
});
