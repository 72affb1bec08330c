import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { runRanks } from "../runner/ranks.js";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { errorResult, okResult } from "./support/result.js";
import { newResultsDir } from "./support/results-dir.js";
import {
  EventSchema,
  SummarySchema,
  TestResultSchema,
  collectionErrorsOf,
  orderForReport,
  summarize,
  toEvents,
  toTestResult,
} from "./support/run-summary.js";
import { firstBadTestPath } from "./support/sandbox-paths.js";
import { modeEnv, modeSchema } from "./support/task-env.js";

const MAX_TESTS = 300;
const MAX_RANKS = 64;

/** The input schema for one task: `mode` is an enum of the task's modes. */
export const pytestRunInput = (task: ToolDeps["task"]) => z.object({
  paths: z.array(z.string()).max(100).optional().describe("test files, folders or node ids relative to the workspace (default: the task's test dirs)"),
  ranks: z.number().int().min(1).max(MAX_RANKS).optional().describe("number of ranks (default: the task's ranks); 1 runs a single process"),
  k: z.string().max(1000).optional().describe("pytest -k expression to select tests"),
  mode: modeSchema(task, "execution mode, one of the task's modes (see get_task; default: the task's default mode)"),
  timeout_sec: z.number().int().min(1).max(86_400).optional().describe("per-test wall-clock limit (default: the task's); a test past it is reported as a hang"),
});

export const PytestRunOutput = z.object({
  status: z.string().describe("ok | tests_failed | hang | crash | run_timeout | launch_error | harness_error"),
  verdict: z.string(),
  ranks: z.number().int(),
  mode: z.string(),
  summary: SummarySchema,
  tests: z.array(TestResultSchema).describe("failing tests first; per-rank failure excerpts and per-rank resources"),
  tests_truncated: z.boolean(),
  events: z.array(EventSchema).describe("hangs and crashes the launcher saw, with the rank and the test"),
  collection_errors: z.array(z.string()),
  results_dir: z.string().describe("per-rank JUnit XML, logs and probe JSON, as the sandbox sees it"),
  duration_ms: z.number(),
});

export function registerPytestRunTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "pytest_run",
      title: "Run tests on N ranks",
      description:
        "Runs one pytest session on N ranks inside the sandbox (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set per rank, a per-test limit, " +
        "the whole process group killed when a rank dies or hangs) and merges the ranks per test: error > failed > passed > skipped, a test " +
        "missing on a rank counts as failed. Returns each test's outcome, per-rank failure excerpts, hangs named as hangs, and per-test, " +
        "per-rank resources (time, peak memory, collective calls and bytes). Sends progress (tests done / total) when asked.",
      input: pytestRunInput(deps.task),
      output: PytestRunOutput,
      // Runs the workspace's code (tests, conftest, whatever they import): it can change anything the
      // sandbox can, so neither read-only nor idempotent for a client that auto-approves those.
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    },
    async (args, ctx) => {
      const { sandbox, task } = deps;
      const paths = args.paths && args.paths.length > 0 ? args.paths : task.spec.test_dirs;
      const badPath = firstBadTestPath("pytest_run", paths, sandbox.repoDir);
      if (badPath) return errorResult(badPath);
      if (args.k !== undefined && args.k.startsWith("-")) return errorResult("pytest_run: k must be a -k expression, not an option (it starts with '-')");
      const env = modeEnv(task, args.mode);
      if (!env.ok) return errorResult(`pytest_run: ${env.error}`);
      const ranks = args.ranks ?? task.spec.ranks;
      const outDir = newResultsDir("run");
      const started = Date.now();
      const run = await runRanks(sandbox, {
        ranks,
        pytestArgs: [...paths, ...(args.k !== undefined ? ["-k", args.k] : []), "-p", "no:cacheprovider"],
        outDir,
        perTestTimeoutSec: args.timeout_sec ?? task.spec.timeout_sec,
        runTimeoutSec: task.spec.run_timeout_sec,
        env: { ...env.env, PYTHONDONTWRITEBYTECODE: "1" },
        signal: ctx.signal,
        onProgress: (done, total) => ctx.progress(done, total, `${done}/${total} tests done`),
      });
      const durationMs = Date.now() - started;
      const resultsDir = run.sandboxOutDir;
      // launcher_s: the launcher's own wall time (its bundle), so the server's overhead around it can be told apart.
      const trace = { exit_code: run.exec.exitCode, ranks, mode: env.mode, status: run.launch?.status ?? "harness_error", tests: run.cases.length, launcher_s: run.launch?.duration_s ?? null };
      if (run.harnessError) {
        return { ...errorResult(`pytest_run: the launcher could not run the tests (not a test failure): ${run.harnessError}\nper-rank logs: ${resultsDir}`), trace };
      }
      if (run.lostRecords) {
        return {
          ...errorResult(
            `pytest_run: the run's results were lost: ${run.lostRecords}. Something in the session (a test, a conftest, the code under test) killed or disturbed the rank launcher; its per-rank logs are in ${resultsDir}`,
          ),
          trace: { ...trace, status: "records_lost" },
        };
      }
      const events = run.launch?.events ?? [];
      const tests = orderForReport(run.cases.map(toTestResult));
      const summary = summarize(run.cases, events);
      const collectionErrors = collectionErrorsOf(run);
      const status = run.launch?.status ?? "harness_error";
      const hangs = events.filter((e) => e.kind === "hang").map((e) => `${e.test ?? "?"} (rank ${e.rank})`);
      const verdict =
        collectionErrors.length > 0
          ? `BLOCKED: ${collectionErrors.length} collection error(s); run pytest_collect and fix them first.`
          : status === "run_timeout"
            ? `The run exceeded the task's run limit (${task.spec.run_timeout_sec} s); ${summary.passed}/${summary.total} passed before it was stopped.`
            : summary.total === 0
              ? "No test ran: check paths / k (pytest_collect lists the ids)."
              : `${summary.passed}/${summary.total} passed on ${ranks} rank(s) (mode ${env.mode})` +
                (summary.failed + summary.error > 0 ? `; ${summary.failed} failed, ${summary.error} errors` : "") +
                (hangs.length > 0 ? `; HANG: ${hangs.join(", ")}` : "") +
                (summary.skipped > 0 ? `; ${summary.skipped} skipped` : "");
      const out: z.infer<typeof PytestRunOutput> = {
        status,
        verdict,
        ranks,
        mode: env.mode,
        summary,
        tests: tests.slice(0, MAX_TESTS),
        tests_truncated: tests.length > MAX_TESTS,
        events: toEvents(events),
        collection_errors: collectionErrors,
        results_dir: resultsDir,
        duration_ms: durationMs,
      };
      const lines = [verdict];
      for (const t of tests.slice(0, 100)) {
        lines.push(`${t.outcome.toUpperCase()} ${t.id}${t.reason ? ` [${t.reason}]` : ""} (${t.time_sec.toFixed(2)} s)`);
        const f = t.failures[0];
        if (f) lines.push(`  rank ${f.rank}: ${(f.excerpt || f.message).split("\n").slice(-12).join("\n  ")}${t.failures.length > 1 ? `\n  (+${t.failures.length - 1} other rank(s); see structured content)` : ""}`);
      }
      for (const c of collectionErrors) lines.push(`collection error: ${c}`);
      const text = lines.join("\n");
      const failedToRun = collectionErrors.length > 0 || status === "run_timeout";
      return failedToRun ? { ...errorResult(text, out), trace } : { ...okResult(out, text), trace };
    },
  );
}
