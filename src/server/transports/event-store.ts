import type { EventId, EventStore, StreamId } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";

/** What one MCP session keeps for clients that reconnect: the newest events, up to both limits. */
export interface EventStoreLimits {
  maxEvents: number;
  maxBytes: number;
}

export const DEFAULT_EVENT_STORE_LIMITS: EventStoreLimits = { maxEvents: 2000, maxBytes: 32 * 1024 * 1024 };

interface StoredEvent {
  id: EventId;
  streamId: StreamId;
  message: JSONRPCMessage;
  bytes: number;
}

/**
 * Resumability for the Streamable HTTP transport, in memory, one store per MCP session. Every
 * message the server sends on an SSE stream is kept under an increasing event id; a client whose
 * connection dropped in the middle of a long call (a multi-rank pytest_run) comes back with
 * Last-Event-ID and gets what it missed on that stream, the call's result included, instead of
 * losing it. Bounded: the oldest events go first once either limit is passed; an id that has been
 * dropped is unknown (the SDK answers 400 and the client must start over).
 */
export class SessionEventStore implements EventStore {
  private readonly events: StoredEvent[] = [];
  private readonly index = new Map<EventId, StoredEvent>();
  private bytes = 0;
  private seq = 0;

  constructor(private readonly limits: EventStoreLimits = DEFAULT_EVENT_STORE_LIMITS) {}

  async storeEvent(streamId: StreamId, message: JSONRPCMessage): Promise<EventId> {
    const id = `${streamId}.${++this.seq}`;
    const event = { id, streamId, message, bytes: Buffer.byteLength(JSON.stringify(message)) };
    this.events.push(event);
    this.index.set(id, event);
    this.bytes += event.bytes;
    while (this.events.length > 1 && (this.events.length > this.limits.maxEvents || this.bytes > this.limits.maxBytes)) {
      const old = this.events.shift()!;
      this.index.delete(old.id);
      this.bytes -= old.bytes;
    }
    return id;
  }

  async getStreamIdForEventId(eventId: EventId): Promise<StreamId | undefined> {
    return this.index.get(eventId)?.streamId;
  }

  async replayEventsAfter(lastEventId: EventId, { send }: { send: (eventId: EventId, message: JSONRPCMessage) => Promise<void> }): Promise<StreamId> {
    const last = this.index.get(lastEventId);
    if (!last) throw new Error(`unknown or expired event id ${JSON.stringify(lastEventId)}`);
    // Walks the live list: an event stored while this replay awaits is replayed too (the stream is
    // registered for live sending only once the replay is done, so nothing goes out twice).
    let i = this.events.indexOf(last) + 1;
    while (i > 0 && i < this.events.length) {
      const e = this.events[i]!;
      // A priming event (an empty object) only carries an id: nothing to resend.
      if (e.streamId === last.streamId && Object.keys(e.message).length > 0) await send(e.id, e.message);
      i = this.events.indexOf(e) + 1;
    }
    return last.streamId;
  }

  /** Events held now (for tests and logs). */
  size(): number {
    return this.events.length;
  }
}
