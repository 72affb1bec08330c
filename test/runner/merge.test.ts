import { describe, expect, it } from "vitest";
import { mergeRankReports, type RankRecord } from "../../src/runner/merge.js";

describe("mergeRankReports", () => {
  const c = (id: string, outcome: "passed" | "failed" | "error" | "skipped", timeSec = 1, extra: Partial<RankRecord> = {}): RankRecord => ({
    nodeid: id,
    outcome,
    duration_s: timeSec,
    message: outcome,
    longrepr: `${outcome} text`,
    ...extra,
  });

  it("takes the worst outcome over ranks: error > failed > passed > skipped", () => {
    const merged = mergeRankReports([
      [c("a", "passed"), c("b", "skipped"), c("d", "failed"), c("e", "skipped")],
      [c("a", "failed"), c("b", "passed"), c("d", "error"), c("e", "skipped")],
    ]);
    expect(merged.map((m) => [m.id, m.outcome])).toEqual([
      ["a", "failed"],
      ["b", "passed"],
      ["d", "error"],
      ["e", "skipped"],
    ]);
  });

  it("counts a test missing on any rank as failed, and time as the max over ranks", () => {
    const [m] = mergeRankReports([[c("a", "passed", 2)], []]);
    expect(m).toMatchObject({ id: "a", outcome: "failed", reason: "missing", timeSec: 2 });
    expect(m!.ranks[1]).toMatchObject({ rank: 1, outcome: "missing" });
  });

  it("lists collected tests no rank reached as failed", () => {
    const merged = mergeRankReports([[c("a", "passed")], [c("a", "passed")]], { collected: ["a", "z"] });
    expect(merged.find((m) => m.id === "z")).toMatchObject({ outcome: "failed", reason: "missing" });
  });

  it("names a hang from the launcher's events even where a rank passed", () => {
    const merged = mergeRankReports([[c("h", "passed")], [c("h", "error")]], {
      events: [{ kind: "hang", rank: 1, test: "h", after_s: 5.1, detail: "killed" }],
    });
    expect(merged[0]).toMatchObject({ outcome: "error", reason: "hang" });
  });

  it("carries per-rank resources and the probe marker", () => {
    const res = { wall_time_s: 0.1, peak_memory_bytes: 10, memory_kind: "host_rss", calls: { all_reduce: 3 }, bytes: { all_reduce: 48 } };
    const [m] = mergeRankReports([[c("p", "passed", 1, { ...res, markers: { probe: { promise: "avg", kind: "numerical" } } })], [c("p", "passed", 1, res)]]);
    expect(m!.probe).toEqual({ promise: "avg", kind: "numerical" });
    expect(m!.ranks.map((r) => r.resources?.calls.all_reduce)).toEqual([3, 3]);
  });

  it("keeps the failure text as the excerpt (its tail when long) and none for a pass", () => {
    const long = `head\n${"x".repeat(5000)}\nAssertionError: the end`;
    const [m] = mergeRankReports([[c("f", "failed", 1, { longrepr: long })], [c("f", "passed")]]);
    expect(m!.ranks[0]!.excerpt.endsWith("AssertionError: the end")).toBe(true);
    expect(m!.ranks[0]!.excerpt.length).toBeLessThan(4100);
    expect(m!.ranks[1]!.excerpt).toBe("");
  });

  it("treats a malformed record as an error, never as a pass, and a reduced one without resources", () => {
    const bad = { nodeid: "b", outcome: "PASSED" } as unknown as RankRecord;
    const [m] = mergeRankReports([[bad], [c("b", "passed", 1, { reduced: true })]]);
    expect(m!.outcome).toBe("error");
    expect(m!.ranks[1]!.resources).toBeUndefined();
  });
});
