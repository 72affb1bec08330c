/**
 * `infradev run --sandbox docker` with a REAL Docker engine and the REAL Codex CLI (0.169): the
 * harness, our server and the workspace in one container of the test image, the grader on the host.
 * The one stand-in is the model (the scripted stand-in, campaign/standin/): no model is reachable here.
 * Checked: a golden run submits, its patch is golden's change and grades resolved, and every model
 * request the stand-in served came through the egress proxy; while a run is live, the harness and the
 * server are processes of the container (docker top reads its cgroup), no mount holds the task folder,
 * nothing in the container's file system holds golden's or the probes' lines, the endpoint answers
 * from inside and nothing else does (1.1.1.1, a host port on 0.0.0.0 through the docker gateway); the
 * time limit ends the container; SIGTERM to `run` removes it.
 *
 * INFRADEV_REQUIRE_DOCKER=1 (CI) makes a missing engine a failure, not a skip.
 */
import { execFileSync, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { StandinRequest } from "../../src/campaign/standin/server.js";
import type { RunRecord } from "../../src/campaign/types.js";
import { packageRoot } from "../../src/lib/paths.js";
import { ensureBuilt } from "../helpers/backends.js";
import { TEST_IMAGE, dockerSuitePlan, ensureTestImage } from "../helpers/docker-image.js";
import { TEST_FIXTURES } from "../helpers/paths.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const TASK_DIR = join(FIXTURES, "tiny-mean");
const GOLDEN = join(TASK_DIR, "hidden", "golden.patch");
const plan = await dockerSuitePlan();
const tmp = mkdtempSync(join(tmpdir(), "infradev-run-docker-test-"));
const CAL = join(tmp, "cal");
let cli: string;
/** `run` processes a test started: a failed assertion must not leave one (and its container) behind. */
const children: ChildProcess[] = [];

function newest(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

const baseArgs = () => ["run", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--calibration-dir", CAL, "--agent", "codex", "--sandbox", "docker", "--image", TEST_IMAGE, "--host-system-mounts"];
const readJson = <T>(file: string): T => JSON.parse(readFileSync(file, "utf8")) as T;
const lines = (file: string) => (existsSync(file) ? readFileSync(file, "utf8").trim().split("\n").filter(Boolean) : []);
const docker = (args: string[]) => spawnSync("docker", args, { encoding: "utf8", timeout: 60_000 });
const containerGone = (name: string) => docker(["ps", "-a", "-q", "--filter", `name=^${name}$`]).stdout.trim() === "";

/** The repo's files after applying `patch` (null: none) to a fresh copy of the base snapshot. */
function treeAfter(patch: string | null): Record<string, string> {
  const dir = mkdtempSync(join(tmp, "tree-"));
  cpSync(join(TASK_DIR, "repo"), dir, { recursive: true });
  if (patch !== null && readFileSync(patch, "utf8").trim()) execFileSync("git", ["apply", patch], { cwd: dir });
  const files: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(r);
      else files[r] = readFileSync(join(dir, r), "utf8");
    }
  };
  walk("");
  return files;
}

/** Text of every file under `dir` (the package's public parts: the skill, the probe library). */
function textUnder(dir: string): string {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile())
    .map((e) => readFileSync(join(e.parentPath, e.name), "utf8"))
    .join("\n");
}

/**
 * Lines of golden's additions and of the probes that nothing public holds: not the pre-PR snapshot,
 * nor the skill and probe library this package ships (probes use that library's public API).
 */
function secretLines(): string[] {
  const publicText = [...Object.values(treeAfter(null)), textUnder(join(packageRoot(), "skills")), textUnder(join(packageRoot(), "python", "sandbox"))].join("\n");
  const probes = readdirSync(join(TASK_DIR, "hidden", "probes")).map((f) => readFileSync(join(TASK_DIR, "hidden", "probes", f), "utf8"));
  const golden = readFileSync(GOLDEN, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("+") && !l.startsWith("+++"))
    .map((l) => l.slice(1));
  return [...golden, ...probes.flatMap((p) => p.split("\n"))].map((l) => l.trim()).filter((l) => l.length >= 16 && !publicText.includes(l));
}

async function waitFor<T>(what: string, fn: () => T | null | undefined, timeoutMs: number): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** From inside the container: connect to each host:port; "open" or the error code. */
function probeFromInside(name: string, targets: Array<[string, number]>): Record<string, string> {
  const script = `const net=require("net");const t=${JSON.stringify(targets)};Promise.all(t.map(([h,p])=>new Promise(r=>{const s=net.connect({host:h,port:p});const k=setTimeout(()=>{s.destroy();r("timeout")},3000);s.on("connect",()=>{clearTimeout(k);s.destroy();r("open")});s.on("error",e=>{clearTimeout(k);r(e.code||e.message)})}))).then(v=>console.log(JSON.stringify(Object.fromEntries(t.map(([h,p],i)=>[h+":"+p,v[i]])))))`;
  const r = docker(["exec", name, process.execPath, "-e", script]);
  expect(r.status, r.stderr).toBe(0);
  return JSON.parse(r.stdout) as Record<string, string>;
}

describe.skipIf(!plan.run)("infradev run --sandbox docker (real engine, real Codex)", () => {
  let hostPort: Server;
  beforeAll(async () => {
    if (!plan.reachable) throw new Error(plan.whyNot);
    await ensureTestImage();
    cli = ensureBuilt();
    if (newest(join(packageRoot(), "src")) > statSync(cli).mtimeMs) execFileSync("npm", ["run", "--silent", "build"], { cwd: packageRoot(), stdio: "inherit" });
    // A host port open to every interface: the container must not reach it.
    hostPort = createServer((s) => s.end());
    await new Promise<void>((r) => hostPort.listen(0, "0.0.0.0", () => r()));
  }, 300_000);
  afterAll(async () => {
    // SIGTERM: run removes its container on the way out.
    await Promise.all(children.filter((c) => c.exitCode === null && c.signalCode === null).map((c) => new Promise((r) => (c.once("close", r), c.kill("SIGTERM")))));
    hostPort?.close();
    rmSync(tmp, { recursive: true, force: true });
  });

  it("codex + standin:golden: submitted, golden's change, resolved; every model request through the proxy; the container removed", () => {
    const d = join(tmp, "golden");
    const r = spawnSync(process.execPath, [cli, ...baseArgs(), "--model", "standin:golden", "--out", d, "--time-limit-min", "4"], { encoding: "utf8", timeout: 240_000 });
    expect(r.status, r.stderr).toBe(0);
    const rec = readJson<RunRecord>(join(d, "run.json"));
    expect(rec).toMatchObject({ exit_reason: "submitted", submitted: true, error: null, harness: "codex", harness_version: "0.169.0" });
    expect(treeAfter(join(d, "patch.diff"))).toEqual(treeAfter(GOLDEN));
    const grade = readJson<{ status: string; official: { resolved: boolean }; with_probes: { resolved: boolean } }>(join(d, "grade.json"));
    expect(grade.status).toBe("graded");
    expect(grade.with_probes.resolved).toBe(true);
    expect(rec.grade).toEqual({ status: "graded", file: "grade.json" });
    // The stand-in listens on the host's 127.0.0.1, which the container cannot reach: each request it
    // served was one the proxy forwarded from the container's relay.
    const served = lines(join(d, "standin-requests.jsonl")).map((l) => JSON.parse(l) as StandinRequest);
    const forwarded = lines(join(d, "egress.jsonl")).map((l) => JSON.parse(l) as { path: string; status: number });
    expect(served.length).toBeGreaterThanOrEqual(5);
    expect(forwarded).toHaveLength(served.length);
    expect(forwarded.every((f) => f.path === "/v1/responses" && f.status === 200)).toBe(true);
    const c = readJson<{ name: string; network: string; relay: string }>(join(d, "container.json"));
    expect(c.network).toBe("none");
    expect(c.relay).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
    expect(containerGone(c.name)).toBe(true);
  }, 240_000);

  it("while a run is live: harness and server inside, no task folder mounted, no hidden line in the container, only the endpoint reachable; the time limit ends the container", async () => {
    const d = join(tmp, "slow");
    const child = spawn(process.execPath, [cli, ...baseArgs(), "--model", "standin:slow", "--out", d, "--time-limit-min", "0.5", "--no-grade"], { stdio: ["ignore", "pipe", "pipe"] });
    children.push(child);
    let stderr = "";
    child.stderr.on("data", (b: Buffer) => (stderr += b.toString()));
    const ended = new Promise<number | null>((r) => child.once("close", (code) => r(code)));
    const c = await waitFor("container.json", () => (existsSync(join(d, "container.json")) ? readJson<{ name: string; relay: string }>(join(d, "container.json")) : null), 60_000);
    // The stand-in logs an answer once given; its slow script then holds the second one. Codex starts
    // its (required) MCP server before the first request, so both are up by then.
    await waitFor("the stand-in's first answer", () => lines(join(d, "standin-requests.jsonl")).length >= 1, 60_000);

    const top = docker(["top", c.name, "-eo", "pid,args"]);
    expect(top.status, top.stderr).toBe(0);
    const procs = top.stdout.split("\n").slice(1).filter(Boolean);
    expect(procs.some((p) => /codex/.test(p) && / exec /.test(p))).toBe(true);
    expect(procs.some((p) => /dist\/cli\/main\.js serve /.test(p) && /--sandbox none/.test(p))).toBe(true);
    const pids = procs.map((p) => Number(p.trim().split(/\s+/)[0]));

    const mounts = JSON.parse(docker(["inspect", c.name, "--format", "{{json .Mounts}}"]).stdout) as Array<{ Source: string; Destination: string }>;
    for (const m of mounts) {
      expect(TASK_DIR.startsWith(m.Source), `mount ${m.Source}`).toBe(false);
      expect(m.Source.startsWith(FIXTURES)).toBe(false);
      expect(m.Source).not.toMatch(/(^|\/)(hidden|tasks)(\/|$)/);
    }
    const secrets = secretLines();
    expect(secrets.length).toBeGreaterThan(5);
    // The host's /usr and /etc are the test image's system (a real image brings its own): not searched.
    const grep = docker(["exec", c.name, "grep", "-rlF", "--exclude-dir=proc", "--exclude-dir=sys", "--exclude-dir=dev", "--exclude-dir=usr", "--exclude-dir=etc", ...secrets.flatMap((s) => ["-e", s]), "/"]);
    expect(grep.stdout.trim()).toBe("");
    expect(grep.status).toBe(1);

    const gateways = networkInterfaces().docker0?.filter((a) => a.family === "IPv4").map((a) => a.address) ?? [];
    const relayPort = Number(new URL(c.relay).port);
    const port = (hostPort.address() as { port: number }).port;
    const reach = probeFromInside(c.name, [["127.0.0.1", relayPort], ["1.1.1.1", 443], ["127.0.0.1", port], ...gateways.map((g): [string, number] => [g, port])]);
    expect(reach[`127.0.0.1:${relayPort}`]).toBe("open");
    for (const [target, how] of Object.entries(reach)) if (target !== `127.0.0.1:${relayPort}`) expect(how, target).not.toBe("open");
    // The endpoint answers an HTTP request from inside (the stand-in's 404 for an unknown path).
    const http = docker(["exec", c.name, process.execPath, "-e", `fetch(${JSON.stringify(`${c.relay}/models`)}).then(r=>console.log(r.status),e=>console.log("error",e.cause?.code))`]);
    expect(http.stdout.trim()).toBe("404");

    expect(await ended, stderr).toBe(0);
    const rec = readJson<RunRecord>(join(d, "run.json"));
    expect(rec.exit_reason).toBe("time_limit");
    expect(rec.wall_s).toBeLessThan(90);
    expect(containerGone(c.name)).toBe(true);
    const alive = pids.filter((p) => {
      try {
        process.kill(p, 0);
        return true;
      } catch {
        return false;
      }
    });
    expect(alive).toEqual([]);
  }, 180_000);

  it("SIGTERM to run removes its container", async () => {
    const d = join(tmp, "sigterm");
    const child = spawn(process.execPath, [cli, ...baseArgs(), "--model", "standin:slow", "--out", d, "--time-limit-min", "5", "--no-grade"], { stdio: ["ignore", "ignore", "pipe"] });
    children.push(child);
    const ended = new Promise<number | null>((r) => child.once("close", (code, sig) => r(code ?? (sig ? 128 : null))));
    const c = await waitFor("container.json", () => (existsSync(join(d, "container.json")) ? readJson<{ name: string }>(join(d, "container.json")) : null), 60_000);
    await waitFor("the stand-in's first answer", () => lines(join(d, "standin-requests.jsonl")).length >= 1, 60_000);
    const top = docker(["top", c.name, "-eo", "pid,args"]).stdout;
    expect(top).toMatch(/codex/);
    const started = Date.now();
    child.kill("SIGTERM");
    expect(await ended).not.toBe(0);
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(containerGone(c.name)).toBe(true);
    expect(existsSync(join(d, "run.json"))).toBe(false);
  }, 120_000);

  it("usage errors: --network, and docker without an image", () => {
    const net = spawnSync(process.execPath, [cli, ...baseArgs(), "--model", "standin:golden", "--network", "bridge", "--out", join(tmp, "u1")], { encoding: "utf8" });
    expect(net.status).toBe(2);
    expect(net.stderr).toMatch(/--network does not apply to `infradev run`/);
    const args = baseArgs().filter((a) => a !== "--image" && a !== TEST_IMAGE);
    const noImage = spawnSync(process.execPath, [cli, ...args, "--model", "standin:golden", "--out", join(tmp, "u2")], { encoding: "utf8" });
    expect(noImage.status).toBe(2);
    expect(noImage.stderr).toMatch(/--sandbox docker needs an image and task tiny-mean names none/);
  }, 60_000);
});

describe("egress proxy (no engine needed): one target, whatever the request names", () => {
  it("forwards to the provider's host:port only; Host header, absolute URI and CONNECT reach nothing else", async () => {
    const { startEgressProxy } = await import("../../src/campaign/run/egress-proxy.js");
    const { createServer: createHttp, request } = await import("node:http");
    const hits = { target: [] as string[], other: [] as string[] };
    const serve = (k: keyof typeof hits) => createHttp((req, res) => (hits[k].push(`${req.method} ${req.url} host=${req.headers.host}`), res.end(k)));
    const target = serve("target");
    const other = serve("other");
    for (const s of [target, other]) await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
    const port = (s: typeof target) => (s.address() as { port: number }).port;
    const dir = mkdtempSync(join(tmpdir(), "infradev-egress-"));
    const proxy = await startEgressProxy({ socketPath: join(dir, "s.sock"), target: `http://127.0.0.1:${port(target)}/v1` });
    const ask = (method: string, path: string, host: string) =>
      new Promise<string>((res) => {
        const req = request({ socketPath: proxy.socketPath, method, path, headers: { host } }, (r) => {
          let body = "";
          r.on("data", (c: Buffer) => (body += c.toString()));
          r.on("end", () => res(`${r.statusCode} ${body}`));
        });
        req.on("error", (e) => res(`error ${(e as NodeJS.ErrnoException).code ?? e.message}`));
        req.end();
      });
    try {
      expect(await ask("POST", "/v1/responses", `127.0.0.1:${port(other)}`)).toBe("200 target");
      expect(await ask("GET", `http://127.0.0.1:${port(other)}/x`, `127.0.0.1:${port(other)}`)).toBe("200 target");
      expect(await ask("CONNECT", `127.0.0.1:${port(other)}`, `127.0.0.1:${port(other)}`)).toMatch(/^error /);
      expect(hits.other).toEqual([]);
      expect(hits.target).toEqual([`POST /v1/responses host=127.0.0.1:${port(target)}`, `GET / host=127.0.0.1:${port(target)}`]);
      expect(proxy.requests.map((r) => [r.method, r.path, r.status])).toEqual([["POST", "/v1/responses", 200], ["GET", "/", 200]]);
    } finally {
      await proxy.close();
      target.close();
      other.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
