import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { okResult } from "./support/result.js";
import { workspaceDiff } from "./support/workspace-diff.js";

export const SubmitInput = z.object({
  note: z.string().max(4000).optional().describe("a short note for the reviewer: what you changed and how you checked it"),
});

export const SubmitOutput = z.object({
  submitted: z.boolean(),
  submitted_at: z.string(),
  run_id: z.string(),
  patch_file: z.string().describe("where the patch was recorded (outside the sandbox)"),
  files_changed: z.number().int(),
  lines_added: z.number().int(),
  lines_removed: z.number().int(),
  patch_bytes: z.number().int(),
  empty: z.boolean().describe("true when the workspace has no change against base (an empty patch scores 0)"),
  note: z.string().nullable(),
});

export function registerSubmitTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "submit",
      title: "Submit the patch",
      description:
        "Records the workspace's current patch against base as the submission (runs/<run-id>/patch.diff) and marks the session submitted. " +
        "Calling it again replaces the submission with the then-current patch.",
      input: SubmitInput,
      output: SubmitOutput,
      annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: false },
    },
    async (args, ctx) => {
      const diff = await workspaceDiff(deps.sandbox, deps.session.baseCommit, ctx.signal);
      const note = args.note ?? null;
      const { at } = deps.session.recordPatch(diff.patch, { note });
      const out: z.infer<typeof SubmitOutput> = {
        submitted: true,
        submitted_at: at,
        run_id: deps.session.runId,
        patch_file: deps.session.patchPath,
        files_changed: diff.files_changed,
        lines_added: diff.lines_added,
        lines_removed: diff.lines_removed,
        patch_bytes: diff.patch_bytes,
        empty: diff.files_changed === 0,
        note,
      };
      const text = out.empty
        ? `submitted an EMPTY patch (no change against base) at ${at}; it scores 0. Edit the workspace and submit again.`
        : `submitted ${diff.files_changed} file(s), +${diff.lines_added} -${diff.lines_removed} (${diff.patch_bytes} bytes) at ${at} as run ${deps.session.runId}`;
      return { ...okResult(out, text), trace: { files_changed: diff.files_changed, patch_bytes: diff.patch_bytes } };
    },
  );
}
