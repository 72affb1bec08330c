/**
 * The STAND-IN model server: an OpenAI-compatible HTTP endpoint on 127.0.0.1 that plays a script
 * (script.ts) instead of thinking. It speaks the two wire formats our harnesses use — the Responses
 * API with SSE streaming (Codex, POST /v1/responses) and chat completions, streamed or not (OpenCode,
 * POST /v1/chat/completions). Nothing about it is a model: it exists so tests and demos can drive the
 * real harness binaries offline.
 *
 * Which step to play is read from the request's conversation, not from a counter: the number of tool
 * results plus the number of final texts it already holds. A harness re-prompted after an early
 * exit sends the same conversation plus a user turn, so the script continues where it stopped.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { StandinStep } from "./script.js";

/** One request the stand-in answered (kept for tests and the run's record). */
export interface StandinRequest {
  api: "responses" | "chat";
  /** The step index played (null: a request without tools, e.g. OpenCode's title request). */
  step: number | null;
  /** What it answered: `call <tool>` as the harness names it, `say`, or `text` (no tools offered). */
  answer: string;
  tools_offered: string[];
  usage: { input: number; cached_input: number; output: number; reasoning: number };
}

export interface StandinServer {
  /** Base URL for the harness's provider config (…/v1). */
  readonly url: string;
  readonly requests: StandinRequest[];
  close(): Promise<void>;
}

/** A plan position: the step to answer, after holding the response for `delayS` (sleep steps fold into the next one). */
interface Turn {
  delayS: number;
  step: Exclude<StandinStep, { sleep_s: number }> | null;
}

/**
 * `INFRADEV_STANDIN_THINK_S`: seconds the stand-in holds every scripted turn (not the title request), as a model's think time (default
 * 0). For benchmarks of campaign throughput: a real model's latency, not the grader's CPU, is what a
 * campaign mostly waits on, and an instant stand-in hides that.
 */
export function standinThinkS(env: NodeJS.ProcessEnv = process.env): number {
  const raw = env.INFRADEV_STANDIN_THINK_S;
  if (raw === undefined || raw === "") return 0;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < 0 || v > 3600) throw new Error(`INFRADEV_STANDIN_THINK_S must be a number of seconds from 0 to 3600 (got "${raw}")`);
  return v;
}

function turnsOf(steps: StandinStep[], thinkS = 0): Turn[] {
  const turns: Turn[] = [];
  let delay = thinkS;
  for (const s of steps) {
    if ("sleep_s" in s) delay += s.sleep_s;
    else {
      turns.push({ delayS: delay, step: s });
      delay = thinkS;
    }
  }
  turns.push({ delayS: delay, step: null }); // past the end: a closing text
  return turns;
}

/** A tool as the harness offers it: Codex groups MCP tools in a namespace, OpenCode prefixes `infradev_`. */
interface OfferedTool {
  namespace: string | null;
  name: string;
}

function offeredResponsesTools(tools: unknown): OfferedTool[] {
  const out: OfferedTool[] = [];
  for (const t of Array.isArray(tools) ? (tools as Array<Record<string, any>>) : []) {
    if (t.type === "namespace" && Array.isArray(t.tools)) for (const x of t.tools as Array<Record<string, any>>) out.push({ namespace: String(t.name), name: String(x.name) });
    else if (typeof t.name === "string") out.push({ namespace: null, name: t.name });
  }
  return out;
}

function offeredChatTools(tools: unknown): OfferedTool[] {
  return (Array.isArray(tools) ? (tools as Array<Record<string, any>>) : []).map((t) => ({ namespace: null, name: String(t.function?.name ?? t.name) }));
}

/** Our bare tool name → the harness's: a namespace holding it (infradev's first), else `infradev_<tool>`, else `…__<tool>`. */
export function mapTool(bare: string, offered: OfferedTool[]): OfferedTool | null {
  const ns = offered.filter((t) => t.namespace !== null && t.name === bare);
  return (
    ns.find((t) => t.namespace!.includes("infradev")) ??
    ns[0] ??
    offered.find((t) => t.namespace === null && t.name === `infradev_${bare}`) ??
    offered.find((t) => t.namespace === null && t.name.endsWith(`__${bare}`)) ??
    null
  );
}

const textOf = (content: unknown): string =>
  typeof content === "string" ? content : Array.isArray(content) ? content.map((c: any) => (typeof c?.text === "string" ? c.text : "")).join("") : "";

/** Position in the script: tool results + final texts the conversation holds. */
function responsesPosition(input: unknown): number {
  let n = 0;
  for (const item of Array.isArray(input) ? (input as Array<Record<string, any>>) : []) {
    if (item.type === "function_call_output" || item.type === "custom_tool_call_output") n++;
    else if (item.type === "message" && item.role === "assistant" && textOf(item.content).trim()) n++;
  }
  return n;
}

function chatPosition(messages: unknown): number {
  let n = 0;
  for (const m of Array.isArray(messages) ? (messages as Array<Record<string, any>>) : []) {
    if (m.role === "tool") n++;
    else if (m.role === "assistant" && !(Array.isArray(m.tool_calls) && m.tool_calls.length) && textOf(m.content).trim()) n++;
  }
  return n;
}

/** Non-zero usage derived from the request's size, so token accounting is checkable (and can fail). */
function usageFor(body: string, reply: string, position: number): StandinRequest["usage"] {
  const input = Math.max(1, Math.ceil(Buffer.byteLength(body) / 4));
  return { input, cached_input: position > 0 ? Math.floor(input / 2) : 0, output: 8 + Math.ceil(Buffer.byteLength(reply) / 4), reasoning: 3 };
}

type Answer = { kind: "call"; tool: OfferedTool; args: string } | { kind: "text"; text: string };

export interface StandinOptions {
  steps: StandinStep[];
  /** Called for every request answered (e.g. to log it). */
  onRequest?: (r: StandinRequest) => void;
}

/** Starts the stand-in on 127.0.0.1 (a free port). */
export async function startStandin(opts: StandinOptions): Promise<StandinServer> {
  const turns = turnsOf(opts.steps, standinThinkS());
  const requests: StandinRequest[] = [];
  let seq = 0;

  const decide = (offered: OfferedTool[], position: number): { answer: Answer; step: number | null; delayS: number; label: string } => {
    if (offered.length === 0) return { answer: { kind: "text", text: "infradev run (stand-in model)" }, step: null, delayS: 0, label: "text" };
    const idx = Math.min(position, turns.length - 1);
    const turn = turns[idx]!;
    const step = turn.step;
    if (step === null) return { answer: { kind: "text", text: "Done (stand-in model: end of script)." }, step: idx, delayS: turn.delayS, label: "say" };
    if ("say" in step) return { answer: { kind: "text", text: step.say }, step: idx, delayS: turn.delayS, label: "say" };
    const tool = mapTool(step.call, offered);
    if (!tool) return { answer: { kind: "text", text: `stand-in model: the harness offers no tool for "${step.call}"` }, step: idx, delayS: turn.delayS, label: `missing ${step.call}` };
    return { answer: { kind: "call", tool, args: JSON.stringify(step.args ?? {}) }, step: idx, delayS: turn.delayS, label: `call ${tool.namespace ? `${tool.namespace}.` : ""}${tool.name}` };
  };

  const hold = (res: ServerResponse, s: number): Promise<boolean> =>
    new Promise((resolveHold) => {
      if (s <= 0) return resolveHold(true);
      const timer = setTimeout(() => resolveHold(true), s * 1000);
      res.on("close", () => {
        clearTimeout(timer);
        resolveHold(false);
      });
    });

  const record = (r: StandinRequest) => {
    requests.push(r);
    opts.onRequest?.(r);
  };

  const responses = async (body: string, res: ServerResponse) => {
    const req = JSON.parse(body) as Record<string, any>;
    const offered = offeredResponsesTools(req.tools);
    const position = responsesPosition(req.input);
    const d = decide(offered, position);
    if (!(await hold(res, d.delayS))) return;
    const id = `resp_standin_${++seq}`;
    const item =
      d.answer.kind === "call"
        ? { type: "function_call", id: `fc_${seq}`, call_id: `call_standin_${seq}`, ...(d.answer.tool.namespace ? { namespace: d.answer.tool.namespace } : {}), name: d.answer.tool.name, arguments: d.answer.args, status: "completed" }
        : { type: "message", id: `msg_${seq}`, role: "assistant", status: "completed", content: [{ type: "output_text", text: d.answer.text, annotations: [] }] };
    const usage = usageFor(body, JSON.stringify(item), position);
    record({ api: "responses", step: d.step, answer: d.label, tools_offered: offered.map((t) => (t.namespace ? `${t.namespace}.${t.name}` : t.name)), usage });
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const ev = (type: string, data: Record<string, unknown>) => res.write(`event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`);
    ev("response.created", { response: { id, status: "in_progress", output: [] } });
    ev("response.output_item.added", { output_index: 0, item });
    ev("response.output_item.done", { output_index: 0, item });
    ev("response.completed", {
      response: {
        id,
        status: "completed",
        output: [item],
        usage: {
          input_tokens: usage.input,
          input_tokens_details: { cached_tokens: usage.cached_input },
          output_tokens: usage.output,
          output_tokens_details: { reasoning_tokens: usage.reasoning },
          total_tokens: usage.input + usage.output,
        },
      },
    });
    res.end();
  };

  const chat = async (body: string, res: ServerResponse) => {
    const req = JSON.parse(body) as Record<string, any>;
    const offered = offeredChatTools(req.tools);
    const position = chatPosition(req.messages);
    const d = decide(offered, position);
    if (!(await hold(res, d.delayS))) return;
    const id = `chatcmpl_standin_${++seq}`;
    const call = d.answer.kind === "call" ? { id: `call_standin_${seq}`, type: "function", function: { name: d.answer.tool.name, arguments: d.answer.args } } : null;
    const text = d.answer.kind === "text" ? d.answer.text : null;
    const u = usageFor(body, JSON.stringify(call ?? text), position);
    record({ api: "chat", step: d.step, answer: d.label, tools_offered: offered.map((t) => t.name), usage: u });
    const usage = {
      prompt_tokens: u.input,
      completion_tokens: u.output,
      total_tokens: u.input + u.output,
      prompt_tokens_details: { cached_tokens: u.cached_input },
      completion_tokens_details: { reasoning_tokens: u.reasoning },
    };
    const finish = call ? "tool_calls" : "stop";
    const base = { id, created: Math.floor(Date.now() / 1000), model: String(req.model ?? "standin") };
    if (!req.stream) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ...base, object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: text, ...(call ? { tool_calls: [call] } : {}) }, finish_reason: finish }], usage }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const chunk = (d2: Record<string, unknown>) => res.write(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", ...d2 })}\n\n`);
    chunk({ choices: [{ index: 0, delta: { role: "assistant", ...(text !== null ? { content: text } : { tool_calls: [{ index: 0, ...call }] }) }, finish_reason: null }] });
    chunk({ choices: [{ index: 0, delta: {}, finish_reason: finish }] });
    chunk({ choices: [], usage });
    res.write("data: [DONE]\n\n");
    res.end();
  };

  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const path = (req.url ?? "").split("?")[0]!;
      const handler = req.method === "POST" && path.endsWith("/responses") ? responses : req.method === "POST" && path.endsWith("/chat/completions") ? chat : null;
      if (!handler) {
        res.writeHead(404, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: `stand-in model: no ${req.method} ${path} (it serves POST /v1/responses and /v1/chat/completions)` } }));
        return;
      }
      handler(body, res).catch((e: unknown) => {
        if (!res.headersSent) res.writeHead(400, { "content-type": "application/json" });
        res.end(JSON.stringify({ error: { message: `stand-in model: ${(e as Error).message}` } }));
      });
    });
  });
  await new Promise<void>((ok, fail) => {
    server.once("error", fail);
    server.listen(0, "127.0.0.1", () => ok());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () =>
      new Promise<void>((ok) => {
        server.closeAllConnections(); // a held (slow) response must not keep the run alive
        server.close(() => ok());
      }),
  };
}
