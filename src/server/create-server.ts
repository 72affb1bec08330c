import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { registerAllTools, type ToolDeps } from "../tools/index.js";
import { serverInstructions } from "./instructions.js";
import { registerPromptsAndResources } from "./prompts.js";

export const SERVER_NAME = "infradev";
export const SERVER_VERSION = "0.1.0";

export type ServerDeps = ToolDeps;

/**
 * The MCP server for one task session. Every dependency is an argument; nothing is global. With deps
 * still being built (`deps.ready`), pass the sandbox kind: the instructions name it.
 */
export function createServer(deps: ServerDeps, opts: { sandboxKind?: string } = {}): McpServer {
  const server = new McpServer(
    { name: SERVER_NAME, version: SERVER_VERSION, title: "InfraDev" },
    {
      instructions: serverInstructions(deps.task, opts.sandboxKind ?? deps.sandbox.kind),
      capabilities: { tools: {}, prompts: {}, resources: {}, logging: {} },
    },
  );
  registerAllTools(server, deps);
  registerPromptsAndResources(server, deps);
  return server;
}
