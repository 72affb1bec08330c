import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { capText, errorResult, okResult } from "./support/result.js";
import { resolveInside } from "./support/sandbox-paths.js";

export const RUN_SHELL_DEFAULT_TIMEOUT_SEC = 120;
export const RUN_SHELL_MAX_TIMEOUT_SEC = 3600;
/** stdout + stderr kept in the result; the full log stays on disk. */
const MAX_OUTPUT_BYTES = 64 * 1024;
/** How much of each stream the text summary repeats (clients that only read text still see it). */
const TEXT_STREAM_CHARS = 12_000;

export const RunShellInput = z.object({
  command: z.string().min(1).max(100_000).describe("a bash command line, run with `bash -c` inside the sandbox"),
  cwd: z.string().optional().describe("working directory inside the sandbox, relative to the workspace or absolute (default: the workspace)"),
  timeout_sec: z
    .number()
    .int()
    .min(1)
    .max(RUN_SHELL_MAX_TIMEOUT_SEC)
    .optional()
    .describe(`wall-clock limit; on expiry the whole process tree is killed (default ${RUN_SHELL_DEFAULT_TIMEOUT_SEC})`),
});

export const RunShellOutput = z.object({
  exit_code: z.number().int().nullable().describe("null when killed by a signal"),
  signal: z.string().nullable(),
  timed_out: z.boolean(),
  cancelled: z.boolean(),
  stdout: z.string(),
  stderr: z.string(),
  truncated: z.boolean().describe("true when stdout/stderr were cut (head and tail kept); the log at log_path has more"),
  log_path: z.string().nullable().describe("the command's log (stdout and stderr), as the sandbox sees it (read-only, under /infradev/logs)"),
  log_truncated_bytes: z
    .number()
    .int()
    .min(0)
    .describe("bytes the stored log dropped: it keeps the head and the tail of the output (8 MiB each by default) with a marker line between; 0 when it holds all"),
  process_limit_hit: z.boolean().describe("true when the command reached the sandbox's process limit (forks were refused)"),
  duration_ms: z.number(),
  cwd: z.string(),
  isolated: z.boolean().describe("false only for the `none` sandbox: nothing is isolated"),
  warning: z.string().nullable().describe("a line from the sandbox to pass on (e.g. that nothing is isolated)"),
});

export function registerRunShellTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "run_shell",
      title: "Run a shell command in the sandbox",
      description:
        "Runs a bash command inside the task's sandbox (the workspace read-write, the system read-only, private /tmp, no network but loopback). " +
        "Use it to read and edit files, run python, git, pip-less scripts. Returns exit code, timed_out, stdout/stderr (capped: head and tail), " +
        "the full log's path and the duration. For tests prefer pytest_collect / pytest_run, for resources measure.",
      input: RunShellInput,
      output: RunShellOutput,
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    },
    async (args, ctx) => {
      const { sandbox, base } = deps;
      const roots = [sandbox.repoDir, ...(base ? [base.sandboxDir] : [])];
      const cwd = resolveInside(args.cwd ?? ".", sandbox.repoDir, roots);
      if (!cwd.ok) return errorResult(`run_shell: cwd: ${cwd.error}`);
      const timeoutSec = args.timeout_sec ?? RUN_SHELL_DEFAULT_TIMEOUT_SEC;
      const res = await sandbox.exec(["bash", "-c", args.command], { cwd: cwd.path, timeoutSec, maxOutputBytes: MAX_OUTPUT_BYTES, signal: ctx.signal });
      const trace = { exit_code: res.exitCode, timed_out: res.timedOut, cancelled: res.cancelled, stdout_bytes: Buffer.byteLength(res.stdout), stderr_bytes: Buffer.byteLength(res.stderr) };
      if (res.harnessError) return { ...errorResult(`run_shell: the sandbox failed (not your command): ${res.harnessError}`), trace };
      const logPath = res.sandboxLogPath ?? null;
      const logDropped = res.logTruncatedBytes ?? 0;
      const out: z.infer<typeof RunShellOutput> = {
        exit_code: res.exitCode,
        signal: res.signal,
        timed_out: res.timedOut,
        cancelled: res.cancelled,
        stdout: res.stdout,
        stderr: res.stderr,
        truncated: res.truncated,
        log_path: logPath,
        log_truncated_bytes: logDropped,
        process_limit_hit: res.pidsLimitHit === true,
        duration_ms: res.durationMs,
        cwd: cwd.path,
        isolated: res.isolated,
        warning: res.warning ?? null,
      };
      const head = res.timedOut
        ? `timed out after ${timeoutSec} s; the whole process tree was killed`
        : res.cancelled
          ? "cancelled; the whole process tree was killed"
          : `exit ${res.exitCode ?? `signal ${res.signal}`} in ${res.durationMs} ms`;
      const logNote = logDropped > 0 ? ` (output capped; the log at ${logPath} kept its head and tail, ${logDropped} bytes dropped between)` : res.truncated && logPath ? ` (output capped; full log: ${logPath})` : "";
      const parts = [`${head}${res.warning ? ` [${res.warning}]` : res.isolated ? "" : " [sandbox: none, NOT isolated]"}${logNote}`];
      if (res.stdout) parts.push(`--- stdout ---\n${capText(res.stdout, TEXT_STREAM_CHARS).text}`);
      if (res.stderr) parts.push(`--- stderr ---\n${capText(res.stderr, TEXT_STREAM_CHARS).text}`);
      const text = parts.join("\n");
      if (res.timedOut) return { ...errorResult(`${text}\nRaise timeout_sec (max ${RUN_SHELL_MAX_TIMEOUT_SEC}) or run less at once.`, out), trace };
      if (res.cancelled) return { ...errorResult(text, out), trace };
      return { ...okResult(out, text), trace };
    },
  );
}
