import { describe, expect, it } from "vitest";
import { scoresByOperator } from "../../../src/grader/check/mutant-operators.js";
import type { MutantRow } from "../../../src/grader/check/types.js";

const row = (operator: string, verdict: MutantRow["verdict"]): MutantRow => ({ id: `${operator}#${verdict}`, file: "m.py", line: 1, operator, description: "", verdict, diff: "" });

describe("mutation score per operator", () => {
  it("killed / (killed + survived) for each operator; equivalent and not-run mutants are counted apart", () => {
    const got = scoresByOperator([
      row("dtype", "killed_probes"),
      row("dtype", "killed_official"),
      row("dtype", "survived"),
      row("dtype", "not_run"),
      row("dup-collective", "killed_probes"),
      row("drop-filter", "equivalent"),
    ]);
    expect(Object.keys(got)).toEqual(["drop-filter", "dtype", "dup-collective"]);
    expect(got.dtype).toEqual({ generated: 4, graded: 3, killed: 2, survived: 1, equivalent: 0, not_run: 1, score: 2 / 3 });
    expect(got["dup-collective"]!.score).toBe(1);
    expect(got["drop-filter"]).toMatchObject({ graded: 0, equivalent: 1, score: null });
  });
});
