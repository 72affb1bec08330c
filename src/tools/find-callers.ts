import { posix } from "node:path";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { errorResult, okResult } from "./support/result.js";

export const FindCallersInput = z.object({
  symbol: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$/, "a dotted Python name like pkg.mod.Class.method")
    .max(500)
    .describe("dotted name of a function, class or method: pkg.module.func, pkg.module.Class, pkg.module.Class.method"),
  max_results: z.number().int().min(1).max(2000).optional().describe("cap on call sites returned (default 200)"),
});

const Site = z.object({
  file: z.string(),
  line: z.number().int(),
  col: z.number().int(),
  text: z.string().describe("the line's text"),
  in_function: z.string().describe("the enclosing function or <module>"),
  match: z.enum(["exact", "probable", "name-only"]).describe("exact: resolved via imports/self; probable: receiver built from the class; name-only: same name, type unknown"),
  kind: z.enum(["call", "reference"]).describe("reference: used without being called (passed as a hook, stored)"),
});

export const FindCallersOutput = z.object({
  symbol: z.string(),
  kind: z.string().describe("function, class or method"),
  definition: z.object({ file: z.string(), line: z.number().int(), end_line: z.number().int() }).nullable(),
  callers: z.array(Site),
  count: z.number().int(),
  counts: z.object({ exact: z.number().int(), probable: z.number().int(), name_only: z.number().int() }),
  truncated: z.boolean(),
  files_scanned: z.number().int(),
  parse_errors: z.array(z.object({ file: z.string(), message: z.string() })),
  notes: z.array(z.string()),
});

type AnalysisOutput = Omit<z.infer<typeof FindCallersOutput>, "counts"> & { counts: Record<string, number>; error?: string };

export function registerFindCallersTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "find_callers",
      title: "Find every caller of a symbol",
      description:
        "Lists every call site (and non-call reference) of a function, class or method in the workspace, from Python's ast (nothing is " +
        "imported): file, line, the line's text, the enclosing function, and how sure the match is. Run it on everything you change, then " +
        "check each caller and the state it shares with the change.",
      input: FindCallersInput,
      output: FindCallersOutput,
      annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async (args, ctx) => {
      const { sandbox } = deps;
      const argv = [
        sandbox.python,
        posix.join(sandbox.pythonHelpersDir, "infradev_analysis.py"),
        "callers",
        "--root",
        sandbox.repoDir,
        "--symbol",
        args.symbol,
        "--max",
        String(args.max_results ?? 200),
      ];
      const res = await sandbox.exec(argv, { cwd: sandbox.repoDir, timeoutSec: 120, maxOutputBytes: 16 * 1024 * 1024, signal: ctx.signal });
      if (res.harnessError) return errorResult(`find_callers: the sandbox failed: ${res.harnessError}`);
      let parsed: AnalysisOutput;
      try {
        parsed = JSON.parse(res.stdout) as AnalysisOutput;
      } catch {
        return errorResult(`find_callers: the analysis failed (exit ${res.exitCode}${res.timedOut ? ", timed out" : ""}): ${res.stderr.trim().split("\n").slice(-4).join(" | ")}`);
      }
      if (parsed.error) return errorResult(`find_callers: ${parsed.error}`);
      const out: z.infer<typeof FindCallersOutput> = {
        symbol: parsed.symbol,
        kind: parsed.kind,
        definition: parsed.definition,
        callers: parsed.callers,
        count: parsed.count,
        counts: { exact: parsed.counts.exact ?? 0, probable: parsed.counts.probable ?? 0, name_only: parsed.counts["name-only"] ?? 0 },
        truncated: parsed.truncated,
        files_scanned: parsed.files_scanned,
        parse_errors: parsed.parse_errors,
        notes: parsed.notes,
      };
      const head = `${out.symbol} (${out.kind}${out.definition ? `, defined at ${out.definition.file}:${out.definition.line}` : ", definition not found"}): ` +
        `${out.count} site(s): ${out.counts.exact} exact, ${out.counts.probable} probable, ${out.counts.name_only} name-only`;
      const lines = [head, ...out.notes.map((n) => `note: ${n}`)];
      for (const c of out.callers.slice(0, 100)) lines.push(`${c.file}:${c.line} [${c.match}${c.kind === "reference" ? ", reference" : ""}] in ${c.in_function}: ${c.text}`);
      if (out.parse_errors.length) lines.push(`${out.parse_errors.length} file(s) did not parse: ${out.parse_errors.slice(0, 3).map((e) => `${e.file} (${e.message})`).join("; ")}`);
      return { ...okResult(out, lines.join("\n")), trace: { exit_code: res.exitCode, count: out.count } };
    },
  );
}
