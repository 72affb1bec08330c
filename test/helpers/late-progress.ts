import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { Progress } from "@modelcontextprotocol/sdk/types.js";

/**
 * The SDK's client dispatches a notification a microtask after reading it, so a progress
 * notification read in the same chunk as its response finds the token already retired and is
 * reported through `onerror` ("unknown token") instead of reaching `onprogress`
 * (modelcontextprotocol/typescript-sdk#2580). The server did send it before the result; this
 * collects such notifications so a test can count them as heard. Returns the live list.
 */
export function captureLateProgress(client: Client): Progress[] {
  const late: Progress[] = [];
  const previous = client.onerror;
  client.onerror = (e: Error) => {
    const m = /progress notification for an unknown token: (\{.*\})$/s.exec(e.message);
    if (m) late.push(JSON.parse(m[1]!).params as Progress);
    else previous?.(e);
  };
  return late;
}
