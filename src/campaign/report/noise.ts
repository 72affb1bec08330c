/** What noise needs of a scored run (compute.ts's ScoredRun has these). */
interface ScoredRun {
  task_id: string;
  agent: string;
  scored: boolean;
  resolved: boolean | null;
}

/**
 * Repeat noise: how often the same agent on the same task gets a different verdict when run again,
 * and how large a difference between two agents that noise alone makes. Pure functions over the
 * scored runs (Set B resolved, the report's unit); a (task, agent) cell with one scored run says
 * nothing about noise and is left out.
 *
 * flip rate of a cell with k resolved of n repeats = the share of its repeat pairs that disagree,
 *   k(n−k) / (n(n−1)/2); of a task: pooled over its cells, Σ k(n−k) / Σ n(n−1)/2.
 * pooled within-cell variance v = Σ_cells Σ_i (x_i − x̄_c)² / Σ_cells (n_c − 1), where for 0/1
 *   outcomes Σ_i (x_i − x̄_c)² = k(n−k)/n: the variance of one run's outcome that is due to repeat
 *   noise alone (the campaign's noise floor, as its standard deviation √v).
 * noise floor of a difference between agents A and B (N_A, N_B scored runs) = 1.96 · √(v/N_A + v/N_B),
 *   in rate units: a difference inside it is within what re-running the same agents could produce.
 */

export interface FlipCell {
  task_id: string;
  agent: string;
  n: number;
  resolved: number;
  flip_rate: number;
}

export interface NoiseReport {
  cells: FlipCell[];
  tasks: Array<{ task_id: string; cells: number; pairs: number; flip_rate: number }>;
  /** Cells with ≥ 2 scored repeats, and the degrees of freedom Σ (n_c − 1) of the pooled variance. */
  cells_with_repeats: number;
  dof: number;
  /** null without any cell of ≥ 2 repeats. */
  pooled_variance: number | null;
  differences: Array<{ a: string; b: string; a_rate: number | null; b_rate: number | null; diff: number | null; floor: number | null; within_floor: boolean | null }>;
}

export function noiseReport(runs: ScoredRun[], agents: string[]): NoiseReport {
  const scored = runs.filter((r) => r.scored);
  const cellMap = new Map<string, ScoredRun[]>();
  for (const r of scored) {
    const key = `${r.task_id}\u0000${r.agent}`;
    cellMap.set(key, [...(cellMap.get(key) ?? []), r]);
  }
  const cells: FlipCell[] = [];
  let ss = 0;
  let dof = 0;
  for (const rs of cellMap.values()) {
    const n = rs.length;
    if (n < 2) continue;
    const k = rs.filter((r) => r.resolved).length;
    cells.push({ task_id: rs[0]!.task_id, agent: rs[0]!.agent, n, resolved: k, flip_rate: (k * (n - k)) / ((n * (n - 1)) / 2) });
    ss += (k * (n - k)) / n;
    dof += n - 1;
  }
  cells.sort((x, y) => x.task_id.localeCompare(y.task_id) || x.agent.localeCompare(y.agent));
  const tasks = [...new Set(cells.map((c) => c.task_id))].map((task_id) => {
    const mine = cells.filter((c) => c.task_id === task_id);
    const pairs = mine.reduce((s, c) => s + (c.n * (c.n - 1)) / 2, 0);
    const disagree = mine.reduce((s, c) => s + c.resolved * (c.n - c.resolved), 0);
    return { task_id, cells: mine.length, pairs, flip_rate: disagree / pairs };
  });
  const v = dof > 0 ? ss / dof : null;
  const rateOf = (agent: string) => {
    const s = scored.filter((r) => r.agent === agent);
    return { n: s.length, p: s.length ? s.filter((r) => r.resolved).length / s.length : null };
  };
  const differences: NoiseReport["differences"] = [];
  for (let i = 0; i < agents.length; i++) {
    for (let j = i + 1; j < agents.length; j++) {
      const a = rateOf(agents[i]!);
      const b = rateOf(agents[j]!);
      const diff = a.p !== null && b.p !== null ? b.p - a.p : null;
      const floor = v !== null && a.n > 0 && b.n > 0 ? 1.96 * Math.sqrt(v / a.n + v / b.n) : null;
      differences.push({ a: agents[i]!, b: agents[j]!, a_rate: a.p, b_rate: b.p, diff, floor, within_floor: diff !== null && floor !== null ? Math.abs(diff) <= floor : null });
    }
  }
  return { cells, tasks, cells_with_repeats: cells.length, dof, pooled_variance: v, differences };
}
