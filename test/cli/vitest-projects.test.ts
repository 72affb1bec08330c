/**
 * The test run's own shape (vitest.config.ts + test/helpers/suite-times-reporter.ts), on a fixture
 * with one fast and one slow project: the slow project runs after the fast one and not at all when a
 * fast file failed (unless INFRADEV_NO_FAIL_FAST=1); every run writes the per-suite time table.
 */
import { execa } from "execa";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { REPO_ROOT } from "../helpers/paths.js";
import { suiteTable, type SuiteTimes } from "../helpers/suite-times.js";
import { orderByWeight } from "../helpers/weighted-sequencer.js";

const FIXTURE = join(REPO_ROOT, "test", "fixtures", "vitest-projects");
const tmp = mkdtempSync(join(tmpdir(), "infradev-vitest-projects-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function inherited(): Record<string, string> {
  const keep: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith("INFRADEV_")) keep[k] = v;
  return keep;
}

async function run(name: string, env: Record<string, string>) {
  const mark = join(tmp, `${name}.slow-ran`);
  const times = join(tmp, `${name}.json`);
  const r = await execa(join(REPO_ROOT, "node_modules", ".bin", "vitest"), ["run", "--config", join(FIXTURE, "vitest.config.ts"), "--root", FIXTURE], {
    reject: false,
    // The fixture run must not inherit this run's own switches (.ci/run sets INFRADEV_SUITE_TABLE=0).
    extendEnv: false,
    env: { ...inherited(), ...env, FIXTURE_SLOW_MARK: mark, INFRADEV_SUITE_TIMES: times, CI: "1" },
  });
  return { r, slowRan: existsSync(mark), times: JSON.parse(readFileSync(times, "utf8")) as SuiteTimes };
}

describe("vitest projects: fast first, fail fast, the suite table", () => {
  it("all green: both projects run, fast first; the table lists both with their files", async () => {
    const { r, slowRan, times } = await run("green", {});
    expect(r.exitCode, r.stdout + r.stderr).toBe(0);
    expect(slowRan).toBe(true);
    expect(times.suites.map((s) => [s.project, s.file, s.tests, s.failed]).sort()).toEqual([
      ["fast", "fast/second.case.ts", 1, 0],
      ["fast", "fast/unit.case.ts", 1, 0],
      ["slow", "slow/engine.case.ts", 1, 0],
    ]);
    // Two workers: the fast files ran at once, and the slow file started only after both had ended.
    const [second, unit, slow] = ["fast/second.case.ts", "fast/unit.case.ts", "slow/engine.case.ts"].map((f) => times.suites.find((s) => s.file === f)!);
    expect(unit!.started_s!).toBeLessThan(second!.started_s! + second!.seconds);
    expect(second!.started_s!).toBeLessThan(unit!.started_s! + unit!.seconds);
    for (const fast of [second!, unit!]) expect(slow!.started_s!).toBeGreaterThanOrEqual(fast.started_s! + fast.seconds - 0.05);
    expect(r.stdout).toContain("per-suite times");
    expect(r.stdout).toMatch(/^fast \(2 files\)/m);
    expect(r.stdout).toMatch(/^ {2}slow\/engine\.case\.ts +\d/m);
  }, 120_000);

  it("a fast file fails: the slow project does not run, the run fails and says why", async () => {
    const { r, slowRan, times } = await run("red", { FIXTURE_FAST_FAILS: "1" });
    expect(r.exitCode).not.toBe(0);
    expect(slowRan).toBe(false);
    expect(r.stderr).toContain("[fail fast] fast/unit.case.ts failed in the fast project: the slow project is not run");
    expect(times.suites.find((s) => s.project === "fast")!.failed).toBe(1);
  }, 120_000);

  it("INFRADEV_NO_FAIL_FAST=1: the slow project runs after a fast failure", async () => {
    const { r, slowRan } = await run("red-all", { FIXTURE_FAST_FAILS: "1", INFRADEV_NO_FAIL_FAST: "1" });
    expect(r.exitCode).not.toBe(0);
    expect(slowRan).toBe(true);
  }, 120_000);

  it("the order (pure): by group, then longest first; a file the table does not know gets its median", () => {
    const files = [
      { group: 2, file: "e2e/big.test.ts" },
      { group: 1, file: "a.test.ts" },
      { group: 1, file: "new.test.ts" },
      { group: 1, file: "b.test.ts" },
      { group: 1, file: "c.test.ts" },
    ];
    const seconds = { "e2e/big.test.ts": 900, "a.test.ts": 5, "b.test.ts": 300, "c.test.ts": 40 };
    // Known times sorted: 5, 40, 300, 900 -> median (upper) 300: the new file ties b and sorts after it by name.
    expect(orderByWeight(files, (f) => f, seconds).map((f) => f.file)).toEqual(["b.test.ts", "new.test.ts", "c.test.ts", "a.test.ts", "e2e/big.test.ts"]);
  });

  it("the table (pure): per project its total, files slowest first, how busy the cores were, failures counted, the load noted", () => {
    const lines = suiteTable({
      wall_s: 125,
      cores: 2,
      load: { start: 1, end: 2.5 },
      suites: [
        { file: "test/a.test.ts", project: "fast", seconds: 2, cpu_s: 1, tests: 3, failed: 0, skipped: 0 },
        { file: "test/b.test.ts", project: "fast", seconds: 70, tests: 1, failed: 1, skipped: 0 },
        { file: "test/e2e/c.test.ts", project: "slow", seconds: 50, tests: 2, failed: 0, skipped: 0 },
      ],
    });
    expect(lines[0]).toMatch(/^fast \(2 files\) +1m12s +busy +tests +failed$/);
    // b has no CPU figure (a run saved before it): a dash; a: 1 CPU s over 2 s × 2 cores.
    expect(lines[1]).toMatch(/^ {2}test\/b\.test\.ts +1m10s +— +1 +1$/);
    expect(lines[2]).toMatch(/^ {2}test\/a\.test\.ts +2\.0s +25 % +3 +-$/);
    expect(lines[3]).toMatch(/^slow \(1 files\) +50\.0s/);
    expect(lines.at(-1)).toBe("wall 2m05s (load average 1.0 at the start, 2.5 at the end)");
  });
});
