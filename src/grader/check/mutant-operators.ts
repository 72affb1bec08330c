import type { MutantRow, OperatorScore } from "./types.js";

/**
 * The mutation score split by operator (issue 22): a score of 1.000 over local, syntactic operators
 * says little about design-level mistakes, so the report shows which operators the probes face and
 * how each fares (a new operator with survivors is where the probes are blind).
 */
export function scoresByOperator(rows: readonly MutantRow[]): Record<string, OperatorScore> {
  const out: Record<string, OperatorScore> = {};
  for (const r of rows) {
    const s = (out[r.operator] ??= { generated: 0, graded: 0, killed: 0, survived: 0, equivalent: 0, not_run: 0, score: null });
    s.generated++;
    if (r.verdict === "killed_official" || r.verdict === "killed_probes") s.killed++;
    else if (r.verdict === "survived") s.survived++;
    else if (r.verdict === "equivalent") s.equivalent++;
    else if (r.verdict === "not_run") s.not_run++;
  }
  for (const s of Object.values(out)) {
    s.graded = s.killed + s.survived;
    s.score = s.graded ? s.killed / s.graded : null;
  }
  return Object.fromEntries(Object.entries(out).sort(([a], [b]) => a.localeCompare(b)));
}
