import { describe, expect, it } from "vitest";
import { parseJUnit } from "../sandbox/junit.js";
import { mergeRankReports } from "../sandbox/merge.js";

const xml = (cases: string) => `<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">${cases}</testsuite></testsuites>`;

describe("parseJUnit", () => {
  it("reads outcomes, messages, times and decodes entities", () => {
    const cases = parseJUnit(
      xml(
        `<testcase name="tests/test_a.py::test_ok" classname="tests/test_a.py" time="0.5"/>` +
          `<testcase name="tests/test_a.py::test_bad[x&amp;y]" classname="tests/test_a.py" time="1.25"><failure message="assert 1 == 2">Traceback &lt;here&gt;</failure></testcase>` +
          `<testcase name="tests/test_a.py::test_err" time="0"><error message="hang: killed after 5.0 s"><![CDATA[stack <raw>]]></error></testcase>` +
          `<testcase name="tests/test_a.py::test_skip" time="0"><skipped message="no gpu"/></testcase>`,
      ),
    );
    expect(cases).toEqual([
      { id: "tests/test_a.py::test_ok", outcome: "passed", timeSec: 0.5, message: "", text: "" },
      { id: "tests/test_a.py::test_bad[x&y]", outcome: "failed", timeSec: 1.25, message: "assert 1 == 2", text: "Traceback <here>" },
      { id: "tests/test_a.py::test_err", outcome: "error", timeSec: 0, message: "hang: killed after 5.0 s", text: "stack <raw>" },
      { id: "tests/test_a.py::test_skip", outcome: "skipped", timeSec: 0, message: "no gpu", text: "" },
    ]);
  });

  it("turns pytest's own classname/name back into a node id", () => {
    const [c] = parseJUnit(xml(`<testcase classname="tests.unit.test_b.TestSync" name="test_step[2]" time="0.1"/>`));
    expect(c!.id).toBe("tests/unit/test_b.py::TestSync::test_step[2]");
  });
});

describe("mergeRankReports", () => {
  const c = (id: string, outcome: "passed" | "failed" | "error" | "skipped", timeSec = 1) => ({ id, outcome, timeSec, message: outcome, text: `${outcome} text` });

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
    const [m] = mergeRankReports([[c("p", "passed")], [c("p", "passed")]], {
      resources: [{ p: { ...res, markers: { probe: { promise: "avg", kind: "numerical" } } } }, { p: res }],
    });
    expect(m!.probe).toEqual({ promise: "avg", kind: "numerical" });
    expect(m!.ranks.map((r) => r.resources?.calls.all_reduce)).toEqual([3, 3]);
  });
});
