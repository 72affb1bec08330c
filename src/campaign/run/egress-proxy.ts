/**
 * The one way out of a `run --sandbox docker` container: the model endpoint.
 *
 * The container has no network at all (`--network none`: loopback only). Its harness talks plain
 * HTTP to a relay on the container's own loopback (`relay`, this file run as a script inside the
 * container), which passes each connection through a unix socket, bind-mounted from the host, to the
 * egress proxy in the `run` process (`startEgressProxy`). The proxy is an HTTP reverse proxy with one
 * fixed target: every request goes to the provider URL's scheme://host:port and nowhere else, so
 * neither an address nor a Host header chosen in the container can reach another machine or port.
 * TLS to an https provider is made by the proxy (the container sees only http on its loopback).
 *
 * Why not an `--internal` docker network with the proxy on its gateway: the gateway is a host
 * address, so every host port listening on 0.0.0.0 would be reachable from the container too.
 */
import { request as httpRequest, createServer, type IncomingMessage, type Server } from "node:http";
import { request as httpsRequest } from "node:https";
import { connect, createServer as createTcpServer } from "node:net";
import { fileURLToPath } from "node:url";

/** Headers that belong to one hop (RFC 9110 §7.6.1); not passed on. */
const HOP_HEADERS = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"]);

export interface EgressRequest {
  at: string;
  method: string;
  path: string;
  status: number | null;
  error: string | null;
}

export interface EgressProxy {
  readonly socketPath: string;
  readonly target: URL;
  readonly requests: EgressRequest[];
  close(): Promise<void>;
}

/** Listens on `socketPath` and forwards every HTTP request to `target`'s origin (path kept as sent). */
export async function startEgressProxy(opts: { socketPath: string; target: string; onRequest?: (r: EgressRequest) => void }): Promise<EgressProxy> {
  const target = new URL(opts.target);
  if (target.protocol !== "http:" && target.protocol !== "https:") throw new Error(`egress proxy: the provider URL must be http(s), got ${opts.target}`);
  const requests: EgressRequest[] = [];
  const send = target.protocol === "https:" ? httpsRequest : httpRequest;
  const port = target.port ? Number(target.port) : target.protocol === "https:" ? 443 : 80;
  const record = (r: EgressRequest) => {
    requests.push(r);
    opts.onRequest?.(r);
  };
  const server: Server = createServer((req: IncomingMessage, res) => {
    const path = req.url && req.url.startsWith("/") ? req.url : "/";
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && !HOP_HEADERS.has(k)) headers[k] = v;
    headers.host = target.host;
    const at = new Date().toISOString();
    const up = send({ host: target.hostname, port, method: req.method, path, headers, servername: target.hostname }, (upRes) => {
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(upRes.headers)) if (v !== undefined && !HOP_HEADERS.has(k)) out[k] = v;
      res.writeHead(upRes.statusCode ?? 502, out);
      // Streamed as it comes: the Responses API and chat completions answer with server-sent events.
      upRes.pipe(res);
      record({ at, method: req.method ?? "?", path, status: upRes.statusCode ?? null, error: null });
    });
    up.on("error", (e) => {
      record({ at, method: req.method ?? "?", path, status: null, error: e.message });
      if (!res.headersSent) res.writeHead(502, { "content-type": "text/plain" });
      res.end(`infradev egress proxy: the model endpoint ${target.origin} did not answer: ${e.message}\n`);
    });
    req.on("aborted", () => up.destroy());
    res.on("close", () => up.destroy());
    req.pipe(up);
  });
  await new Promise<void>((res, rej) => {
    server.once("error", rej);
    server.listen(opts.socketPath, () => res());
  });
  return {
    socketPath: opts.socketPath,
    target,
    requests,
    close: () =>
      new Promise<void>((res) => {
        server.closeAllConnections();
        server.close(() => res());
      }),
  };
}

/** Inside the container: 127.0.0.1:`port` → the unix socket, byte for byte, one socket per connection. */
export function relay(socketPath: string, port: number): void {
  const server = createTcpServer((client) => {
    const up = connect(socketPath);
    client.pipe(up).pipe(client);
    const end = () => {
      client.destroy();
      up.destroy();
    };
    client.on("error", end);
    up.on("error", end);
    client.on("close", end);
    up.on("close", end);
  });
  server.listen(port, "127.0.0.1");
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1] && process.argv[2] === "relay") {
  const [socketPath, port] = [process.argv[3], Number(process.argv[4])];
  if (!socketPath || !Number.isInteger(port) || port <= 0) {
    process.stderr.write("usage: egress-proxy.js relay <unix socket> <port>\n");
    process.exit(2);
  }
  relay(socketPath, port);
}
