import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import type { ToolDeps } from "./support/deps.js";
import { registerTool } from "./support/register.js";
import { okResult } from "./support/result.js";

export const GetSkillInput = z.object({});

export const GetSkillOutput = z.object({
  name: z.string(),
  description: z.string(),
  text: z.string().describe("the whole SKILL.md"),
});

export function registerGetSkillTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "get_skill",
      title: "Get the infra skill",
      description:
        "Returns the infra-dev skill: how to change distributed training / inference code so it is numerically right on every rank, " +
        "really saves the resource it promises, and survives every execution mode, as a workflow with this server's tools.",
      input: GetSkillInput,
      output: GetSkillOutput,
      annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    },
    async () => {
      const { name, description, text } = deps.skill;
      return okResult({ name, description, text }, text);
    },
  );
}
