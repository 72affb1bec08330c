import { createHash, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from "node:http";
import { isIP, type AddressInfo } from "node:net";
import { join } from "node:path";
import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import type { Logger } from "../../lib/logger.js";
import { createServer } from "../create-server.js";
import { SessionEventStore, type EventStoreLimits } from "./event-store.js";
import { InFlightToolCalls } from "../in-flight.js";
import { startSession, type Session, type SessionOptions, type StartedSession } from "../session.js";

/** The one MCP endpoint. */
export const MCP_PATH = "/mcp";
export const TOKEN_ENV = "INFRADEV_HTTP_TOKEN";
/** The generated token's file inside runs/<run-id>/ (mode 0600; runs/ is hidden from the sandbox). */
export const TOKEN_FILE_NAME = "http-token";
const MIN_TOKEN_CHARS = 16;
/** How long shutdown waits for tool calls whose commands it cancelled to answer (as on stdio). */
const SETTLE_MS = 3_000;

/**
 * The host to listen on, when it is a loopback name or address; anything else is refused. The
 * security standard says the HTTP transport is reachable from this machine only: a non-loopback
 * address would put a shell on the node one leaked token away from the network.
 */
export function loopbackListenHost(host: string): string {
  const h = host.trim().replace(/^\[(.*)\]$/, "$1").toLowerCase();
  if (h === "localhost" || h === "::1" || (isIP(h) === 4 && h.startsWith("127."))) return h;
  throw new Error(
    `--host ${host}: the HTTP transport binds to loopback only (127.0.0.1, ::1 or localhost); ` +
      "to reach it from elsewhere, forward the port (ssh -L) instead of binding a public address",
  );
}

function isLoopbackAddress(address: string): boolean {
  return address === "::1" || (isIP(address) === 4 && address.startsWith("127.")) || address.startsWith("::ffff:127.");
}

export type TokenSource = { kind: "generated" } | { kind: "env" } | { kind: "file"; path: string };

/** --token-file, else $INFRADEV_HTTP_TOKEN, else 32 random bytes (base64url). */
export function resolveHttpToken(opts: { tokenFile?: string; env?: string }): { token: string; source: TokenSource } {
  const check = (token: string, where: string): string => {
    if (token.length < MIN_TOKEN_CHARS || !/^[\x21-\x7e]+$/.test(token)) {
      throw new Error(`${where}: the token must be at least ${MIN_TOKEN_CHARS} visible ASCII characters, no spaces (got ${token.length} characters); or drop it and let serve generate one`);
    }
    return token;
  };
  if (opts.tokenFile !== undefined) {
    let text: string;
    try {
      text = readFileSync(opts.tokenFile, "utf8");
    } catch (e) {
      throw new Error(`--token-file ${opts.tokenFile}: cannot read it (${(e as NodeJS.ErrnoException).code ?? (e as Error).message})`);
    }
    return { token: check(text.trim(), `--token-file ${opts.tokenFile}`), source: { kind: "file", path: opts.tokenFile } };
  }
  if (opts.env !== undefined && opts.env !== "") return { token: check(opts.env, TOKEN_ENV), source: { kind: "env" } };
  return { token: randomBytes(32).toString("base64url"), source: { kind: "generated" } };
}

/** Writes the token readable by its owner only (a fresh 0600 file renamed over any old one). */
export function writeTokenFile(path: string, token: string): void {
  const tmp = `${path}.tmp${process.pid}`;
  writeFileSync(tmp, `${token}\n`, { mode: 0o600, flag: "wx" });
  renameSync(tmp, path);
}

const sha256 = (s: string) => createHash("sha256").update(s).digest();

/** Constant-time check of `Authorization: Bearer <token>`: both sides are hashed to equal length first. */
function bearerMatches(header: string | undefined, expectedDigest: Buffer): boolean {
  const m = /^Bearer +(\S+) *$/i.exec(header ?? "");
  const same = timingSafeEqual(sha256(m?.[1] ?? ""), expectedDigest);
  return m !== null && same;
}

/** The name in a Host header (`name[:port]`, `[v6][:port]`), lower-cased; null when it is anything else. */
function hostnameOf(hostHeader: string): string | null {
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::\d{1,5})?$/i.exec(hostHeader);
  return m ? m[1]!.toLowerCase() : null;
}

function sendError(res: ServerResponse, status: number, code: number, message: string, headers: Record<string, string> = {}): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify({ jsonrpc: "2.0", error: { code, message }, id: null }));
}

export interface HttpServerOptions {
  /** A loopback host (see loopbackListenHost). */
  host: string;
  /** 0 picks a free port. */
  port: number;
  token: string;
  /** One McpServer per MCP session; every one serves the same workspace (the same deps). */
  createMcpServer: () => McpServer;
  logger: Logger;
  /** Named in the 401 message, so a client's user knows where to look. */
  tokenHint?: string;
  /** What each MCP session keeps for resuming clients (default DEFAULT_EVENT_STORE_LIMITS). */
  eventStoreLimits?: EventStoreLimits;
  /** The error when the port is taken (default: names --port); `serve` without --port says to pass one to serve and connect. */
  portInUseMessage?: string;
}

export interface HttpServerHandle {
  url: string;
  /** The address and port the socket is bound to. */
  address: AddressInfo;
  /** MCP sessions open now. */
  sessionCount(): number;
  /** Resolves when no tool call is waiting for its answer, or after maxMs. */
  settled(maxMs: number): Promise<void>;
  /** Ends every MCP session and SSE stream, stops listening, drops the connections. Idempotent. */
  close(): Promise<void>;
}

interface McpSession {
  transport: StreamableHTTPServerTransport;
  server: McpServer;
}

/**
 * The Streamable HTTP transport on Node's http module, one endpoint (/mcp), stateful: each
 * `initialize` opens an MCP session (Mcp-Session-Id) with its own McpServer, so a client can drop
 * its connections and come back with the id, open the GET SSE stream, or DELETE the session. Every
 * request must carry the bearer token and a loopback Host (DNS rebinding), and a browser's Origin
 * must be this server's own.
 */
export async function startHttpServer(opts: HttpServerOptions): Promise<HttpServerHandle> {
  const log = opts.logger;
  const listenHost = loopbackListenHost(opts.host);
  const tokenDigest = sha256(opts.token);
  const sessions = new Map<string, McpSession>();
  const calls = new InFlightToolCalls();
  let allowedHostnames = new Set<string>();
  let allowedOrigins = new Set<string>();

  const newSession = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const server = opts.createMcpServer();
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      // A client that loses its connection mid-call resumes with Last-Event-ID instead of losing the reply.
      eventStore: new SessionEventStore(opts.eventStoreLimits),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, server });
        log.info({ session: id, sessions: sessions.size }, "MCP session opened");
      },
      onsessionclosed: (id) => log.info({ session: id }, "MCP session closed by the client (DELETE)"),
    });
    // connect() chains this after the server's own close handling.
    transport.onclose = () => {
      if (transport.sessionId !== undefined) sessions.delete(transport.sessionId);
    };
    transport.onerror = (e) => log.debug({ err: e.message, session: transport.sessionId }, "MCP transport error");
    await server.connect(transport);
    calls.track(transport);
    await transport.handleRequest(req, res);
    // Not an initialize (the transport answered 400): nothing to keep.
    if (transport.sessionId === undefined) await server.close().catch(() => undefined);
  };

  const route = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const hostname = hostnameOf(req.headers.host ?? "");
    if (hostname === null || !allowedHostnames.has(hostname)) {
      log.warn({ host: req.headers.host }, "request refused: Host is not this loopback server (DNS rebinding?)");
      return sendError(res, 403, -32000, `Forbidden: Host ${JSON.stringify(req.headers.host ?? "")} is not this server (use ${[...allowedHostnames].join(" or ")})`);
    }
    const origin = req.headers.origin;
    if (origin !== undefined && !allowedOrigins.has(origin)) {
      log.warn({ origin }, "request refused: foreign Origin");
      return sendError(res, 403, -32000, `Forbidden: Origin ${JSON.stringify(origin)} may not call this server`);
    }
    if (!bearerMatches(req.headers.authorization, tokenDigest)) {
      log.warn({ method: req.method, path: req.url, hadAuthorization: req.headers.authorization !== undefined }, "request refused: missing or wrong bearer token");
      const where = opts.tokenHint ? ` (${opts.tokenHint})` : "";
      return sendError(res, 401, -32001, `Unauthorized: send "Authorization: Bearer <token>"${where}`, { "www-authenticate": 'Bearer realm="infradev"' });
    }
    const path = (req.url ?? "/").split("?")[0];
    if (path !== MCP_PATH) return sendError(res, 404, -32000, `Not found: the MCP endpoint is ${MCP_PATH}`);
    const sessionId = req.headers["mcp-session-id"];
    if (typeof sessionId === "string") {
      const session = sessions.get(sessionId);
      if (!session) return sendError(res, 404, -32001, "Session not found: initialize a new session (the server may have restarted)");
      return session.transport.handleRequest(req, res);
    }
    if (req.method === "POST") return newSession(req, res);
    if (req.method === "GET" || req.method === "DELETE") return sendError(res, 400, -32000, "Bad Request: Mcp-Session-Id header is required");
    return sendError(res, 405, -32000, "Method not allowed", { allow: "GET, POST, DELETE" });
  };

  const httpServer = createHttpServer((req, res) => {
    route(req, res).catch((e: unknown) => {
      log.error({ err: (e as Error).stack ?? String(e) }, "HTTP request failed");
      sendError(res, 500, -32603, "Internal error");
    });
  });
  await new Promise<void>((resolve, reject) => {
    httpServer.once("error", (e: NodeJS.ErrnoException) =>
      reject(new Error(e.code === "EADDRINUSE" ? (opts.portInUseMessage ?? `--port ${opts.port}: already in use on ${listenHost}; pick another port, or 0 for a free one`) : `cannot listen on ${listenHost}:${opts.port}: ${e.message}`)),
    );
    httpServer.listen({ host: listenHost, port: opts.port, exclusive: true }, resolve);
  });
  const address = httpServer.address() as AddressInfo;
  if (!isLoopbackAddress(address.address)) {
    // `localhost` resolved to something else (a broken /etc/hosts): never serve there.
    httpServer.close();
    throw new Error(`--host ${opts.host} resolved to ${address.address}, which is not a loopback address; pass --host 127.0.0.1`);
  }
  const urlHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
  allowedHostnames = new Set([urlHost, "localhost"]);
  allowedOrigins = new Set([...allowedHostnames].map((h) => `http://${h}:${address.port}`));
  const url = `http://${urlHost}:${address.port}${MCP_PATH}`;

  let closing: Promise<void> | null = null;
  return {
    url,
    address,
    sessionCount: () => sessions.size,
    settled: (maxMs) => calls.settled(maxMs),
    close: () =>
      (closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => httpServer.close(() => resolve()));
        for (const { server } of [...sessions.values()]) await server.close().catch(() => undefined);
        httpServer.closeAllConnections();
        await stopped;
      })()),
  };
}

export interface ServeHttpOptions extends SessionOptions {
  host: string;
  port: number;
  /** The port was not asked for (`serve --http` without --port): a taken port says to pass --port to both serve and connect. */
  defaultPort?: boolean;
  tokenFile?: string;
  /** Put the token itself in the start-up line (for scripts that cannot read the token file). */
  printToken?: boolean;
}

/**
 * `infradev serve --http`: the same session as on stdio (one workspace for this process, trace,
 * patch.diff on SIGTERM / SIGINT / SIGHUP), served over Streamable HTTP on loopback. Prints one
 * line to stderr: the URL and where the token is (never the token, unless printToken).
 */
export async function serveHttp(opts: ServeHttpOptions): Promise<void> {
  const log = opts.logger;
  // Refuse a bad host or token before anything is created.
  loopbackListenHost(opts.host);
  const { token, source } = resolveHttpToken({ tokenFile: opts.tokenFile, env: process.env[TOKEN_ENV] });
  // Commands the server starts (the `none` sandbox inherits this environment) never see the token.
  delete process.env[TOKEN_ENV];
  if (source.kind === "file" && (statSync(source.path).mode & 0o077) !== 0) log.warn({ file: source.path }, "the token file is readable by other users; chmod 600 it");

  // Listen first: a taken port fails before a run is made. Requests wait for the session.
  let started: StartedSession | null = null;
  const tokenHint = () => {
    const runDir = built?.session.runDir;
    return source.kind === "generated" ? (runDir ? join(runDir, TOKEN_FILE_NAME) : `runs/<run-id>/${TOKEN_FILE_NAME}`) : source.kind === "env" ? `$${TOKEN_ENV}` : source.path;
  };
  let built: Session | null = null;
  const http = await startHttpServer({
    host: opts.host,
    port: opts.port,
    token,
    createMcpServer: () => {
      if (!started) throw new Error("the session is not started yet");
      return createServer(started.deps, { sandboxKind: opts.sandboxKind });
    },
    logger: log,
    get tokenHint() {
      return `the token is in ${tokenHint()} on the server's host`;
    },
    ...(opts.defaultPort ? { portInUseMessage: `port ${opts.port} is in use: pass --port N to both serve and connect` } : {}),
  });
  let session: Session;
  try {
    started = startSession(opts);
    session = built = await started.ready;
  } catch (e) {
    await http.close();
    throw e;
  }
  const tokenWhere = tokenHint();
  try {
    if (source.kind === "generated") writeTokenFile(join(session.session.runDir, TOKEN_FILE_NAME), token);
  } catch (e) {
    await session.finish("start failed");
    await http.close();
    throw e;
  }

  let stopping = false;
  const stop = async (reason: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ reason, run: session.session.runId }, "shutting down: writing patch.diff");
    const watchdog = setTimeout(() => {
      log.error("shutdown took longer than 30 s; exiting anyway");
      process.exit(1);
    }, 30_000);
    watchdog.unref();
    await session.finish(reason, { settled: () => http.settled(SETTLE_MS) });
    await http.close();
    log.info({ patch: session.session.patchPath }, "session ended");
    process.exit(0);
  };
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.on(sig, () => void stop(sig));

  log.info(
    { run: session.session.runId, workspace: session.session.paths.workspaceDir, sandbox: session.deps.sandbox.kind, resumed: session.resumed, url: http.url },
    `serving task ${session.deps.task.id} over HTTP (run ${session.session.runId})`,
  );
  const tokenText = opts.printToken ? `bearer token: ${token}` : `bearer token in ${tokenWhere}`;
  process.stderr.write(`infradev serve: MCP on ${http.url} (task ${session.deps.task.id}, run ${session.session.runId}); ${tokenText}\n`);
}
