import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { parseCollectOutput } from "./support/collect-parse.js";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { errorResult, okResult } from "./support/result.js";
import { firstBadTestPath } from "./support/sandbox-paths.js";
import { modeEnv, randomPort, singleProcessEnv } from "./support/task-env.js";

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
  errors: z.array(z.object({ file: z.string(), message: z.string() })).describe("collection errors: the file and its error"),
  exit_code: z.number().int().nullable(),
  duration_ms: z.number(),
});

export function registerPytestCollectTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "pytest_collect",
      title: "Collect the tests (the gate)",
      description:
        "Runs `pytest --collect-only -q` in one process inside the sandbox (no process group is joined) and returns the collected count, " +
        "node ids, and every collection error with its file and message, plus a one-line verdict. Run it first and after every edit: " +
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
      const res = await sandbox.exec([sandbox.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", ...paths], {
        cwd: sandbox.repoDir,
        env: { ...env.env, ...singleProcessEnv(randomPort()), PYTHONDONTWRITEBYTECODE: "1" },
        timeoutSec: COLLECT_TIMEOUT_SEC,
        maxOutputBytes: 1024 * 1024,
        signal: ctx.signal,
      });
      const trace = { exit_code: res.exitCode, timed_out: res.timedOut, stdout_bytes: Buffer.byteLength(res.stdout) };
      if (res.harnessError) return { ...errorResult(`pytest_collect: the sandbox failed: ${res.harnessError}`), trace };
      const report = parseCollectOutput(res.stdout, res.stderr);
      if (res.timedOut) report.errors.push({ file: paths.join(" "), message: `collection did not finish in ${COLLECT_TIMEOUT_SEC} s (an import that blocks? a process group waiting for peers?)` });
      if (report.errors.length === 0 && res.exitCode !== 0 && res.exitCode !== 5) {
        // pytest refused to start (bad option, conftest crash): its own words are the message.
        const tail = `${res.stderr}\n${res.stdout}`.trim().split("\n").slice(-6).join("\n");
        report.errors.push({ file: "(pytest)", message: tail || `pytest exited with ${res.exitCode}` });
      }
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
        exit_code: res.exitCode,
        duration_ms: res.durationMs,
      };
      const lines = [verdict, ...report.errors.map((e) => `  ${e.file}: ${e.message}`)];
      if (ok) lines.push(...out.node_ids.slice(0, 50).map((id) => `  ${id}`), ...(report.nodeIds.length > 50 ? [`  ... ${report.nodeIds.length - 50} more`] : []));
      const text = lines.join("\n");
      return ok ? { ...okResult(out, text), trace } : { ...errorResult(text, out), trace };
    },
  );
}
