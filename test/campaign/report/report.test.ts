/**
 * `infradev report` on test/fixtures/campaign (real grades of tiny-mean and check-mean, built by
 * test/helpers/make-campaign-fixture.ts). Every expected number is derived here by hand from the
 * fixture's facts below (what each submission is and what the grader made of it), not read back
 * from the report; the first test checks those facts against the fixture's grade.json files.
 */
import { spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildReport, renderMarkdown, renderText, type ReportData } from "../../../src/campaign/report/index.js";
import { loadPrices, runCost } from "../../../src/campaign/report/prices.js";
import { loadCampaign } from "../../../src/campaign/report/load.js";
import { computeReport } from "../../../src/campaign/report/compute.js";
import { mcnemarExact, mean, rate } from "../../../src/campaign/report/stats.js";
import type { GradeResult } from "../../../src/grader/grade/types.js";
import type { RunRecord } from "../../../src/campaign/types.js";
import { ensureBuilt } from "../../helpers/backends.js";

const FIXTURE = resolve("test/fixtures/campaign");
const PRICES = join(FIXTURE, "prices.yaml");

/**
 * The fixture's facts. tiny-mean: Set A has 6 cases and Set B 8 (2 probes); gold passes 4 of A
 * (it skips one and fails one on purpose) and 6 of B. check-mean: graded at world sizes 1 and 2,
 * 16 cases in Set B, gold passes all. An adversarial patch passes Set A and fails one probe; the
 * hollow patch passes only what the base passes (2 of 16); missing / empty patches score 0.
 */
const FACTS: Record<string, { status: string; setA: boolean | null; setB: boolean | null; passedB: number | null; nB: number; labels: string[] }> = {
  "tiny-mean--alpha--r1": { status: "graded", setA: true, setB: true, passedB: 6, nB: 8, labels: [] }, // golden + own tests
  "tiny-mean--alpha--r2": { status: "graded", setA: true, setB: false, passedB: 5, nB: 8, labels: ["behavioral-resource"] }, // two all-reduces
  "tiny-mean--alpha--r3": { status: "missing_patch", setA: false, setB: false, passedB: 0, nB: 8, labels: [] },
  "check-mean--alpha--r1": { status: "graded", setA: true, setB: true, passedB: 16, nB: 16, labels: [] }, // an alternative correct patch
  "tiny-mean--beta--r1": { status: "graded", setA: true, setB: false, passedB: 5, nB: 8, labels: ["numerical"] }, // sum, not mean
  "tiny-mean--beta--r2": { status: "empty_patch", setA: false, setB: false, passedB: 0, nB: 8, labels: [] },
  "tiny-mean--beta--r3": { status: "graded", setA: true, setB: true, passedB: 6, nB: 8, labels: [] }, // golden
  "check-mean--beta--r1": { status: "graded", setA: false, setB: false, passedB: 2, nB: 16, labels: ["structural:not-implemented"] }, // hollow
};
const NOT_GRADED = ["check-mean--beta--r2"];

const se = (p: number, n: number) => Math.sqrt((p * (1 - p)) / n);
const sp = (id: string) => FACTS[id]!.passedB! / FACTS[id]!.nB;
const sampleSe = (xs: number[]) => {
  const m = xs.reduce((a, b) => a + b, 0) / xs.length;
  return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / (xs.length - 1) / xs.length);
};

let data: ReportData;
const tmp = mkdtempSync(join(tmpdir(), "infradev-report-test-"));
beforeAll(async () => {
  data = await buildReport(FIXTURE, { prices: loadPrices(PRICES), compare: ["alpha", "beta"], hostPython: "/usr/bin/python3" });
}, 60_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

const row = (agent: string) => data.table2.find((r) => r.agent === agent)!;

describe("the fixture", () => {
  it("holds real grades that match the facts the expectations are derived from", () => {
    for (const [id, f] of Object.entries(FACTS)) {
      const g = JSON.parse(readFileSync(join(FIXTURE, "runs", id, "grade.json"), "utf8")) as GradeResult;
      expect(g.status, id).toBe(f.status);
      expect(g.with_probes.n_cases, id).toBe(f.nB);
      expect(g.with_probes.passed, id).toBe(f.passedB);
      expect(g.official.resolved ?? false, id).toBe(f.setA);
      expect(g.with_probes.resolved ?? false, id).toBe(f.setB);
      expect([...new Set(g.cases.flatMap((c) => (c.label ? [c.label] : [])))], id).toEqual(f.labels);
    }
    for (const id of NOT_GRADED) expect(() => readFileSync(join(FIXTURE, "runs", id, "grade.json"))).toThrow();
  });
});

describe("Table 2", () => {
  it("alpha: 2 of 4 resolved, % Passed the mean of its four s_p, each with its standard error", () => {
    const a = row("alpha");
    expect(a.runs).toBe(4);
    expect(a.n).toBe(4);
    expect(a.resolved).toEqual({ k: 2, n: 4, p: 0.5, se: 0.25 });
    expect(a.resolved_strict.k).toBe(2);
    const sps = ["tiny-mean--alpha--r1", "tiny-mean--alpha--r2", "tiny-mean--alpha--r3", "check-mean--alpha--r1"].map(sp);
    expect(sps).toEqual([0.75, 0.625, 0, 1]);
    expect(a.passed.mean).toBeCloseTo((0.75 + 0.625 + 0 + 1) / 4, 12);
    expect(a.passed.se).toBeCloseTo(sampleSe(sps), 12);
  });

  it("beta: the run without grade.json is listed as not graded and left out of n; 1 of 4 resolved", () => {
    const b = row("beta");
    expect(b.runs).toBe(5);
    expect(b.not_graded).toBe(1);
    expect(b.n).toBe(4);
    expect(b.resolved.k).toBe(1);
    expect(b.resolved.se).toBeCloseTo(se(0.25, 4), 12);
    expect(b.passed.mean).toBeCloseTo((5 / 8 + 0 + 6 / 8 + 2 / 16) / 4, 12);
    expect(data.runs.find((r) => r.run_id === "check-mean--beta--r2")!.status).toBe("not_graded");
  });

  it("time, tokens by kind, steps and tool calls are means over the agent's runs; a kind nobody reports is null", () => {
    const a = row("alpha");
    // alpha's runs: wall 600, 900, 9000, 300 s; input 180k + 10k·k for k = 1, 2, 3, 0.
    expect(a.wall_s.mean).toBe((600 + 900 + 9000 + 300) / 4);
    expect(a.tokens.input.total).toBe(4 * 180_000 + 10_000 * (1 + 2 + 3 + 0));
    expect(a.tokens.reasoning.mean).toBe(4_000 + 500 * 1.5);
    expect(a.turns.mean).toBe((14 + 20 + 40 + 10) / 4);
    expect(a.tool_calls.mean).toBe((7 + 4 + 4 + 4) / 4);
    expect(row("beta").tokens.reasoning).toEqual({ total: 0, mean: null, runs_reporting: 0 });
  });

  it("cost: uncached input, cached input and output at their prices; a reasoning price applies to that part of the output", () => {
    // model-a: input 2, cached 0.5, output 10 $/M. k=1: 190k in (125k cached), 10k out.
    expect(runCost({ input: 190_000, cached_input: 125_000, output: 10_000, reasoning: 4_500 }, { input: 2, cached_input: 0.5, output: 10 })).toBeCloseTo((65_000 * 2 + 125_000 * 0.5 + 10_000 * 10) / 1e6, 12);
    expect(runCost({ input: 1_000_000, cached_input: null, output: 1_000_000, reasoning: 400_000 }, { input: 1, output: 4, reasoning: 8 })).toBeCloseTo(1 + 0.6 * 4 + 0.4 * 8, 12);
    const alphaTotal = [0, 1, 2, 3].reduce((s, k) => s + ((180_000 + 10_000 * k - (120_000 + 5_000 * k)) * 2 + (120_000 + 5_000 * k) * 0.5 + (9_000 + 1_000 * k) * 10) / 1e6, 0);
    expect(row("alpha").cost!.total_usd).toBeCloseTo(alphaTotal, 10);
    expect(row("alpha").cost!.runs_priced).toBe(4);
  });
});

describe("Tables 3 and 4, Figure 4", () => {
  it("Table 3: every run is training; inference and rl have no runs", () => {
    const t3 = data.table3.rows.find((r) => r.agent === "alpha")!;
    expect(t3.by_category.training).toEqual(rate(2, 4));
    expect(t3.by_category.inference!.n).toBe(0);
    expect(t3.by_category.rl!.p).toBeNull();
  });

  it("Table 4: Set A accepts 5 of 8, the probes reject 2 of those 5 (40 %)", () => {
    const all = data.table4.all;
    expect([all.set_a.k, all.set_a.n, all.set_b.k, all.a_accepted]).toEqual([5, 8, 3, 5]);
    expect(all.rejected_by_probes.p).toBeCloseTo(2 / 5, 12);
    expect(all.rejected_by_probes.se).toBeCloseTo(se(0.4, 5), 12);
    const alpha = data.table4.rows.find((r) => r.agent === "alpha")!;
    expect([alpha.set_a.k, alpha.rejected_by_probes.k, alpha.rejected_by_probes.n]).toEqual([3, 1, 3]);
  });

  it("Figure 4: each submission once per label it has, and the zero statuses as their own types", () => {
    const beta = data.figure4.rows.find((r) => r.agent === "beta")!;
    expect(beta.submissions).toBe(4);
    expect(beta.by_type["numerical"]).toBe(1);
    // the hollow patch fails 14 cases with one label: one submission
    expect(beta.by_type["structural:not-implemented"]).toBe(1);
    expect(beta.by_type["empty_patch"]).toBe(1);
    expect(beta.by_class).toMatchObject({ structural: 1, numerical: 1, behavioral: 0, "no-valid-patch": 1 });
    const alpha = data.figure4.rows.find((r) => r.agent === "alpha")!;
    expect(alpha.by_class).toMatchObject({ structural: 0, behavioral: 1, "no-valid-patch": 1 });
  });
});

describe("Figure 6", () => {
  it("counts the assertions of the agents' test files: alpha's own file plus golden's test changes, beta's appended test", () => {
    const alpha = data.figure6.rows.find((r) => r.agent === "alpha")!;
    // tests/test_mean_agent.py: numerical 3 (assert_close, allclose, assertAlmostEqual), structure 3
    // (shape, isinstance, hasattr), error path 2 (pytest.raises, assertRaises), resource 1 (elapsed),
    // functional 2 (is not, assertEqual); golden's tests/test_ops.py lines: shape, two torch.equal, == 99.
    expect(alpha.counts).toEqual({ numerical: 3 + 2, structure: 3 + 1, error_path: 2, resource: 1, functional: 2 + 1 });
    expect(alpha.test_files).toBe(2);
    // only tests/test_mean_agent.py was named by a pytest_run call in that run
    expect(alpha.test_files_run).toBe(1);
    const beta = data.figure6.rows.find((r) => r.agent === "beta")!;
    // r1 appended sum() > 0 and isclose (the context line's torch.equal is not beta's); r3 is golden's tests
    expect(beta.counts).toEqual({ functional: 1 + 1, numerical: 1 + 2, structure: 1, error_path: 0, resource: 0 });
  });
});

describe("paired comparison", () => {
  it("alpha → beta: check-mean broken (alpha resolves it, beta does not), tiny-mean neither (1 of 3 each, no majority)", () => {
    const c = data.compare!;
    expect(c.tasks.map((t) => [t.task_id, t.transition])).toEqual([["check-mean", "broken"], ["tiny-mean", "neither"]]);
    expect([c.fixed, c.broken, c.both, c.neither]).toEqual([0, 1, 0, 1]);
    expect(c.a_rate).toEqual(rate(1, 2));
    expect(c.b_rate).toEqual(rate(0, 2));
    expect(c.mcnemar_p).toBe(1);
  });

  it("statistics: exact McNemar and the SE of the mean", () => {
    // 0 of 6 discordant pairs going the other way: 2 · (1/2)^6
    expect(mcnemarExact(6, 0)).toBeCloseTo(2 / 64, 12);
    expect(mcnemarExact(0, 0)).toBeNull();
    expect(mean([1, 3]).se).toBeCloseTo(1, 12);
    expect(rate(0, 0)).toEqual({ k: 0, n: 0, p: null, se: null });
  });
});

describe("harness faults and folders in progress", () => {
  it("a harness_fault grade is excluded from every rate and counted apart; a run folder without run.json is skipped with a reason", () => {
    const dir = join(tmp, "faulty");
    cpSync(FIXTURE, dir, { recursive: true });
    const gradeFile = join(dir, "runs", "tiny-mean--alpha--r2", "grade.json");
    const g = JSON.parse(readFileSync(gradeFile, "utf8")) as GradeResult;
    writeFileSync(gradeFile, JSON.stringify({ ...g, status: "harness_fault", passed: null, score: null, resolved: null, official: { ...g.official, passed: null, score: null, resolved: null }, with_probes: { ...g.with_probes, passed: null, score: null, resolved: null } }));
    cpSync(join(dir, "runs", "tiny-mean--alpha--r1"), join(dir, "runs", "tiny-mean--alpha--r9"), { recursive: true });
    rmSync(join(dir, "runs", "tiny-mean--alpha--r9", "run.json"));
    const d = computeReport(loadCampaign(dir));
    const a = d.table2.find((r) => r.agent === "alpha")!;
    expect([a.runs, a.harness_faults, a.n, a.resolved.k]).toEqual([4, 1, 3, 2]);
    expect(d.table4.all.a_accepted).toBe(4);
    expect(d.skipped.map((s) => s.run)).toEqual(["tiny-mean--alpha--r9"]);
  });

  it("a grade.json that is not a grade leaves its run not graded, with the reason in the runs table", () => {
    const dir = join(tmp, "torn");
    cpSync(FIXTURE, dir, { recursive: true });
    writeFileSync(join(dir, "runs", "tiny-mean--beta--r3", "grade.json"), '{"status": "graded"');
    const d = computeReport(loadCampaign(dir));
    const r = d.runs.find((x) => x.run_id === "tiny-mean--beta--r3")!;
    expect([r.status, r.scored]).toEqual(["not_graded", false]);
    expect(r.grade_problem).toMatch(/^grade\.json unreadable/);
    const b = d.table2.find((x) => x.agent === "beta")!;
    expect([b.not_graded, b.n, b.resolved.k]).toEqual([2, 3, 0]);
    expect(renderText(d)).toMatch(/tiny-mean--beta--r3 .*not graded \(grade\.json unreadable/);
  });

  it("Table 3 splits by the category each run.json names", () => {
    const dir = join(tmp, "categories");
    cpSync(FIXTURE, dir, { recursive: true });
    for (const id of ["check-mean--alpha--r1", "check-mean--beta--r1", "check-mean--beta--r2"]) {
      const f = join(dir, "runs", id, "run.json");
      writeFileSync(f, JSON.stringify({ ...(JSON.parse(readFileSync(f, "utf8")) as RunRecord), category: "inference" }));
    }
    const d = computeReport(loadCampaign(dir));
    const alpha = d.table3.rows.find((r) => r.agent === "alpha")!.by_category;
    const beta = d.table3.rows.find((r) => r.agent === "beta")!.by_category;
    // alpha: tiny-mean 1 of 3 resolved (golden), check-mean 1 of 1; beta: tiny-mean 1 of 3, check-mean 0 of 1 scored
    expect([alpha.training, alpha.inference]).toEqual([rate(1, 3), rate(1, 1)]);
    expect([beta.training, beta.inference]).toEqual([rate(1, 3), rate(0, 1)]);
    expect(d.table3.categories).toEqual(["training", "inference", "rl"]);
  });

  it("a folder made by `infradev run --out` (run.json, grade.json in it, no runs/) is a campaign of that one run", () => {
    const dir = join(tmp, "one-run");
    cpSync(join(FIXTURE, "runs", "tiny-mean--alpha--r2"), dir, { recursive: true });
    const d = computeReport(loadCampaign(dir));
    expect(d.runs.map((r) => [r.run_id, r.status, r.resolved])).toEqual([["tiny-mean--alpha--r2", "graded", false]]);
    expect(d.table2.map((r) => [r.agent, r.n])).toEqual([["alpha", 1]]);
  });

  it("grade-many's predictions measured no time and no tool calls: Table 2 says – there, not 0.0", () => {
    const dir = join(tmp, "predictions");
    cpSync(FIXTURE, dir, { recursive: true });
    for (const id of ["tiny-mean--beta--r1", "tiny-mean--beta--r2", "tiny-mean--beta--r3", "check-mean--beta--r1", "check-mean--beta--r2"]) {
      const f = join(dir, "runs", id, "run.json");
      const r = JSON.parse(readFileSync(f, "utf8")) as RunRecord;
      writeFileSync(f, JSON.stringify({ ...r, harness: "predictions", exit_reason: "prediction", wall_s: 0, tool_calls: 0, tools_used: {}, turns: null, tokens: { input: null, cached_input: null, output: null, reasoning: null } }));
    }
    const d = computeReport(loadCampaign(dir));
    const beta = d.table2.find((r) => r.agent === "beta")!;
    expect([beta.wall_s.mean, beta.tool_calls.mean, beta.turns.mean]).toEqual([null, null, null]);
    const line = renderText(d).split("\n").find((l) => l.startsWith("beta "))!;
    expect(line).not.toMatch(/0\.0 min|\b0\.0\b/);
    expect(renderText(d)).toMatch(/tiny-mean--beta--r1 .* – *$/m);
  });

  it("a patch.diff that is a symbolic link is not read through", () => {
    const dir = join(tmp, "linked");
    cpSync(FIXTURE, dir, { recursive: true });
    const patch = join(dir, "runs", "tiny-mean--beta--r1", "patch.diff");
    rmSync(patch);
    symlinkSync("/etc/passwd", patch);
    const c = loadCampaign(dir);
    expect(c.runs.map((r) => r.record.run_id)).not.toContain("tiny-mean--beta--r1");
    expect(c.skipped.find((s) => s.run === "tiny-mean--beta--r1")!.why).toMatch(/symbolic link/);
  });
});

describe("renderers and the CLI", () => {
  let cli: string;
  beforeAll(() => {
    cli = ensureBuilt();
  }, 300_000);
  const run = (args: string[]) => spawnSync(process.execPath, [cli, "report", ...args], { encoding: "utf8", timeout: 120_000, env: { ...process.env, INFRADEV_HOST_PYTHON: "/usr/bin/python3" } });

  it("text (default) and Markdown carry the same rows and numbers", () => {
    const text = renderText(data);
    const md = renderMarkdown(data);
    for (const s of ["50.0 ± 25.0 (2/4)", "40.0 ± 21.9 (2/5)", "broken: 1", "check-mean--beta--r2", "not graded"]) {
      expect(text).toContain(s);
      expect(md).toContain(s);
    }
    expect(md).toMatch(/^\| agent \| model \| runs \| n \| % Resolved \|/m);
  });

  it("writes --html, --md and --json files atomically and prints the text tables", () => {
    const r = run([FIXTURE, "--html", join(tmp, "r.html"), "--md", join(tmp, "r.md"), "--json", join(tmp, "r.json"), "--prices", PRICES, "--compare", "alpha,beta"]);
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toContain("Table 2 — per agent");
    const json = JSON.parse(readFileSync(join(tmp, "r.json"), "utf8")) as ReportData;
    expect(json.table4.all.rejected_by_probes.k).toBe(2);
    expect(readFileSync(join(tmp, "r.md"), "utf8")).toContain("## Table 4");
    const html = readFileSync(join(tmp, "r.html"), "utf8");
    expect((html.match(/<svg /g) ?? []).length).toBe(4);
    expect(html).not.toMatch(/<script|https?:\/\/(?!www\.w3\.org)/);
  });

  it("--json alone goes to stdout", () => {
    const r = run([FIXTURE, "--json"]);
    expect(r.status, r.stderr).toBe(0);
    expect((JSON.parse(r.stdout) as ReportData).table2.map((x) => x.agent)).toEqual(["alpha", "beta"]);
  });

  it("bad input is one line, exit 2, naming the flag or file", () => {
    writeFileSync(join(tmp, "bad-prices.yaml"), "models:\n  model-a: { input: -1, output: 2 }\n");
    const cases: Array<[string[], RegExp]> = [
      [[join(tmp, "nope")], /^infradev: report: .*nope: no such campaign folder$/],
      [[tmp], /not a campaign folder \(neither runs\/ nor a run\.json in it/],
      [[FIXTURE, "--prices", join(tmp, "bad-prices.yaml")], /--prices .*bad-prices\.yaml: models\.model-a\.input: /],
      [[FIXTURE, "--compare", "alpha"], /--compare.*expected two different agent names as A,B/],
      [[FIXTURE, "--compare", "alpha,gamma"], /--compare: no agent "gamma" in .* \(agents: alpha, beta\)/],
      [[FIXTURE, "--md", "--json"], /--md and --json cannot both go to stdout/],
    ];
    for (const [args, message] of cases) {
      const r = run(args);
      expect(r.status, `${args.join(" ")}: ${r.stderr}`).toBe(2);
      expect(r.stderr.trim().split("\n"), args.join(" ")).toHaveLength(1);
      expect(r.stderr.trim(), args.join(" ")).toMatch(message);
    }
  });
});

// A record read back by type: keeps the fixture's run.json honest to campaign/types.ts.
it("the fixture's run.json files are RunRecords", () => {
  const r = JSON.parse(readFileSync(join(FIXTURE, "runs", "tiny-mean--alpha--r1", "run.json"), "utf8")) as RunRecord;
  expect(r.grade).toEqual({ status: "graded", file: "grade.json" });
  expect(r.tools_used.pytest_run).toBe(2);
});

describe("hangs", () => {
  it("a case the launcher killed is listed with what it saw and whose stacks the grade holds; none in the fixture as it is", async () => {
    expect(data.hangs).toEqual([]);
    expect(renderText(data)).not.toMatch(/Hangs —/);
    // The fixture with one case of one run as the grader writes a hang (test/grader/grade/grade.test.ts
    // checks that the grader does): its message and each killed rank's stacks.
    const dir = join(tmp, "with-hang");
    cpSync(FIXTURE, dir, { recursive: true });
    const file = join(dir, "runs", "tiny-mean--beta--r1", "grade.json");
    const g = JSON.parse(readFileSync(file, "utf8")) as GradeResult;
    const victim = g.cases.find((c) => c.outcome !== "passed")!;
    const message = "hang: tests/test_ops.py::x did not finish within 15 s on rank 1; killed after 15.0 s; collective hang: rank 0 waits in all_reduce called at ops.py:12 in all_mean; did not arrive: rank 1 (at ops.py:10 in all_mean)";
    victim.killed = { reason: "hang", message, stacks: [0, 1].map((rank) => ({ rank, text: `${message}\n\nPython stacks of rank ${rank} when it was killed:\n...` })) };
    writeFileSync(file, JSON.stringify(g));
    const d = await buildReport(dir, { hostPython: "/usr/bin/python3" });
    expect(d.hangs).toEqual([{ run_id: "tiny-mean--beta--r1", agent: "beta", task_id: "tiny-mean", case: victim.id, reason: "hang", message, ranks_with_stacks: [0, 1] }]);
    const text = renderText(d);
    expect(text).toMatch(/Hangs — cases the launcher killed/);
    expect(text).toContain("did not arrive: rank 1 (at ops.py:10 in all_mean)");
    expect(renderMarkdown(d)).toContain(victim.id);
    // A diagnosis, not a score: the run's numbers are those of the fixture as it is.
    const verdict = (x: ReportData) => {
      const r = x.runs.find((y) => y.run_id === "tiny-mean--beta--r1")!;
      return [r.status, r.score, r.resolved, r.resolved_set_a, r.error_types];
    };
    expect(verdict(d)).toEqual(verdict(data));
  });
});
