import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import type { RequestHandlerExtra } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { CallToolResult, ServerNotification, ServerRequest, ToolAnnotations } from "@modelcontextprotocol/sdk/types.js";
import type { z } from "zod";
import type { ToolDeps } from "./deps.js";
import { capText, errorResult } from "./result.js";

/** What a handler gets besides its arguments. */
export interface ToolContext {
  /** Aborted when the client cancels the request (or the session ends). */
  readonly signal: AbortSignal;
  /** Sends notifications/progress when the client asked for it (a progressToken); a no-op otherwise. */
  progress(done: number, total: number, message?: string): void;
}

/** A tool result plus fields for the trace line only (exit code, output sizes...). */
export type ToolOutcome = CallToolResult & { trace?: Record<string, unknown> };

export interface ToolDefinition<I extends z.ZodObject, O extends z.ZodObject> {
  name: string;
  title: string;
  description: string;
  input: I;
  output: O;
  annotations: Required<Pick<ToolAnnotations, "readOnlyHint" | "destructiveHint" | "idempotentHint" | "openWorldHint">>;
}

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

/**
 * How long the result waits after the last progress notification was written. The SDK's client
 * drops a progress notification that it reads in the same chunk as the response (it dispatches
 * notifications a microtask late, after the response has retired the token:
 * modelcontextprotocol/typescript-sdk#2580), so a final "12/12" written right before the result
 * was often lost. A short gap puts the two in separate reads; it costs nothing next to a test run
 * and applies only to calls that sent progress.
 */
export const PROGRESS_SETTLE_MS = 40;

function resultText(result: CallToolResult): string {
  return result.content.flatMap((c) => (c.type === "text" ? [c.text] : [])).join("\n");
}

/**
 * What the trace keeps of a result's text: its head and tail (a log's end says what went wrong),
 * under the trace's own cap on one string (server/trace.ts), so a reader of trace.jsonl sees what
 * the agent saw, not only how big it was.
 */
export const TRACE_RESULT_CHARS = 3_800;

/**
 * The one wrapper every tool goes through: logs start / finish / duration, appends the call to the
 * trace, turns a thrown error into an `isError` result that names the tool, and wires progress and
 * cancellation from the MCP request into the handler's context.
 */
export function registerTool<I extends z.ZodObject, O extends z.ZodObject>(
  server: McpServer,
  deps: ToolDeps,
  def: ToolDefinition<I, O>,
  handler: (args: z.infer<I>, ctx: ToolContext) => Promise<ToolOutcome>,
): void {
  const callback = async (args: z.infer<I>, extra: Extra): Promise<CallToolResult> => {
    if (deps.ready) {
      // The server answered `initialize` before the workspace and sandbox existed: wait for them.
      try {
        await deps.ready;
      } catch (e) {
        deps.logger.error({ tool: def.name, err: e instanceof Error ? e.message : String(e) }, "tool refused: the session could not start");
        return errorResult(`${def.name} failed: the session could not start, so no tool can run (restart the server once this is fixed): ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    const started = Date.now();
    const log = deps.logger.child({ tool: def.name, request: String(extra.requestId) });
    log.info({ args }, "tool start");
    const progressToken = extra._meta?.progressToken;
    const pendingProgress: Promise<void>[] = [];
    let lastProgressAt = 0;
    const ctx: ToolContext = {
      signal: extra.signal,
      progress(done, total, message) {
        if (progressToken === undefined) return;
        lastProgressAt = Date.now();
        pendingProgress.push(
          extra
            .sendNotification({ method: "notifications/progress", params: { progressToken, progress: done, total, ...(message ? { message } : {}) } })
            .catch((e: unknown) => log.debug({ err: String(e) }, "progress notification not sent")),
        );
      },
    };
    let outcome: ToolOutcome;
    try {
      outcome = await handler(args, ctx);
    } catch (e) {
      log.error({ err: e instanceof Error ? e.stack : String(e) }, "tool failed");
      outcome = errorResult(`${def.name} failed: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (pendingProgress.length > 0) {
      // Every notification is on the wire before the result, and not in the same read (see above).
      await Promise.all(pendingProgress);
      const wait = lastProgressAt + PROGRESS_SETTLE_MS - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    const { trace: traceExtra, ...result } = outcome;
    const durationMs = Date.now() - started;
    const isError = result.isError === true;
    log.info({ duration_ms: durationMs, is_error: isError }, "tool finish");
    const text = resultText(result);
    const capped = capText(text, TRACE_RESULT_CHARS);
    try {
      deps.trace.append({
        ts: new Date(started).toISOString(),
        tool: def.name,
        args,
        duration_ms: durationMs,
        is_error: isError,
        result_text_bytes: Buffer.byteLength(text),
        result: capped.text,
        ...(capped.truncated ? { result_truncated: true } : {}),
        ...(traceExtra ?? {}),
      });
    } catch (e) {
      log.error({ err: String(e) }, "trace append failed");
    }
    return result;
  };
  server.registerTool(
    def.name,
    { title: def.title, description: def.description, inputSchema: def.input, outputSchema: def.output, annotations: { title: def.title, ...def.annotations } },
    // The SDK's callback type is generic over its own schema helpers; the zod object is the same one.
    callback as unknown as Parameters<McpServer["registerTool"]>[2],
  );
}
