import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";

/**
 * The tool calls received and not yet answered (or cancelled by the client), over every transport
 * it tracks, through the transports' public hooks (set by `connect()`). Shutdown cancels their
 * commands by closing the sandbox, then waits for them, so their trace lines come before session_end.
 */
export class InFlightToolCalls {
  private readonly open = new Set<string>();
  private wake: (() => void) | null = null;

  /** Wraps the hooks connect() set; `send` keeps its options (over HTTP they route a reply to its SSE stream). */
  track(transport: Transport): void {
    const key = (id: unknown) => `${transport.sessionId ?? ""}\0${String(id)}`;
    const deliver = transport.onmessage;
    transport.onmessage = (msg, extra) => {
      if ("method" in msg && msg.method === "tools/call" && "id" in msg) this.open.add(key(msg.id));
      else if ("method" in msg && msg.method === "notifications/cancelled") this.done(key((msg.params as { requestId?: unknown } | undefined)?.requestId));
      deliver?.(msg, extra);
    };
    const send = transport.send.bind(transport);
    transport.send = (msg: JSONRPCMessage, options) => {
      if ("id" in msg && !("method" in msg)) this.done(key(msg.id));
      return send(msg, options);
    };
  }

  private done(k: string): void {
    if (this.open.delete(k) && this.open.size === 0) this.wake?.();
  }

  /** Resolves when no tracked call is waiting for its answer, or after maxMs. */
  settled(maxMs: number): Promise<void> {
    if (this.open.size === 0) return Promise.resolve();
    return new Promise<void>((res) => {
      const timer = setTimeout(res, maxMs);
      this.wake = () => {
        clearTimeout(timer);
        res();
      };
    });
  }
}
