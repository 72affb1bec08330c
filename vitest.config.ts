import { availableParallelism } from "node:os";
import { defineConfig } from "vitest/config";
import WeightedSequencer from "./test/helpers/weighted-sequencer.js";

/**
 * Two projects, run one after the other: `fast` (every folder of test/ but the slow ones) first,
 * then `slow` (test/{docker,gpu,harness-real,e2e,slurm,browser}: real engines, real harness
 * binaries, whole task checks). When a fast file fails the slow project is not started (fail fast,
 * test/helpers/suite-times-reporter.ts), and every run ends with a per-suite time table.
 *
 * Two files run at once (INFRADEV_TEST_WORKERS, default 2, at most the machine's cores). Measured on
 * the 2-core machine: grade.test.ts alone used 87 CPU s in 146 s of wall (0.6 of 2 cores: workspace
 * set-up, git, the sandbox's start and the grader's bookkeeping are one process at a time; only the
 * ranks' imports fill both cores); with two files at once the cores stay 85-99 % busy (the `busy`
 * column of the suite table) and the whole run took 48 min instead of 71 (2026-12-02). Files start
 * longest first (test/helpers/weighted-sequencer.ts). The ranks' hang clocks are robust to a loaded
 * machine by design: a test's clock starts only once every rank has collected, and the desync rule
 * needs ranks inside different collective instances, which load cannot cause.
 */
const SLOW = ["docker", "gpu", "harness-real", "e2e", "slurm", "browser"];
const requested = Number(process.env.INFRADEV_TEST_WORKERS ?? 2);
const workers = Math.max(1, Math.min(Number.isFinite(requested) ? Math.floor(requested) : 2, availableParallelism()));

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 300_000,
    maxWorkers: workers,
    fileParallelism: workers > 1,
    pool: "forks",
    reporters: ["default", "./test/helpers/suite-times-reporter.ts"],
    sequence: { sequencer: WeightedSequencer },
    projects: [
      // groupOrder 1 and 2 (not 0): vitest puts a sequential project of order 0 in a group that runs last.
      { extends: true, test: { name: "fast", include: ["test/**/*.test.ts"], exclude: SLOW.map((d) => `test/${d}/**`), sequence: { groupOrder: 1 } } },
      { extends: true, test: { name: "slow", include: SLOW.map((d) => `test/${d}/**/*.test.ts`), sequence: { groupOrder: 2 } } },
    ],
  },
});
