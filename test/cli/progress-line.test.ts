/**
 * The long commands' progress on stderr (cli/progress-line.ts): on a terminal one status line
 * rewritten in place and never wider than the terminal, results printed above it; in a log plain
 * lines, the test counters left out.
 */
import { describe, expect, it } from "vitest";
import { ProgressLine, clock } from "../../src/cli/progress-line.js";

function stream(isTTY: boolean, columns = 60) {
  const chunks: string[] = [];
  return { chunks, isTTY, columns, write: (c: string) => chunks.push(c), text: () => chunks.join("") };
}

describe("ProgressLine", () => {
  it("on a terminal: one line rewritten (\\r, erase to the end), cut to the width, no newline until a result", () => {
    let t = 0;
    const s = stream(true, 40);
    const p = new ProgressLine(s, { label: "demo", now: () => t, tickMs: 0 });
    p.progress("calibrate: eager.official: running tests");
    t = 65_000;
    p.progress("eager.official: 3/20 tests", "tick");
    p.progress("a very long message that does not fit into forty columns at all", "tick");
    expect(s.text()).not.toContain("\n");
    const draws = s.text().split("\r").filter(Boolean);
    expect(draws).toHaveLength(3);
    for (const d of draws) {
      expect(d.endsWith("\x1b[K")).toBe(true);
      expect(d.replace("\x1b[K", "").length).toBeLessThanOrEqual(39);
    }
    expect(draws[1]).toBe("[demo 1:05] eager.official: 3/20 tests\x1b[K");
    expect(draws[2]).toMatch(/^\[demo 1:05\] a very long message that d…\x1b\[K$/);
  });

  it("on a terminal: a result clears the status line, is printed on its own line, and the status comes back", () => {
    const s = stream(true);
    const p = new ProgressLine(s, { label: "demo", now: () => 0, tickMs: 0 });
    p.progress("running", "step");
    s.chunks.length = 0;
    p.progress("golden: Set A yes, Set B yes", "result");
    expect(s.text()).toBe("\r\x1b[K[demo 0:00] golden: Set A yes, Set B yes\n\r[demo 0:00] running\x1b[K");
    s.chunks.length = 0;
    p.done();
    expect(s.text()).toBe("\r\x1b[K");
  });

  it("in a log: steps and results as plain lines, ticks left out, no control characters", () => {
    let t = 0;
    const s = stream(false);
    const p = new ProgressLine(s, { label: "grade t", now: () => t, tickMs: 0 });
    p.progress("eager.official: running tests on 2 rank(s)");
    p.progress("eager.official: 1/5 tests", "tick");
    t = 3_723_000;
    p.progress("eager.official: 5 passed in 4.0 s\nsecond line", "step");
    p.progress("graded", "result");
    p.done();
    expect(s.text()).toBe("[grade t 0:00] eager.official: running tests on 2 rank(s)\n[grade t 1:02:03] eager.official: 5 passed in 4.0 s second line\n[grade t 1:02:03] graded\n");
    expect(p.isLive).toBe(false);
  });

  it("TERM=dumb is a log even on a terminal", () => {
    const before = process.env.TERM;
    process.env.TERM = "dumb";
    try {
      expect(new ProgressLine(stream(true), { label: "x", tickMs: 0 }).isLive).toBe(false);
    } finally {
      if (before === undefined) delete process.env.TERM;
      else process.env.TERM = before;
    }
  });

  it("clock: m:ss, h:mm:ss past an hour", () => {
    expect([clock(0), clock(59_999), clock(61_000), clock(3_599_000), clock(3_600_000)]).toEqual(["0:00", "0:59", "1:01", "59:59", "1:00:00"]);
  });
});
