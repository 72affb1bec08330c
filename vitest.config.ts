import { defineConfig } from "vitest/config";

/**
 * Two projects, run one after the other: `fast` (every folder of test/ but the slow ones) first,
 * then `slow` (test/{docker,gpu,harness-real,e2e,slurm,browser}: real engines, real harness
 * binaries, whole task checks). When a fast file fails the slow project is not started (fail fast,
 * test/helpers/suite-times-reporter.ts), and every run ends with a per-suite time table.
 */
const SLOW = ["docker", "gpu", "harness-real", "e2e", "slurm", "browser"];

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Multi-rank suites spawn real torch processes; on a 2-core machine running files in parallel
    // makes rank start-up times (and thus hang limits) unpredictable.
    fileParallelism: false,
    pool: "forks",
    reporters: ["default", "./test/helpers/suite-times-reporter.ts"],
    projects: [
      // groupOrder 1 and 2 (not 0): vitest puts a sequential project of order 0 in a group that runs last.
      { extends: true, test: { name: "fast", include: ["test/**/*.test.ts"], exclude: SLOW.map((d) => `test/${d}/**`), sequence: { groupOrder: 1 } } },
      { extends: true, test: { name: "slow", include: SLOW.map((d) => `test/${d}/**/*.test.ts`), sequence: { groupOrder: 2 } } },
    ],
  },
});
