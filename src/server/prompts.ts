import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { ToolDeps } from "../tools/index.js";
import { workflowRules } from "../tools/support/workflow.js";

export const TASK_PROMPT_URI = "infradev://task/prompt";
export const SKILL_URI = "infradev://skill/infra-dev";

function taskPromptText(deps: ToolDeps): string {
  const rules = workflowRules(deps.task).map((r, i) => `${i + 1}. ${r}`);
  return `${deps.task.prompt.trim()}\n\n## Workflow (infradev)\n\n${rules.join("\n")}\n`;
}

/** The task prompt and the skill, as MCP prompts (`task`, `infra_skill`) and resources. */
export function registerPromptsAndResources(server: McpServer, deps: ToolDeps): void {
  server.registerPrompt(
    "task",
    { title: `Task: ${deps.task.spec.title}`, description: `The prompt of task ${deps.task.id} followed by the workflow rules` },
    () => ({ description: `Task ${deps.task.id}`, messages: [{ role: "user", content: { type: "text", text: taskPromptText(deps) } }] }),
  );
  server.registerPrompt(
    "infra_skill",
    { title: "Infra-dev skill", description: deps.skill.description },
    () => ({ description: deps.skill.description, messages: [{ role: "user", content: { type: "text", text: deps.skill.text } }] }),
  );
  server.registerResource(
    "task-prompt",
    TASK_PROMPT_URI,
    { title: `Task prompt: ${deps.task.id}`, description: "The task's prompt (markdown), the agent's only description of the change", mimeType: "text/markdown" },
    (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/markdown", text: deps.task.prompt }] }),
  );
  server.registerResource(
    "infra-dev-skill",
    SKILL_URI,
    { title: "Infra-dev skill (SKILL.md)", description: deps.skill.description, mimeType: "text/markdown" },
    (uri) => ({ contents: [{ uri: uri.href, mimeType: "text/markdown", text: deps.skill.text }] }),
  );
}
