import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { okResult } from "./support/result.js";
import { defaultMode } from "./support/task-env.js";
import { interfaceContract, workflowRules } from "./support/workflow.js";

export const GetTaskInput = z.object({});

export const GetTaskOutput = z.object({
  task_id: z.string(),
  title: z.string(),
  category: z.string(),
  type: z.string(),
  prompt: z.string().describe("the task prompt (markdown): the only description of the change"),
  interface_contract: z.string().nullable().describe("the prompt's interface-contract section, when it has one"),
  ranks: z.number().int().describe("ranks the task's tests run on (pytest_run's default)"),
  modes: z.array(z.object({ name: z.string(), env: z.record(z.string(), z.string()) })).describe("execution modes; rerun the tests under each"),
  default_mode: z.string(),
  timeout_sec: z.number().describe("per-test wall-clock limit"),
  run_timeout_sec: z.number().describe("limit for one whole multi-rank run"),
  requires_gpu: z.boolean(),
  test_dirs: z.array(z.string()),
  workspace: z.string().describe("the repo as the sandbox sees it (run_shell's default cwd)"),
  base_checkout: z.string().nullable().describe("read-only pristine base checkout inside the sandbox, for comparisons"),
  sandbox: z.string().describe("sandbox backend: local (bubblewrap), docker, or none (NOT isolated)"),
  isolated: z.boolean(),
  workflow: z.array(z.string()).describe("the rules to follow, in order"),
  submitted: z.boolean(),
});

export function registerGetTaskTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "get_task",
      title: "Get the task",
      description:
        "Returns the task: its prompt (what to change and why), the interface contract the tests rely on, ranks, execution modes, " +
        "timeouts, where the workspace is, and the workflow rules. Call this first.",
      input: GetTaskInput,
      output: GetTaskOutput,
      annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async () => {
      const { task, sandbox, base, session } = deps;
      const spec = task.spec;
      const out: z.infer<typeof GetTaskOutput> = {
        task_id: task.id,
        title: spec.title,
        category: spec.category,
        type: spec.type,
        prompt: task.prompt,
        interface_contract: interfaceContract(task.prompt),
        ranks: spec.ranks,
        modes: Object.entries(spec.modes).map(([name, env]) => ({ name, env })),
        default_mode: defaultMode(task),
        timeout_sec: spec.timeout_sec,
        run_timeout_sec: spec.run_timeout_sec,
        requires_gpu: spec.requires_gpu,
        test_dirs: spec.test_dirs,
        workspace: sandbox.repoDir,
        base_checkout: base?.sandboxDir ?? null,
        sandbox: sandbox.kind,
        isolated: sandbox.kind !== "none",
        workflow: workflowRules(task),
        submitted: session.submitted() !== null,
      };
      const text = [
        `# ${task.id}: ${spec.title} (${spec.category}/${spec.type}, ${spec.ranks} ranks, modes: ${Object.keys(spec.modes).join(", ")})`,
        `workspace: ${sandbox.repoDir}${base ? `   pristine base (read-only): ${base.sandboxDir}` : ""}   sandbox: ${sandbox.kind}${sandbox.kind === "none" ? " (NOT isolated)" : ""}`,
        "",
        task.prompt.trim(),
        "",
        "## Workflow",
        ...out.workflow.map((r, i) => `${i + 1}. ${r}`),
      ].join("\n");
      return okResult(out, text);
    },
  );
}
