import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { registerFindCallersTool } from "./find-callers.js";
import { registerGetDiffTool } from "./get-diff.js";
import { registerGetSkillTool } from "./get-skill.js";
import { registerGetTaskTool } from "./get-task.js";
import { registerMeasureTool } from "./measure.js";
import { registerPytestCollectTool } from "./pytest-collect.js";
import { registerPytestRunTool } from "./pytest-run.js";
import { registerRunShellTool } from "./run-shell.js";
import { registerSubmitTool } from "./submit.js";
import type { ToolDeps } from "./support/deps.js";

export type { ToolDeps } from "./support/deps.js";

/** Every tool of the server, in the order an agent uses them. */
export function registerAllTools(server: McpServer, deps: ToolDeps): void {
  registerGetTaskTool(server, deps);
  registerGetSkillTool(server, deps);
  registerRunShellTool(server, deps);
  registerPytestCollectTool(server, deps);
  registerPytestRunTool(server, deps);
  registerMeasureTool(server, deps);
  registerFindCallersTool(server, deps);
  registerGetDiffTool(server, deps);
  registerSubmitTool(server, deps);
}

export const TOOL_NAMES = [
  "get_task",
  "get_skill",
  "run_shell",
  "pytest_collect",
  "pytest_run",
  "measure",
  "find_callers",
  "get_diff",
  "submit",
] as const;
