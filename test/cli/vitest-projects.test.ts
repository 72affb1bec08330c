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
    expect(times.suites.map((s) => [s.project, s.file, s.tests, s.failed])).toEqual([
      ["fast", "fast/unit.case.ts", 1, 0],
      ["slow", "slow/engine.case.ts", 1, 0],
    ]);
    expect(r.stdout).toContain("per-suite times");
    expect(r.stdout).toMatch(/^fast \(1 files\)/m);
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

  it("the table (pure): per project its total, files slowest first, failures counted, the load noted", () => {
    const lines = suiteTable({
      wall_s: 125,
      load: { start: 1, end: 2.5 },
      suites: [
        { file: "test/a.test.ts", project: "fast", seconds: 2, tests: 3, failed: 0, skipped: 0 },
        { file: "test/b.test.ts", project: "fast", seconds: 70, tests: 1, failed: 1, skipped: 0 },
        { file: "test/e2e/c.test.ts", project: "slow", seconds: 50, tests: 2, failed: 0, skipped: 0 },
      ],
    });
    expect(lines[0]).toMatch(/^fast \(2 files\) +1m12s +tests +failed$/);
    expect(lines[1]).toMatch(/^ {2}test\/b\.test\.ts +1m10s +1 +1$/);
    expect(lines[2]).toMatch(/^ {2}test\/a\.test\.ts +2\.0s +3 +-$/);
    expect(lines[3]).toMatch(/^slow \(1 files\) +50\.0s/);
    expect(lines.at(-1)).toBe("wall 2m05s (load average 1.0 at the start, 2.5 at the end)");
  });
});
