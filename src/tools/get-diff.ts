import { posix } from "node:path";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ToolDeps } from "./support/deps.js";
import { registerTool, type ToolContext } from "./support/register.js";
import { capText, okResult } from "./support/result.js";
import { workspaceDiff } from "./support/workspace-diff.js";

const DEFAULT_MAX_CHARS = 60_000;

export const GetDiffInput = z.object({
  max_chars: z.number().int().min(1000).max(2_000_000).optional().describe(`cap on the diff text returned (default ${DEFAULT_MAX_CHARS}; head and tail kept)`),
});

const Def = z.object({ file: z.string(), qualname: z.string(), kind: z.string(), line: z.number().int(), end_line: z.number().int() });

export const GetDiffOutput = z.object({
  base_commit: z.string(),
  files: z.array(z.object({ path: z.string(), added: z.number().int().nullable(), removed: z.number().int().nullable() })).describe("null counts: binary file"),
  files_changed: z.number().int(),
  lines_added: z.number().int(),
  lines_removed: z.number().int(),
  patch_bytes: z.number().int(),
  diff: z.string(),
  truncated: z.boolean(),
  changed_functions: z
    .object({ added: z.array(Def), changed: z.array(Def), removed: z.array(Def) })
    .nullable()
    .describe("functions / classes your patch adds, changes or removes (ast); run find_callers on the changed ones"),
});

async function changedFunctions(deps: ToolDeps, ctx: ToolContext): Promise<z.infer<typeof GetDiffOutput>["changed_functions"]> {
  const { sandbox, base } = deps;
  if (!base) return null;
  const argv = [sandbox.python, posix.join(sandbox.pythonHelpersDir, "infradev_analysis.py"), "changed", "--base", base.sandboxDir, "--root", sandbox.repoDir];
  const res = await sandbox.exec(argv, { cwd: sandbox.repoDir, timeoutSec: 120, maxOutputBytes: 16 * 1024 * 1024, signal: ctx.signal });
  try {
    const parsed = JSON.parse(res.stdout) as { added: z.infer<typeof Def>[]; changed: z.infer<typeof Def>[]; removed: z.infer<typeof Def>[] };
    const strip = (d: z.infer<typeof Def>) => ({ file: d.file, qualname: d.qualname, kind: d.kind, line: d.line, end_line: d.end_line });
    return { added: parsed.added.map(strip), changed: parsed.changed.map(strip), removed: parsed.removed.map(strip) };
  } catch {
    deps.logger.warn({ exit: res.exitCode, stderr: res.stderr.slice(-500) }, "changed-functions analysis failed");
    return null;
  }
}

export function registerGetDiffTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "get_diff",
      title: "Show the current patch",
      description:
        "The workspace's change against the base commit, untracked files included: files with lines added / removed, the functions and " +
        "classes it adds, changes or removes, and the unified diff (capped). This is exactly what submit will record.",
      input: GetDiffInput,
      output: GetDiffOutput,
      annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async (args, ctx) => {
      const diff = await workspaceDiff(deps.sandbox, deps.session.baseCommit, ctx.signal);
      const capped = capText(diff.patch, args.max_chars ?? DEFAULT_MAX_CHARS);
      const out: z.infer<typeof GetDiffOutput> = {
        base_commit: deps.session.baseCommit,
        files: diff.files,
        files_changed: diff.files_changed,
        lines_added: diff.lines_added,
        lines_removed: diff.lines_removed,
        patch_bytes: diff.patch_bytes,
        diff: capped.text,
        truncated: capped.truncated,
        changed_functions: diff.files_changed > 0 ? await changedFunctions(deps, ctx) : { added: [], changed: [], removed: [] },
      };
      const head =
        diff.files_changed === 0
          ? "no change against base yet"
          : `${diff.files_changed} file(s), +${diff.lines_added} -${diff.lines_removed}: ${diff.files.map((f) => `${f.path} (+${f.added ?? "bin"} -${f.removed ?? "bin"})`).join(", ")}`;
      const fns = out.changed_functions;
      const fnLine = fns && diff.files_changed > 0
        ? `functions: added ${fns.added.map((d) => d.qualname).join(", ") || "-"}; changed ${fns.changed.map((d) => d.qualname).join(", ") || "-"}; removed ${fns.removed.map((d) => d.qualname).join(", ") || "-"}`
        : null;
      const text = [head, ...(fnLine ? [fnLine] : []), ...(capped.text ? ["", capped.text] : [])].join("\n");
      return { ...okResult(out, text), trace: { files_changed: diff.files_changed, patch_bytes: diff.patch_bytes } };
    },
  );
}
