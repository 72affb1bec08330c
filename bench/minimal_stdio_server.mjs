/**
 * The reference for bench/initialize_latency.ts: the smallest useful stdio MCP server on the same SDK
 * as infradev (McpServer + StdioServerTransport, one tool with a zod schema). Plain JS so nothing
 * but node and the SDK is loaded.
 */
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const server = new McpServer({ name: "minimal", version: "0.0.0" }, { instructions: "a minimal server" });
server.registerTool("echo", { description: "echo the text", inputSchema: { text: z.string() } }, ({ text }) => ({ content: [{ type: "text", text }] }));
await server.connect(new StdioServerTransport());
process.stdin.on("end", () => process.exit(0));
