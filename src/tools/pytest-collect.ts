import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { runRanks } from "../runner/ranks.js";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { errorResult, okResult } from "./support/result.js";
import { newResultsDir } from "./support/results-dir.js";
import { firstBadTestPath } from "./support/sandbox-paths.js";
import { modeEnv } from "./support/task-env.js";

const MAX_NODE_IDS = 200;
const COLLECT_TIMEOUT_SEC = 300;

export const PytestCollectInput = z.object({
  paths: z
    .array(z.string())
    .max(100)
    .optional()
    .describe("test files, folders or node ids relative to the workspace (default: the task's test dirs)"),
});

export const PytestCollectOutput = z.object({
  ok: z.boolean().describe("true when tests were collected without any collection error"),
  verdict: z.string().describe("one line: what to do next"),
  collected: z.number().int(),
  node_ids: z.array(z.string()).describe(`collected test ids (first ${MAX_NODE_IDS})`),
  node_ids_truncated: z.boolean(),
  errors: z
    .array(z.object({ file: z.string(), message: z.string().describe("the error itself (the last `E` line of pytest's report)"), detail: z.string().describe("pytest's whole report of it (traceback), capped") }))
    .describe("collection errors: the file and its error"),
  exit_code: z.number().int().nullable().describe("exit code of the collecting pytest process (5: nothing collected); null when it did not finish"),
  duration_ms: z.number(),
});

type CollectionError = z.infer<typeof PytestCollectOutput>["errors"][number];

/**
 * The one line that names a collection error, from pytest's report of it (`longreprtext`, as the
 * recording plugin stores it): the last `E   ` line (for a SyntaxError, with the file and line that
 * pytest puts in an earlier `E` line), else the last non-empty line.
 */
export function collectionErrorHeadline(longrepr: string): string {
  const lines = longrepr.split(/\r?\n/);
  const eLines = lines.filter((l) => l.startsWith("E ")).map((l) => l.replace(/^E\s+/, "").trimEnd());
  if (eLines.length > 0) {
    const last = eLines[eLines.length - 1]!;
    const where = eLines.find((l) => /^File ".*", line \d+/.test(l));
    return where && where !== last ? `${last} (${where.replace(/^File "([^"]*)", /, "$1, ")})` : last;
  }
  const nonEmpty = lines.map((l) => l.trim()).filter(Boolean);
  return nonEmpty[nonEmpty.length - 1] ?? "collection error (no message)";
}

/** A collection error as the launcher's bundle carries it (the plugin's record, capped by the launcher). */
function toCollectionError(raw: unknown): CollectionError {
  const e = (typeof raw === "object" && raw !== null ? raw : { message: String(raw) }) as { file?: unknown; nodeid?: unknown; message?: unknown };
  const detail = typeof e.message === "string" ? e.message : "";
  const file = typeof e.file === "string" && e.file ? e.file : typeof e.nodeid === "string" && e.nodeid ? e.nodeid : "(collection)";
  return { file, message: collectionErrorHeadline(detail), detail };
}

export function registerPytestCollectTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "pytest_collect",
      title: "Collect the tests (the gate)",
      description:
        "Collects the tests (`pytest --collect-only`) in one rank inside the sandbox (WORLD_SIZE 1) and returns the collected count, " +
        "node ids, and every collection error with its file, message and traceback, plus a one-line verdict. Run it first and after every edit: " +
        "an import error or a renamed test fails here in seconds instead of on every rank.",
      input: PytestCollectInput,
      output: PytestCollectOutput,
      // Runs the workspace's code (tests, conftest, whatever they import): it can change anything the
      // sandbox can, so neither read-only nor idempotent for a client that auto-approves those.
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    },
    async (args, ctx) => {
      const { sandbox, task } = deps;
      const paths = args.paths && args.paths.length > 0 ? args.paths : task.spec.test_dirs;
      const badPath = firstBadTestPath("pytest_collect", paths, sandbox.repoDir);
      if (badPath) return errorResult(badPath);
      const env = modeEnv(task, undefined);
      if (!env.ok) return errorResult(`pytest_collect: ${env.error}`);
      // One rank of the launcher with --collect-only: the node ids and collection errors come from
      // our recording plugin, in the launcher's result bundle on its stdout (contract A), not from
      // pytest's terminal text (which differs between pytest versions).
      const run = await runRanks(sandbox, {
        ranks: 1,
        pytestArgs: ["--collect-only", "-q", ...paths, "-p", "no:cacheprovider"],
        outDir: newResultsDir("collect"),
        perTestTimeoutSec: COLLECT_TIMEOUT_SEC,
        runTimeoutSec: COLLECT_TIMEOUT_SEC,
        env: { ...env.env, PYTHONDONTWRITEBYTECODE: "1" },
        removeOutDir: true,
        signal: ctx.signal,
      });
      const rank0 = run.integrity.find((r) => r.rank === 0);
      const exitCode = rank0 ? rank0.exit_code : null;
      const trace = { exit_code: exitCode, launcher_exit: run.exec.exitCode, status: run.launch?.status ?? (run.harnessError ? "harness_error" : "records_lost") };
      if (run.harnessError) return { ...errorResult(`pytest_collect: the sandbox failed: ${run.harnessError}`), trace };
      const launch = run.launch;
      if (!launch) {
        return {
          ...errorResult(`pytest_collect: the collection's results were lost: ${run.lostRecords ?? "no result bundle"}. Something imported at collection (a test, a conftest, the code under test) killed or disturbed the rank launcher.`),
          trace,
        };
      }
      const nodeIds = launch.collected;
      const errors = launch.collection_errors.map(toCollectionError);
      if (launch.status === "run_timeout" || launch.status === "hang") {
        errors.push({ file: paths.join(" "), message: `collection did not finish in ${COLLECT_TIMEOUT_SEC} s (an import that blocks? a process group waiting for peers?)`, detail: "" });
      } else if (launch.status === "launch_error" || launch.status === "crash" || launch.status === "interrupted") {
        // pytest refused to start or stopped (a path it cannot find, a bad option, a conftest crash): its own words.
        const why = typeof launch.error === "string" && launch.error ? launch.error : (run.lostRecords ?? `the collecting process ended with ${launch.status}`);
        errors.push({ file: "(pytest)", message: why, detail: run.logs.find((l) => l.name === "rank0.log")?.text ?? "" });
      } else if (errors.length === 0 && exitCode !== 0 && exitCode !== 5) {
        errors.push({ file: "(pytest)", message: `pytest exited with ${exitCode ?? "a signal"}`, detail: run.logs.find((l) => l.name === "rank0.log")?.text ?? "" });
      }
      const report = { collected: nodeIds.length, nodeIds, errors };
      const ok = report.errors.length === 0 && report.collected > 0;
      const verdict = ok
        ? `OK: ${report.collected} tests collected, no collection error; next run them (pytest_run, ranks: 1, then the task's ranks).`
        : report.errors.length > 0
          ? `BLOCKED: ${report.errors.length} collection error(s) (${report.collected} tests collected); fix ${report.errors[0]!.file}: ${report.errors[0]!.message.split("\n")[0]}`
          : `BLOCKED: no tests collected from ${paths.join(" ")}; check the paths and test names.`;
      const out: z.infer<typeof PytestCollectOutput> = {
        ok,
        verdict,
        collected: report.collected,
        node_ids: report.nodeIds.slice(0, MAX_NODE_IDS),
        node_ids_truncated: report.nodeIds.length > MAX_NODE_IDS,
        errors: report.errors,
        exit_code: exitCode,
        duration_ms: run.exec.durationMs,
      };
      const lines = [verdict, ...report.errors.map((e) => `  ${e.file}: ${e.message}`)];
      if (ok) lines.push(...out.node_ids.slice(0, 50).map((id) => `  ${id}`), ...(report.nodeIds.length > 50 ? [`  ... ${report.nodeIds.length - 50} more`] : []));
      const text = lines.join("\n");
      return ok ? { ...okResult(out, text), trace } : { ...errorResult(text, out), trace };
    },
  );
}
