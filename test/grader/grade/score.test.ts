import { describe, expect, it } from "vitest";
import { combineRuns } from "../../../src/grader/grade/calibrate.js";
import { demoExpectationFailures, type DemoReport } from "../../../src/grader/check/demo-matrix.js";
import { DEMO_WIDTH, caughtBy, demoTable, demoTableRows, labelSummary } from "../../../src/grader/check/demo-table.js";
import { exceptionType, labelFailure } from "../../../src/grader/grade/labels.js";
import { flakyIds, goldView, scoreSet, scoreSubmission } from "../../../src/grader/grade/score.js";
import type { CaseRecord, GoldCase, GradeResult } from "../../../src/grader/grade/types.js";

const rec = (id: string, outcome: CaseRecord["outcome"], extra: Partial<CaseRecord> = {}): CaseRecord => ({
  id,
  suite: id.startsWith("infradev_probes/") ? "probe" : "official",
  outcome,
  time_s: 0,
  ...extra,
});
const gold = (id: string, ...outcomes: GoldCase["outcomes"]): GoldCase => ({ id, suite: id.startsWith("infradev_probes/") ? "probe" : "official", outcomes });

// Gold: a, b pass; c fails; d is skipped; p (probe) passes. N_p counts all five.
const cal = {
  cases: [
    gold("t.py::a", "passed", "passed", "passed"),
    gold("t.py::b", "passed", "passed", "passed"),
    gold("t.py::c", "failed", "failed", "failed"),
    gold("t.py::d", "skipped", "skipped", "skipped"),
    { ...gold("infradev_probes/p.py::p", "passed", "passed", "passed"), probe: { promise: "avg", kind: "numerical" } },
  ],
};
const byId = (cases: CaseRecord[]) => new Map(cases.map((c) => [c.id, c]));

describe("scoring (pure)", () => {
  it("N_p counts every case gold collected, including the ones gold fails or skips", () => {
    const s = scoreSet(goldView(cal), byId([rec("t.py::a", "passed")]));
    expect(s.n_cases).toBe(5);
    expect(s.passed).toBe(1);
    expect(s.score).toBeCloseTo(1 / 5);
  });

  it("paper rule: passed ≥ gold's passed; strict: every case gold passes passes too", () => {
    const g = goldView(cal);
    // Fails b (gold passes it) but passes c (gold fails it): same count as gold, not strict.
    const swap = scoreSet(g, byId([rec("t.py::a", "passed"), rec("t.py::b", "failed"), rec("t.py::c", "passed"), rec("infradev_probes/p.py::p", "passed")]));
    expect(swap).toMatchObject({ passed: 3, resolved: true, resolved_strict: false });
    const exact = scoreSet(g, byId([rec("t.py::a", "passed"), rec("t.py::b", "passed"), rec("t.py::c", "failed"), rec("infradev_probes/p.py::p", "passed")]));
    expect(exact).toMatchObject({ passed: 3, score: 3 / 5, resolved: true, resolved_strict: true });
    const less = scoreSet(g, byId([rec("t.py::a", "passed"), rec("infradev_probes/p.py::p", "passed")]));
    expect(less).toMatchObject({ passed: 2, resolved: false, resolved_strict: false });
  });

  it("Set A is the official cases only; the top level repeats Set B", () => {
    const r = scoreSubmission(goldView(cal), {
      task_id: "t",
      status: "graded",
      apply_method: "git_apply",
      cases: [rec("t.py::a", "passed"), rec("t.py::b", "passed"), rec("infradev_probes/p.py::p", "failed", { probe: { promise: "avg", kind: "numerical" } })],
    });
    expect(r.official).toEqual({ n_cases: 4, passed: 2, score: 0.5, resolved: true, resolved_strict: true });
    expect(r.with_probes).toEqual({ n_cases: 5, passed: 2, score: 0.4, resolved: false, resolved_strict: false });
    expect([r.n_cases, r.passed, r.score, r.resolved, r.resolved_strict]).toEqual([5, 2, 0.4, false, false]);
    expect(r.cases.find((c) => c.id === "infradev_probes/p.py::p")).toEqual({ id: "infradev_probes/p.py::p", suite: "probe", outcome: "failed", label: "numerical" });
    // Only cases gold passes get a label.
    expect(r.cases.find((c) => c.id === "t.py::c")!.label).toBeUndefined();
  });

  it("an empty, missing or inapplicable patch scores exactly 0 / N_p and is never resolved, even when gold passes nothing", () => {
    for (const status of ["empty_patch", "missing_patch", "inapplicable"] as const) {
      const r = scoreSubmission(goldView(cal), { task_id: "t", status, apply_method: null, reason: "why" });
      expect(r).toMatchObject({ status, patch_applied: false, n_cases: 5, passed: 0, score: 0, resolved: false, resolved_strict: false, reason: "why" });
      expect(r.official).toEqual({ n_cases: 4, passed: 0, score: 0, resolved: false, resolved_strict: false });
      expect(r.cases.every((c) => c.outcome === "not_run")).toBe(true);
    }
    const nothing = goldView({ cases: [gold("x::y", "failed", "failed", "failed")] });
    expect(scoreSubmission(nothing, { task_id: "t", status: "empty_patch", apply_method: null }).resolved).toBe(false);
  });

  it("a harness fault is not scored at all (nulls), never a 0", () => {
    const r = scoreSubmission(goldView(cal), { task_id: "t", status: "harness_fault", apply_method: "git_apply", reason: "bwrap missing" });
    expect(r).toMatchObject({ status: "harness_fault", n_cases: 5, passed: null, score: null, resolved: null, resolved_strict: null, patch_applied: true });
  });

  it("flaky gold cases: kept in N_p, reported, not required for strict, credited when passed", () => {
    const flakyCal = { cases: [gold("a", "passed", "passed", "passed"), gold("f", "passed", "failed", "passed"), gold("n", "passed", "not_collected", "passed")] };
    expect(flakyIds(flakyCal.cases)).toEqual(["f", "n"]);
    const g = goldView(flakyCal);
    expect(g.map((x) => x.required)).toEqual([true, false, false]);
    expect(scoreSet(g, byId([rec("a", "passed"), rec("f", "failed")]))).toMatchObject({ n_cases: 3, passed: 1, resolved: true, resolved_strict: true });
    expect(scoreSet(g, byId([rec("a", "passed"), rec("f", "passed")]))).toMatchObject({ passed: 2, score: 2 / 3 });
  });

  it("combineRuns keeps every id any run collected, with one outcome per run", () => {
    const cases = combineRuns([[rec("a", "passed"), rec("b", "failed")], [rec("a", "passed")], [rec("a", "error"), rec("c", "passed")]]);
    expect(cases.map((c) => [c.id, c.outcomes])).toEqual([
      ["a", ["passed", "passed", "error"]],
      ["b", ["failed", "not_collected", "not_collected"]],
      ["c", ["not_collected", "not_collected", "passed"]],
    ]);
  });
});

describe("failure labels (pure)", () => {
  it("reads the exception type from pytest's message or the traceback's E lines", () => {
    expect(exceptionType("AttributeError: 'DataParallel' object has no attribute 'buckets'")).toBe("AttributeError");
    expect(exceptionType("assert 3 == 4")).toBeUndefined();
    expect(exceptionType("", "def f():\n>   x()\nE   torch.distributed.DistBackendError: boom\n")).toBe("DistBackendError");
    expect(exceptionType('failed on setup with "ModuleNotFoundError: No module named \'x\'"')).toBe("ModuleNotFoundError");
  });

  it("maps structural causes first, then the probe's declared kind", () => {
    const f = (extra: Partial<CaseRecord>, kind?: string) => labelFailure("t.py::x", rec("t.py::x", "failed", extra), [], kind);
    expect(f({ reason: "hang", outcome: "error" })).toBe("structural:hang");
    expect(f({ reason: "run_timeout", outcome: "failed" })).toBe("structural:hang");
    expect(f({ reason: "crash", outcome: "error" })).toBe("structural:crash");
    expect(f({ reason: "missing", outcome: "failed" })).toBe("structural:crash");
    expect(f({ error_type: "ImportError" })).toBe("structural:import");
    expect(f({ error_type: "AttributeError" }, "numerical")).toBe("structural:attribute");
    expect(f({ error_type: "TypeError", message: "TypeError: __init__() got an unexpected keyword argument 'bucket_cap_mb'" })).toBe("structural:signature");
    expect(f({ error_type: "TypeError", message: "TypeError: unsupported operand type(s)" })).toBe("error");
    expect(f({ error_type: "NotImplementedError" }, "resource")).toBe("structural:not-implemented");
    expect(f({ error_type: "AssertionError" }, "resource")).toBe("behavioral-resource");
    expect(f({}, "condition")).toBe("behavioral-condition");
    expect(f({}, "state")).toBe("state");
    expect(f({}, "numerical")).toBe("numerical");
    expect(f({ message: "Tensor-likes are not close!" })).toBe("numerical");
    expect(f({})).toBe("assertion");
    expect(f({ outcome: "error", error_type: "RuntimeError" })).toBe("error");
    expect(f({ outcome: "skipped" })).toBe("skipped");
  });

  it("labels a case the submission did not collect from the collection error of its file or conftest", () => {
    const errs = [{ path: "tests/test_b.py", error_type: "ImportError", message: "cannot import name 'Bucket'" }];
    expect(labelFailure("tests/test_b.py::t", undefined, errs)).toBe("structural:import");
    expect(labelFailure("tests/test_c.py::t", undefined, errs)).toBe("structural:collection");
    expect(labelFailure("tests/sub/test_c.py::t", undefined, [{ path: "tests/conftest.py", error_type: "AttributeError", message: "" }])).toBe("structural:attribute");
  });
});

describe("tampered and lost records (pure)", () => {
  it("a tampered run scores 0 in both sets, keeps its evidence and the recorded outcomes, labels nothing", () => {
    const r = scoreSubmission(goldView(cal), {
      task_id: "t",
      status: "tampered",
      apply_method: "git_apply",
      cases: [rec("t.py::a", "passed"), rec("t.py::b", "passed"), rec("infradev_probes/p.py::p", "passed")],
      tamper_evidence: ["cpu.all: canary x must fail but is passed on rank 0"],
    });
    expect(r).toMatchObject({ status: "tampered", patch_applied: true, score: 0, passed: 0, resolved: false, resolved_strict: false, tamper_evidence: ["cpu.all: canary x must fail but is passed on rank 0"] });
    expect(r.official).toEqual({ n_cases: 4, passed: 0, score: 0, resolved: false, resolved_strict: false });
    expect(r.cases.find((c) => c.id === "t.py::a")).toEqual({ id: "t.py::a", suite: "official", outcome: "passed" });
    expect(r.cases.every((c) => c.label === undefined)).toBe(true);
    // Every other result carries an empty list.
    expect(scoreSubmission(goldView(cal), { task_id: "t", status: "graded", apply_method: null, cases: [] }).tamper_evidence).toEqual([]);
  });

  it("a session whose records were lost counts its cases failed, labelled as a crash", () => {
    const mode = (id: string) => gold(id, "passed", "passed", "passed");
    const two = goldView({ cases: [mode("eager/t.py::a"), mode("graphs/t.py::a")] });
    const r = scoreSubmission(two, { task_id: "t", status: "graded", apply_method: "git_apply", cases: [rec("eager/t.py::a", "passed")], lost_prefixes: ["graphs/"], reason: "records lost: graphs.all: …" });
    expect(r.cases).toEqual([
      { id: "eager/t.py::a", suite: "official", outcome: "passed" },
      { id: "graphs/t.py::a", suite: "official", outcome: "failed", label: "structural:crash" },
    ]);
    expect(r).toMatchObject({ status: "graded", passed: 1, reason: "records lost: graphs.all: …" });
  });

  it("the text summary and the demo table show a tampered run with its evidence; the demo counts it as a broken expectation", async () => {
    const { formatResult } = await import("../../../src/cli/grade.js");
    const r = scoreSubmission(goldView(cal), { task_id: "t", status: "tampered", apply_method: "git_apply", cases: [], tamper_evidence: ["e1", "e2", "e3"], reason: "tampered: 3 piece(s) of evidence" });
    // The status is said once ("tampered — 3 piece(s)", not "tampered — tampered: 3 piece(s)").
    expect(formatResult(r, "/r/result.json")).toContain("t: tampered (applied with git_apply) — 3 piece(s) of evidence\n");
    expect(formatResult(r, "/r/result.json")).toContain("TAMPERED — scored 0; evidence (3):\n  - e1\n  - e2\n  - e3\n");
    const report: DemoReport = { notRunnable: [], rows: [{ task: "t", kind: "golden", name: "golden", patchFile: "g", result: r, promises: {} }] };
    expect(demoTableRows(report)[0]).toEqual(["t:golden", "no", "no", "0.000", "0.000", "— (TAMPERED: e1; e2; …)", ""]);
    expect(demoExpectationFailures(report)).toEqual(["t:golden: graded tampered (a task or grader bug): e1; e2"]);
  });
});

describe("demo expectations (pure)", () => {
  const result = (resolvedA: boolean, resolvedB: boolean, score: number, labels: GradeResult["cases"] = []): GradeResult => ({
    task_id: "t",
    status: "graded",
    patch_applied: true,
    apply_method: "git_apply",
    n_cases: 2,
    passed: 1,
    score,
    resolved: resolvedB,
    resolved_strict: resolvedB,
    official: { n_cases: 1, passed: 1, score, resolved: resolvedA, resolved_strict: resolvedA },
    with_probes: { n_cases: 2, passed: 1, score, resolved: resolvedB, resolved_strict: resolvedB },
    tamper_evidence: [],
    cases: labels,
  });
  it("accepts the InfraDev picture and names each broken expectation", () => {
    const probe = { id: "infradev_probes/p.py::p", suite: "probe" as const, outcome: "failed" as const, label: "numerical" as const };
    const promises = { "infradev_probes/p.py::p": "avg" };
    const ok: DemoReport = {
      notRunnable: [],
      rows: [
        { task: "t", kind: "golden", name: "golden", patchFile: "g", result: result(true, true, 1), promises },
        { task: "t", kind: "adversarial", name: "adversarial/x", patchFile: "x", breaks: ["avg"], result: result(true, false, 0.5, [probe]), promises },
      ],
    };
    expect(demoExpectationFailures(ok)).toEqual([]);
    expect(labelSummary(ok.rows[1]!.result)).toBe("numerical×1");
    expect(caughtBy(ok.rows[1]!)).toEqual([{ promise: "avg", labels: ["numerical"] }]);
    const bad: DemoReport = { notRunnable: [], rows: [{ ...ok.rows[1]!, breaks: ["other"], result: result(true, true, 1) }] };
    expect(demoExpectationFailures(bad)).toEqual([
      "t:adversarial/x: resolved in Set B: no probe catches it",
      't:adversarial/x: declares it breaks "other", but no probe of that promise fails on it',
    ]);
    // The base may pass weak official tests; passing with the probes too means they test nothing of the PR.
    const base = (a: boolean, b: boolean): DemoReport => ({ notRunnable: [], rows: [{ task: "t", kind: "base", name: "base", patchFile: null, result: result(a, b, 0.5), promises }] });
    expect(demoExpectationFailures(base(true, false))).toEqual([]);
    expect(demoExpectationFailures(base(true, true))).toEqual(["t:base: the pre-PR base is resolved in Set B: the probes do not test what the PR changes"]);
  });
});

describe("grade's text summary", () => {
  const set = { n_cases: 2, passed: 1, score: 0.5, resolved: false, resolved_strict: false };
  const result = {
    task_id: "t",
    status: "graded",
    patch_applied: true,
    apply_method: "git_apply",
    n_cases: 2,
    passed: 1,
    score: 0.5,
    resolved: false,
    resolved_strict: false,
    official: set,
    with_probes: set,
    cases: [{ id: "infradev_probes/test_p.py::test_avg", suite: "probe", outcome: "failed", label: "numerical" }],
  } as unknown as GradeResult;

  it("says what the grader undid before testing, and the labelled failures", async () => {
    const { formatResult } = await import("../../../src/cli/grade.js");
    const text = formatResult(result, "/r/result.json", {
      reverted_test_edits: ["tests/test_a.py"],
      reverted_test_config: [{ path: "conftest.py", action: "delete" }],
    });
    expect(text).toContain("undone before testing: 1 edit(s) under the test dirs, 1 pytest-affecting file(s) (delete conftest.py)");
    expect(text).toMatch(/numerical\s+failed\s+infradev_probes\/test_p.py::test_avg/);
    expect(formatResult(result, "/r/result.json")).not.toContain("undone before testing");
    const flagged = formatResult(result, "/r/result.json", { tamper_findings: [{ file: "pkg/a.py", line: 3, what: "infradev's environment", text: "os.environ['INFRADEV_OUT_DIR']" }] });
    expect(flagged).toContain("flagged for review (not scored): 1 added line(s) reach for the grading harness\n  pkg/a.py:3  infradev's environment: os.environ['INFRADEV_OUT_DIR']");
    expect(formatResult(result, "/r/result.json")).not.toContain("flagged for review");
  });
});

describe("where results go by default", () => {
  it("outside the package: $INFRADEV_RESULTS_DIR, else $XDG_STATE_HOME/infradev/results, else ~/.local/state/infradev/results", async () => {
    const { defaultResultsDir, insidePackage } = await import("../../../src/grader/grade/results-dir.js");
    const { homedir } = await import("node:os");
    const { packageRoot } = await import("../../../src/lib/paths.js");
    expect(defaultResultsDir({ INFRADEV_RESULTS_DIR: "/srv/r" })).toBe("/srv/r");
    expect(defaultResultsDir({ XDG_STATE_HOME: "/var/state" })).toBe("/var/state/infradev/results");
    expect(defaultResultsDir({ XDG_STATE_HOME: "relative/ignored" })).toBe(`${homedir()}/.local/state/infradev/results`);
    expect(defaultResultsDir({})).toBe(`${homedir()}/.local/state/infradev/results`);
    // A state dir inside the package is not used by default.
    expect(insidePackage(defaultResultsDir({ XDG_STATE_HOME: `${packageRoot()}/state` }))).toBe(false);
    expect(insidePackage(defaultResultsDir({}))).toBe(false);
    expect(insidePackage(`${packageRoot()}/infradev-results`)).toBe(true);
  });

  it("the grade and demo commands default to it (an explicit --out anywhere is still allowed)", async () => {
    const { Command } = await import("commander");
    const { registerGradeCommands } = await import("../../../src/cli/grade.js");
    const { registerDemoCommands } = await import("../../../src/cli/demo.js");
    const { defaultResultsDir } = await import("../../../src/grader/grade/results-dir.js");
    const program = new Command();
    registerGradeCommands(program);
    registerDemoCommands(program);
    const out = (name: string) => program.commands.find((c) => c.name() === name)!.options.find((o) => o.long === "--out")!.defaultValue;
    expect(out("grade")).toBe(defaultResultsDir());
    expect(out("demo")).toBe(`${defaultResultsDir()}/demo`);
  });
});

describe("the demo table (issue 12 item 14)", () => {
  it("fits 100 columns and keeps every label, promise and reason (wrapped onto indented lines)", () => {
    const labels = ["behavioral-condition", "numerical", "state", "structural:not-implemented", "behavioral-resource"] as const;
    const cases = labels.flatMap((l, i) => [0, 1, 2].map((k) => ({ id: `infradev_probes/p${i}.py::t${k}`, suite: "probe" as const, outcome: "failed" as const, label: l })));
    const promises = Object.fromEntries(cases.map((c, i) => [c.id, ["avg-over-world-size", "one-all-reduce-per-bucket", "no-sync-means-no-communication"][i % 3]!]));
    const result = (over: Partial<GradeResult>): GradeResult => ({
      task_id: "grad-bucketing",
      status: "graded",
      patch_applied: true,
      apply_method: "git_apply",
      n_cases: 48,
      passed: 30,
      score: 0.625,
      resolved: false,
      resolved_strict: false,
      official: { n_cases: 24, passed: 24, score: 1, resolved: true, resolved_strict: false },
      with_probes: { n_cases: 48, passed: 30, score: 0.625, resolved: false, resolved_strict: false },
      tamper_evidence: [],
      cases,
      ...over,
    });
    const longName = "adversarial/no-sync-still-communicates-through-a-side-channel-in-every-bucket";
    const report: DemoReport = {
      rows: [
        { task: "grad-bucketing", kind: "adversarial", name: longName, patchFile: "x", breaks: ["avg-over-world-size", "one-all-reduce-per-bucket", "no-sync-means-no-communication"], result: result({}), promises },
        { task: "grad-bucketing", kind: "empty", name: "inapplicable", patchFile: "y", result: result({ status: "inapplicable", reason: "inapplicable: does not apply to the base with git apply, git apply --3way or patch --fuzz (error: patch failed: src/ddp.py:12)", cases: [] }), promises },
      ],
      notRunnable: [{ task: "cuda-graph-decode", reason: "requires a CUDA GPU; none on this machine (no /dev/nvidia*)" }],
    };
    const wide = demoTableRows(report);
    // The old single-line layout was far wider than a terminal.
    expect(Math.max(...wide.map((r) => r.join("  ").length))).toBeGreaterThan(DEMO_WIDTH);
    const table = demoTable(report);
    for (const line of table.split("\n")) expect(line.length, line).toBeLessThanOrEqual(DEMO_WIDTH);
    // Nothing is lost: every cell of the wide rows is in the table once its wrapped lines are joined.
    const flat = table.replace(/\n +/g, " ").replace(/\s+/g, " ");
    for (const row of wide) for (const cell of row) for (const word of cell.split(/ +/).filter(Boolean)) expect(flat).toContain(word);
    expect(flat).toContain(`grad-bucketing:${longName}`);
    expect(table).toMatch(/^ {4}caught: avg-over-world-size → /m);
    // The reason is said once.
    expect(table).toContain("— (inapplicable: does not apply");
    expect(table).not.toContain("inapplicable: inapplicable");
  });
});
