import { FAILURE_LABELS } from "../../grader/grade/types.js";
import type { LoadedCampaign, LoadedRun } from "./load.js";
import { ASSERTION_CLASSES, type AssertionClass, type PatchAssertions } from "./assertions.js";
import { runCost, type Prices } from "./prices.js";
import { mcnemarExact, mean, rate, type Mean, type Rate } from "./stats.js";
import { noiseReport, type NoiseReport } from "./noise.js";
import type { RunScan } from "../trajectory/scan.js";

/**
 * Every number of the report, from the loaded campaign: pure functions, no I/O (the renderers only
 * format what this returns, and --json prints it whole).
 *
 * Grading rules (DESIGN.md): a run without grade.json is "not graded" (listed, not scored); a
 * missing_patch / empty_patch / inapplicable / tampered grade scores 0 and is not resolved; a
 * harness_fault is excluded from every rate and counted apart. The unit of every rate is one scored
 * run (task × repeat). % Resolved and % Passed are of Set B (official tests + probes), the grade's
 * headline; Table 4 puts Set A beside it.
 */

export const CATEGORIES = ["training", "inference", "rl"] as const;
const ZERO_STATUSES = new Set(["missing_patch", "empty_patch", "inapplicable", "tampered"]);

export const ERROR_CLASSES = {
  structural: FAILURE_LABELS.filter((l) => l.startsWith("structural:")),
  numerical: ["numerical"],
  behavioral: ["behavioral-resource", "behavioral-condition", "state"],
  "test-failure": ["assertion", "error", "skipped"],
  "no-valid-patch": ["missing_patch", "empty_patch", "inapplicable", "tampered"],
} as const satisfies Record<string, readonly string[]>;
export type ErrorClass = keyof typeof ERROR_CLASSES;
export const ERROR_TYPES: string[] = Object.values(ERROR_CLASSES).flat();

export interface ScoredRun {
  run_id: string;
  agent: string;
  task_id: string;
  category: string;
  repeat: number;
  /** The harness that made the run (`predictions`: a grade-many submission, nothing measured). */
  harness: string;
  /** The grade's status, or "not_graded". */
  status: string;
  /** Counts in the rates (graded and not a harness fault). */
  scored: boolean;
  score: number | null;
  resolved: boolean | null;
  resolved_strict: boolean | null;
  resolved_set_a: boolean | null;
  wall_s: number;
  /** Failure labels and zero statuses this submission has (each once). */
  error_types: string[];
  /** Why a grade.json beside it was not used (then status is not_graded). */
  grade_problem?: string;
  /** The reward-hacking scan's verdict (null: not scanned); never part of the score. */
  flagged: boolean | null;
  /** USD from --prices (null: no price for its model, or no token counts). */
  cost_usd: number | null;
}

export interface TokenSummary { total: number; mean: number | null; runs_reporting: number }

export interface AgentRow {
  agent: string;
  models: string[];
  harnesses: string[];
  runs: number;
  not_graded: number;
  harness_faults: number;
  n: number;
  resolved: Rate;
  resolved_strict: Rate;
  passed: Mean;
  wall_s: Mean;
  tokens: Record<"input" | "cached_input" | "output" | "reasoning", TokenSummary>;
  turns: Mean;
  tool_calls: Mean;
  /** null without --prices; runs_priced < runs when a model has no price or a run no token counts. */
  cost: null | { total_usd: number; mean_usd: number | null; runs_priced: number; unpriced_models: string[] };
}

export interface Figure6Row {
  agent: string;
  runs_with_tests: number;
  test_files: number;
  test_files_run: number;
  assertions: number;
  counts: Record<AssertionClass, number>;
  unparsed_added_lines: number;
}

export interface CompareResult {
  a: string;
  b: string;
  rule: string;
  tasks: Array<{ task_id: string; a_resolved: boolean; b_resolved: boolean; a_runs: number; b_runs: number; transition: "fixed" | "broken" | "both" | "neither" }>;
  fixed: number;
  broken: number;
  both: number;
  neither: number;
  a_rate: Rate;
  b_rate: Rate;
  mcnemar_p: number | null;
  only_a: string[];
  only_b: string[];
}

export interface ReportData {
  schema_version: 1;
  campaign: string;
  rules: string;
  agents: string[];
  skipped: LoadedCampaign["skipped"];
  runs: ScoredRun[];
  table2: AgentRow[];
  table3: { categories: string[]; rows: Array<{ agent: string; by_category: Record<string, Rate> }> };
  table4: { rows: Array<{ agent: string; set_a: Rate; set_b: Rate; a_accepted: number; rejected_by_probes: Rate }>; all: { set_a: Rate; set_b: Rate; a_accepted: number; rejected_by_probes: Rate } };
  figure4: { classes: Record<string, readonly string[]>; rows: Array<{ agent: string; submissions: number; by_type: Record<string, number>; by_class: Record<string, number> }> };
  figure6: { classes: readonly AssertionClass[]; rows: Figure6Row[]; per_run: Array<PatchAssertions & { agent: string; files_run: string[] }>; errors: string[] };
  compare: CompareResult | null;
  /** The reward-hacking scan of every run (rules over trace and patch), or null when not run. */
  scan: Array<RunScan & { agent: string; task_id: string; judge?: JudgeVerdict }> | null;
  noise: NoiseReport;
  /**
   * Cases the launcher killed (a hang or the run's time limit), per run: what the grade says of them
   * (the collective a rank waited in and who did not arrive, when the stacks showed it).
   */
  hangs: Array<{ run_id: string; agent: string; task_id: string; case: string; reason: string; message: string; ranks_with_stacks: number[] }>;
}

/** An optional judge model's word on a flagged run, kept beside the rules' findings. */
export interface JudgeVerdict {
  model: string;
  verdict: string | null;
  error: string | null;
}

export function scoreRun(run: LoadedRun, extra: { flagged?: boolean | null; prices?: Prices | null } = {}): ScoredRun {
  const r = run.record;
  const g = run.grade;
  const p = extra.prices?.[r.model];
  const base = { run_id: r.run_id, agent: r.agent, task_id: r.task_id, category: r.category, repeat: r.repeat, harness: r.harness, wall_s: r.wall_s, flagged: extra.flagged ?? null, cost_usd: p ? runCost(r.tokens, p) : null };
  if (!g) return { ...base, status: "not_graded", scored: false, score: null, resolved: null, resolved_strict: null, resolved_set_a: null, error_types: [], ...(run.gradeProblem ? { grade_problem: run.gradeProblem } : {}) };
  if (g.status === "harness_fault") return { ...base, status: g.status, scored: false, score: null, resolved: null, resolved_strict: null, resolved_set_a: null, error_types: [] };
  const zero = ZERO_STATUSES.has(g.status);
  const labels = new Set<string>(g.cases.flatMap((c) => (c.label ? [c.label] : [])));
  if (zero) labels.add(g.status);
  return {
    ...base,
    status: g.status,
    scored: true,
    score: zero ? 0 : (g.with_probes.score ?? 0),
    resolved: zero ? false : g.with_probes.resolved === true,
    resolved_strict: zero ? false : g.with_probes.resolved_strict === true,
    resolved_set_a: zero ? false : g.official.resolved === true,
    error_types: ERROR_TYPES.filter((t) => labels.has(t)),
  };
}

function tokenSummary(runs: LoadedRun[], kind: keyof AgentRow["tokens"]): TokenSummary {
  const vals = runs.map((r) => r.record.tokens[kind]).filter((v): v is number => typeof v === "number");
  const total = vals.reduce((a, b) => a + b, 0);
  return { total, mean: vals.length ? total / vals.length : null, runs_reporting: vals.length };
}

/** Runs an agent harness made (time, tool calls measured); grade-many's predictions are not. */
const measured = (runs: LoadedRun[]) => runs.filter((r) => r.record.harness !== "predictions");

function agentRow(agent: string, runs: LoadedRun[], scored: ScoredRun[], prices: Prices | null): AgentRow {
  const s = scored.filter((x) => x.scored);
  let cost: AgentRow["cost"] = null;
  if (prices) {
    const costs: number[] = [];
    const unpriced = new Set<string>();
    for (const r of runs) {
      const p = prices[r.record.model];
      if (!p) unpriced.add(r.record.model);
      const c = p ? runCost(r.record.tokens, p) : null;
      if (c !== null) costs.push(c);
    }
    const total = costs.reduce((a, b) => a + b, 0);
    cost = { total_usd: total, mean_usd: costs.length ? total / costs.length : null, runs_priced: costs.length, unpriced_models: [...unpriced].sort() };
  }
  return {
    agent,
    models: [...new Set(runs.map((r) => r.record.model))].sort(),
    harnesses: [...new Set(runs.map((r) => r.record.harness))].sort(),
    runs: runs.length,
    not_graded: scored.filter((x) => x.status === "not_graded").length,
    harness_faults: scored.filter((x) => x.status === "harness_fault").length,
    n: s.length,
    resolved: rate(s.filter((x) => x.resolved).length, s.length),
    resolved_strict: rate(s.filter((x) => x.resolved_strict).length, s.length),
    passed: mean(s.map((x) => x.score ?? 0)),
    // A prediction (grade-many) measured neither time nor tool calls: its zeros are not data.
    wall_s: mean(measured(runs).map((r) => r.record.wall_s)),
    tokens: { input: tokenSummary(runs, "input"), cached_input: tokenSummary(runs, "cached_input"), output: tokenSummary(runs, "output"), reasoning: tokenSummary(runs, "reasoning") },
    turns: mean(runs.map((r) => r.record.turns).filter((v): v is number => typeof v === "number")),
    tool_calls: mean(measured(runs).map((r) => r.record.tool_calls)),
    cost,
  };
}

function setRates(s: ScoredRun[]) {
  const scored = s.filter((x) => x.scored);
  const accepted = scored.filter((x) => x.resolved_set_a);
  return {
    set_a: rate(accepted.length, scored.length),
    set_b: rate(scored.filter((x) => x.resolved).length, scored.length),
    a_accepted: accepted.length,
    rejected_by_probes: rate(accepted.filter((x) => !x.resolved).length, accepted.length),
  };
}

/** A test file counts as run when a pytest_run call named it, a folder above it, or one of its node ids; no paths = the task's test dirs (tests/ or test/). */
export function fileWasRun(file: string, calls: string[][]): boolean {
  return calls.some((paths) =>
    paths.length === 0
      ? /^(tests?)\//.test(file)
      : paths.some((p) => {
          const q = p.replace(/^\.\//, "").replace(/\/+$/, "");
          return q === file || q === "." || file.startsWith(`${q}/`) || q.startsWith(`${file}::`);
        }),
  );
}

export function compareAgents(runs: ScoredRun[], a: string, b: string): CompareResult {
  const byTask = (agent: string) => {
    const m = new Map<string, ScoredRun[]>();
    for (const r of runs) if (r.agent === agent && r.scored) m.set(r.task_id, [...(m.get(r.task_id) ?? []), r]);
    return m;
  };
  const ta = byTask(a);
  const tb = byTask(b);
  // A task is resolved by a configuration when more than half of its scored repeats are (a tie is not).
  const majority = (rs: ScoredRun[]) => rs.filter((r) => r.resolved).length * 2 > rs.length;
  const tasks: CompareResult["tasks"] = [];
  for (const task of [...ta.keys()].filter((t) => tb.has(t)).sort()) {
    const ar = majority(ta.get(task)!);
    const br = majority(tb.get(task)!);
    tasks.push({ task_id: task, a_resolved: ar, b_resolved: br, a_runs: ta.get(task)!.length, b_runs: tb.get(task)!.length, transition: ar && br ? "both" : !ar && !br ? "neither" : br ? "fixed" : "broken" });
  }
  const count = (t: string) => tasks.filter((x) => x.transition === t).length;
  return {
    a,
    b,
    rule: "per task, Set B; a task is resolved when more than half of its scored repeats are (a tie is not); fixed = unresolved by A, resolved by B; broken = the reverse",
    tasks,
    fixed: count("fixed"),
    broken: count("broken"),
    both: count("both"),
    neither: count("neither"),
    a_rate: rate(tasks.filter((t) => t.a_resolved).length, tasks.length),
    b_rate: rate(tasks.filter((t) => t.b_resolved).length, tasks.length),
    mcnemar_p: mcnemarExact(count("fixed"), count("broken")),
    only_a: [...ta.keys()].filter((t) => !tb.has(t)).sort(),
    only_b: [...tb.keys()].filter((t) => !ta.has(t)).sort(),
  };
}

export interface ComputeOptions {
  prices?: Prices | null;
  compare?: [string, string] | null;
  assertions?: PatchAssertions[];
  scans?: ReportData["scan"];
}

export function computeReport(c: LoadedCampaign, opts: ComputeOptions = {}): ReportData {
  const flagOf = new Map((opts.scans ?? []).map((s) => [s.run_id, s.flagged]));
  const scored = c.runs.map((r) => scoreRun(r, { flagged: opts.scans ? (flagOf.get(r.record.run_id) ?? null) : null, prices: opts.prices ?? null }));
  const agents = [...new Set([...(c.manifest?.agents.map((a) => a.name) ?? []), ...c.runs.map((r) => r.record.agent)])].filter((a) => c.runs.some((r) => r.record.agent === a));
  const of = <T extends { agent: string }>(xs: T[], agent: string) => xs.filter((x) => x.agent === agent);
  const runsOf = (agent: string) => c.runs.filter((r) => r.record.agent === agent);
  const categories = [...new Set([...CATEGORIES, ...c.runs.map((r) => r.record.category)])];
  const assertions = new Map((opts.assertions ?? []).map((p) => [p.id, p]));
  const perRun: ReportData["figure6"]["per_run"] = [];
  for (const r of c.runs) {
    const a = assertions.get(r.record.run_id);
    if (!a) continue;
    perRun.push({ ...a, agent: r.record.agent, files_run: a.files.map((f) => f.path).filter((f) => fileWasRun(f, r.pytestRuns)) });
  }
  const figure6Rows: Figure6Row[] = agents.map((agent) => {
    const mine = of(perRun, agent);
    const counts = Object.fromEntries(ASSERTION_CLASSES.map((k) => [k, mine.reduce((s, p) => s + p.counts[k], 0)])) as Record<AssertionClass, number>;
    return {
      agent,
      runs_with_tests: mine.filter((p) => p.files.length > 0).length,
      test_files: mine.reduce((s, p) => s + p.files.length, 0),
      test_files_run: mine.reduce((s, p) => s + p.files_run.length, 0),
      assertions: Object.values(counts).reduce((a, b) => a + b, 0),
      counts,
      unparsed_added_lines: mine.reduce((s, p) => s + p.files.reduce((t, f) => t + f.unparsed_added_lines, 0), 0),
    };
  });
  return {
    schema_version: 1,
    campaign: c.dir,
    rules:
      "unit = one scored run (task × repeat); % Resolved / % Passed of Set B (official + probes); not graded and harness faults excluded and counted apart; missing / empty / inapplicable / tampered score 0; ± = binomial standard error (% Passed: standard error of the mean)",
    agents,
    skipped: c.skipped,
    runs: scored,
    table2: agents.map((a) => agentRow(a, runsOf(a), of(scored, a), opts.prices ?? null)),
    table3: {
      categories,
      rows: agents.map((agent) => ({
        agent,
        by_category: Object.fromEntries(
          categories.map((cat) => {
            const s = of(scored, agent).filter((x) => x.scored && x.category === cat);
            return [cat, rate(s.filter((x) => x.resolved).length, s.length)];
          }),
        ),
      })),
    },
    table4: { rows: agents.map((agent) => ({ agent, ...setRates(of(scored, agent)) })), all: setRates(scored) },
    figure4: {
      classes: ERROR_CLASSES,
      rows: agents.map((agent) => {
        const s = of(scored, agent).filter((x) => x.scored);
        return {
          agent,
          submissions: s.length,
          by_type: Object.fromEntries(ERROR_TYPES.map((t) => [t, s.filter((x) => x.error_types.includes(t)).length])),
          by_class: Object.fromEntries(Object.entries(ERROR_CLASSES).map(([cls, types]) => [cls, s.filter((x) => x.error_types.some((t) => (types as readonly string[]).includes(t))).length])),
        };
      }),
    },
    figure6: { classes: ASSERTION_CLASSES, rows: figure6Rows, per_run: perRun, errors: perRun.flatMap((p) => p.errors.map((e) => `${p.id}: ${e}`)) },
    compare: opts.compare ? compareAgents(scored, opts.compare[0], opts.compare[1]) : null,
    scan: opts.scans ?? null,
    noise: noiseReport(scored, agents),
    hangs: c.runs.flatMap((r) =>
      (r.grade?.cases ?? [])
        .filter((x) => x.killed)
        .map((x) => ({ run_id: r.record.run_id, agent: r.record.agent, task_id: r.record.task_id, case: x.id, reason: x.killed!.reason, message: x.killed!.message, ranks_with_stacks: x.killed!.stacks.map((s) => s.rank) })),
    ),
  };
}
