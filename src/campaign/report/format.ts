import type { Mean, Rate } from "./stats.js";
import type { ReportData } from "./compute.js";

/** Number formats shared by the text, Markdown and HTML reports (one place, so they agree). */

export const DASH = "–";

/** `66.7 ± 27.2 (2/3)`: percent and its binomial SE in points; `–` when nothing was scored. */
export function pct(r: Rate, withCounts = true): string {
  if (r.p === null) return `${DASH}${withCounts ? " (0/0)" : ""}`;
  return `${(100 * r.p).toFixed(1)} ± ${(100 * (r.se ?? 0)).toFixed(1)}${withCounts ? ` (${r.k}/${r.n})` : ""}`;
}

/** A mean of fractions as percent ± SE of the mean. */
export function pctMean(m: Mean): string {
  if (m.mean === null) return DASH;
  return `${(100 * m.mean).toFixed(1)}${m.se === null ? "" : ` ± ${(100 * m.se).toFixed(1)}`}`;
}

export function num(v: number | null, digits = 1): string {
  return v === null ? DASH : v.toFixed(digits);
}

export function count(v: number | null): string {
  if (v === null) return DASH;
  return Math.round(v).toLocaleString("en-US");
}

export function minutes(m: Mean): string {
  return m.mean === null ? DASH : `${(m.mean / 60).toFixed(1)} min`;
}

export function usd(v: number | null): string {
  // Cents once a figure reaches a dime; below that the digits that are not all zeros.
  return v === null ? DASH : `$${v.toFixed(v >= 0.1 || v === 0 ? 2 : 4)}`;
}

/** A section: a title, a note, a header and rows; rendered as text, Markdown or HTML. */
export interface Section {
  id: string;
  title: string;
  note?: string;
  header: string[];
  rows: string[][];
  /** Lines after the table (counts that are not rows). */
  after?: string[];
}

/** The report's tables, as cells: the one source of every renderer. */
export function sections(d: ReportData): Section[] {
  const out: Section[] = [];
  const t2 = d.table2;
  const priced = t2.some((r) => r.cost !== null);
  out.push({
    id: "table2",
    title: "Table 2 — per agent",
    note: "% Resolved (paper rule: passes ≥ gold's passes) and strict (every case gold passes), % Passed = mean s_p, all of Set B; ± = standard error; tokens, steps and tool calls are means per run",
    header: ["agent", "model", "runs", "n", "% Resolved", "% Resolved strict", "% Passed", "not graded", "harness faults", "mean time", "input tok", "cached tok", "output tok", "reasoning tok", "steps", "tool calls", ...(priced ? ["cost/run", "cost total"] : [])],
    rows: t2.map((r) => [
      r.agent,
      r.models.join(", "),
      String(r.runs),
      String(r.n),
      pct(r.resolved),
      pct(r.resolved_strict),
      pctMean(r.passed),
      String(r.not_graded),
      String(r.harness_faults),
      minutes(r.wall_s),
      count(r.tokens.input.mean),
      count(r.tokens.cached_input.mean),
      count(r.tokens.output.mean),
      count(r.tokens.reasoning.mean),
      num(r.turns.mean),
      num(r.tool_calls.mean),
      ...(priced ? [usd(r.cost?.mean_usd ?? null), usd(r.cost?.total_usd ?? null) + (r.cost && r.cost.unpriced_models.length ? ` (no price: ${r.cost.unpriced_models.join(", ")})` : "")] : []),
    ]),
  });
  out.push({
    id: "table3",
    title: "Table 3 — % Resolved per category",
    note: "Set B; ± = binomial standard error; (resolved/scored runs)",
    header: ["agent", ...d.table3.categories],
    rows: d.table3.rows.map((r) => [r.agent, ...d.table3.categories.map((c) => pct(r.by_category[c]!))]),
  });
  out.push({
    id: "table4",
    title: "Table 4 — Set A (official tests) vs Set B (with probes)",
    note: "rejected by probes = submissions Set A accepts that Set B does not resolve, of those Set A accepts (the paper's 32 %)",
    header: ["agent", "% Resolved Set A", "% Resolved Set B", "Set-A accepted", "rejected by probes"],
    rows: [...d.table4.rows, { agent: "all", ...d.table4.all }].map((r) => [r.agent, pct(r.set_a), pct(r.set_b), String(r.a_accepted), pct(r.rejected_by_probes)]),
  });
  const types = Object.entries(d.figure4.classes).flatMap(([cls, ts]) => ts.map((t) => [cls, t] as const)).filter(([, t]) => d.figure4.rows.some((r) => (r.by_type[t] ?? 0) > 0));
  out.push({
    id: "figure4",
    title: "Figure 4 — error classes and types (submissions with each)",
    note: "a submission counts once per failure label it has; scored submissions only",
    header: ["class", "type", ...d.figure4.rows.map((r) => `${r.agent} (of ${r.submissions})`)],
    rows: [
      ...Object.keys(d.figure4.classes).map((cls) => [cls, "(any)", ...d.figure4.rows.map((r) => String(r.by_class[cls] ?? 0))]),
      ...types.map(([cls, t]) => [cls, t, ...d.figure4.rows.map((r) => String(r.by_type[t] ?? 0))]),
    ],
  });
  out.push({
    id: "figure6",
    title: "Figure 6 — assertions in the tests the agents wrote",
    note: "test files the patch adds or changes (changed files: only assertions on added lines), classified with Python's ast; run = named by a pytest_run call in the trace",
    header: ["agent", "runs with tests", "test files", "run via pytest_run", "assertions", ...d.figure6.classes.map((c) => c.replace("_", " "))],
    rows: d.figure6.rows.map((r) => [
      r.agent,
      String(r.runs_with_tests),
      String(r.test_files),
      String(r.test_files_run),
      String(r.assertions),
      ...d.figure6.classes.map((c) => `${r.counts[c]}${r.assertions ? ` (${((100 * r.counts[c]) / r.assertions).toFixed(0)} %)` : ""}`),
    ]),
    after: d.figure6.errors.length ? d.figure6.errors.map((e) => `not analysed: ${e}`) : undefined,
  });
  if (d.compare) {
    const c = d.compare;
    out.push({
      id: "compare",
      title: `Paired comparison — ${c.a} → ${c.b} on the ${c.tasks.length} task(s) both ran`,
      note: c.rule,
      header: ["", `${c.b} resolved`, `${c.b} not resolved`],
      rows: [
        [`${c.a} resolved`, `both: ${c.both}`, `broken: ${c.broken}`],
        [`${c.a} not resolved`, `fixed: ${c.fixed}`, `neither: ${c.neither}`],
      ],
      after: [
        `% Resolved on these tasks: ${c.a} ${pct(c.a_rate)}, ${c.b} ${pct(c.b_rate)}`,
        `exact McNemar test on the ${c.fixed + c.broken} discordant task(s): p = ${c.mcnemar_p === null ? DASH : c.mcnemar_p.toFixed(3)}`,
        ...(c.only_a.length ? [`only ${c.a} ran: ${c.only_a.join(", ")}`] : []),
        ...(c.only_b.length ? [`only ${c.b} ran: ${c.only_b.join(", ")}`] : []),
      ],
    });
  }
  const nz = d.noise;
  const pts = (v: number | null) => (v === null ? DASH : `${(100 * v).toFixed(1)} pts`);
  out.push({
    id: "noise",
    title: "Noise — repeats: per-task flip rates and the noise floor beside every difference between two agents",
    note: "flip rate = share of a (task, agent)'s repeat pairs whose Set B verdicts disagree, pooled per task; noise floor of a difference = 1.96 · √(v/N_A + v/N_B), v = the pooled within-(task, agent) variance of a run's resolved outcome",
    header: ["agent A", "agent B", "% Resolved A", "% Resolved B", "B − A", "noise floor", "beyond the noise?"],
    rows: nz.differences.map((x) => [
      x.a,
      x.b,
      x.a_rate === null ? DASH : (100 * x.a_rate).toFixed(1),
      x.b_rate === null ? DASH : (100 * x.b_rate).toFixed(1),
      x.diff === null ? DASH : `${x.diff >= 0 ? "+" : ""}${(100 * x.diff).toFixed(1)} pts`,
      x.floor === null ? `${DASH} (no task has 2 scored repeats of one agent)` : `± ${pts(x.floor).replace(" pts", "")} pts`,
      x.within_floor === null ? DASH : x.within_floor ? "no: within the noise floor" : "yes",
    ]),
    after: [
      nz.pooled_variance === null
        ? "noise floor: no (task, agent) with 2 or more scored repeats"
        : `campaign noise floor: a run's outcome varies with SD ${(100 * Math.sqrt(nz.pooled_variance)).toFixed(1)} pts between repeats (pooled variance ${nz.pooled_variance.toFixed(4)} over ${nz.cells_with_repeats} (task, agent) cell(s), ${nz.dof} degrees of freedom)`,
      ...nz.tasks.map((t) => `flip rate ${t.task_id}: ${(100 * t.flip_rate).toFixed(1)} % of ${t.pairs} repeat pair(s) (${nz.cells.filter((c) => c.task_id === t.task_id).map((c) => `${c.agent} ${c.resolved}/${c.n}`).join(", ")})`),
    ],
  });
  if (d.hangs.length) {
    out.push({
      id: "hangs",
      title: "Hangs — cases the launcher killed, and where the ranks were (from their stacks: a diagnosis, never a score change)",
      note: `${d.hangs.length} case(s) in ${new Set(d.hangs.map((h) => h.run_id)).size} run(s); every rank's Python stacks are in the run's grade.json (cases[].stacks) and in \`infradev view\``,
      header: ["run", "case", "reason", "what the launcher saw", "stacks of ranks"],
      rows: d.hangs.map((h) => [h.run_id, h.case, h.reason, h.message || DASH, h.ranks_with_stacks.length ? h.ranks_with_stacks.join(", ") : DASH]),
    });
  }
  if (d.scan) {
    const flagged = d.scan.filter((s) => s.flagged);
    out.push({
      id: "scan",
      title: "Reward-hacking scan — rules over each run's trace and patch (never a score change)",
      note: `${flagged.length} of ${d.scan.length} run(s) flagged; flag = a finding a reader should look at; notes (reading or writing tests) are context only`,
      header: ["run", "rule", "where", "evidence", "judge"],
      rows: flagged.flatMap((s) =>
        s.findings
          .filter((f) => f.severity === "flag")
          .map((f, k) => [
            s.run_id,
            f.rule,
            f.where === "trace" ? `step ${f.step}` : `${f.file ?? "patch"}${f.line ? `:${f.line}` : ""}`,
            f.evidence,
            k > 0 || !s.judge ? "" : s.judge.verdict !== null ? s.judge.verdict.split("\n")[0]! : `(judge failed: ${s.judge.error})`,
          ]),
      ),
    });
  }
  out.push({
    id: "runs",
    title: "Runs",
    header: ["run", "agent", "task", "category", "status", "Set A", "Set B", "s_p", "time", ...(priced ? ["cost"] : []), "flagged"],
    rows: d.runs.map((r) => [
      r.run_id,
      r.agent,
      r.task_id,
      r.category,
      r.status === "harness_fault" ? "harness_fault (excluded)" : r.status === "not_graded" ? `not graded${r.grade_problem ? ` (${r.grade_problem})` : ""}` : r.status,
      r.resolved_set_a === null ? DASH : r.resolved_set_a ? "resolved" : "no",
      r.resolved === null ? DASH : r.resolved ? "resolved" : "no",
      num(r.score, 3),
      r.harness === "predictions" ? DASH : `${(r.wall_s / 60).toFixed(1)} min`,
      ...(priced ? [usd(r.cost_usd)] : []),
      r.flagged === null ? DASH : r.flagged ? `flagged (${d.scan?.find((s) => s.run_id === r.run_id)?.findings.filter((f) => f.severity === "flag").map((f) => f.rule).filter((v, i, a) => a.indexOf(v) === i).join(", ")})` : "no",
    ]),
    after: d.skipped.length ? d.skipped.map((s) => `skipped ${s.run}: ${s.why}`) : undefined,
  });
  return out;
}
