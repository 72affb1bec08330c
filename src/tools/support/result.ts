import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";

/** A successful result: the structured content (validated against the tool's outputSchema) and a short text. */
export function okResult(structured: object, text: string): CallToolResult {
  return { content: [{ type: "text", text }], structuredContent: structured as Record<string, unknown> };
}

/**
 * An expected failure, reported as a result the agent can act on (never a protocol error). When the
 * failure still has the tool's usual shape (a command that timed out), pass it as `structured`: it
 * must then match the outputSchema, because clients validate it even on errors.
 */
export function errorResult(message: string, structured?: object): CallToolResult {
  return {
    content: [{ type: "text", text: message }],
    isError: true,
    ...(structured ? { structuredContent: structured as Record<string, unknown> } : {}),
  };
}

/** Keeps the head and the tail of a long text (the end of a log usually says what went wrong). */
export function capText(text: string, maxChars: number): { text: string; truncated: boolean } {
  if (text.length <= maxChars) return { text, truncated: false };
  const head = Math.floor(maxChars / 4);
  const tail = maxChars - head;
  return { text: `${text.slice(0, head)}\n[... ${text.length - maxChars} chars omitted ...]\n${text.slice(-tail)}`, truncated: true };
}
