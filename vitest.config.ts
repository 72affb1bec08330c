import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 120_000,
    hookTimeout: 300_000,
    // Multi-rank suites spawn real torch processes; on a 2-core machine running files in parallel
    // makes rank start-up times (and thus hang limits) unpredictable.
    fileParallelism: false,
    pool: "forks",
  },
});
