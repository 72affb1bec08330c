/**
 * Round trip of a trivial `run_shell` (`true`) through the MCP server on the docker backend, in one
 * run, interleaved call by call so machine load hits every way alike:
 *
 *   - MCP run_shell, docker   SDK Client -> stdio -> `infradev serve --sandbox docker` -> Engine API exec
 *   - docker exec CLI         `docker exec -w /workspace <the session's container> bash -c true`
 *                             (the same command line run_shell runs, a CLI process per call)
 *   - MCP run_shell, local    the same through `infradev serve --sandbox local` (bubblewrap)
 *   - docker sandbox.exec     DockerSandbox.exec in this process (no MCP): the floor under the server
 *
 * Ratios: MCP docker / docker exec CLI (target <= 1.0: the Engine API over the socket should beat a
 * CLI process), MCP docker / MCP local. Container start: createDockerSandbox end to end, and the
 * server's start (spawn to the first run_shell answered) on docker and on local.
 *
 *   npx tsx bench/docker_mcp_roundtrip.ts [--n 40] [--starts 3] [--image infradev-test-base:local]
 */
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import Docker from "dockerode";
import { execa } from "execa";
import { createDockerSandbox, type DockerSandbox } from "../src/sandbox/docker/create.js";
import { LABEL } from "../src/sandbox/docker/spec.js";
import { ensureBuilt } from "../test/helpers/backends.js";
import { TEST_IMAGE, ensureTestImage } from "../test/helpers/docker-image.js";

const TASK = "grad-bucketing";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

const N = Number(arg("n", "40"));
const STARTS = Number(arg("starts", "3"));
const IMAGE = arg("image", TEST_IMAGE);
const WARMUP = 3;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * 0.9))]!;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

interface Server {
  client: Client;
  runId: string;
  close(): Promise<void>;
}

/** `infradev serve` on a fresh runs folder; resolves once the first run_shell has answered. */
async function startServer(cli: string, backend: "docker" | "local"): Promise<Server> {
  const runsDir = mkdtempSync(join(tmpdir(), `infradev-bench-${backend}-`));
  const flags = backend === "docker" ? ["--image", IMAGE, ...(IMAGE === TEST_IMAGE ? ["--host-system-mounts"] : [])] : [];
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [cli, "serve", "--task", TASK, "--sandbox", backend, ...flags, "--runs-dir", runsDir],
    env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
    stderr: "inherit",
  });
  const client = new Client({ name: "infradev-bench", version: "0" });
  await client.connect(transport);
  await runShell(client);
  return {
    client,
    runId: readdirSync(runsDir)[0]!,
    async close() {
      await client.close();
      rmSync(runsDir, { recursive: true, force: true });
    },
  };
}

async function runShell(client: Client): Promise<void> {
  const r = await client.callTool({ name: "run_shell", arguments: { command: "true" } });
  if (r.isError) throw new Error(`run_shell failed: ${JSON.stringify(r.content)}`);
}

async function main(): Promise<void> {
  if (IMAGE === TEST_IMAGE) await ensureTestImage();
  const cli = ensureBuilt();
  const docker = new Docker();

  // Start-up, interleaved: the server on each backend (spawn -> first run_shell answered), then the
  // docker sandbox alone (ping, image check, create, start, attach, events).
  const serveStart: Record<"docker" | "local", number[]> = { docker: [], local: [] };
  const sandboxStart: number[] = [];
  const ws = mkdtempSync(join(tmpdir(), "infradev-bench-docker-ws-"));
  const openDirect = () => createDockerSandbox({ hostRepoDir: ws, image: IMAGE, sessionId: `bench-${process.pid}`, hostSystemMounts: IMAGE === TEST_IMAGE });
  for (let i = 0; i < STARTS; i++) {
    for (const backend of ["docker", "local"] as const) {
      let s: Server | undefined;
      serveStart[backend].push(await timed(async () => (s = await startServer(cli, backend))));
      await s!.close();
    }
    let sb: DockerSandbox | undefined;
    sandboxStart.push(await timed(async () => (sb = await openDirect())));
    await sb!.close();
  }

  const onDocker = await startServer(cli, "docker");
  const onLocal = await startServer(cli, "local");
  const direct = await openDirect();
  const container = (await docker.listContainers({ filters: { label: [`${LABEL.session}=${onDocker.runId}`] } }))[0];
  if (!container) throw new Error(`no container for session ${onDocker.runId}`);

  const ways: Record<string, () => Promise<unknown>> = {
    "MCP run_shell, docker": () => runShell(onDocker.client),
    "docker exec CLI": () => execa("docker", ["exec", "-w", "/workspace", container.Id, "bash", "-c", "true"]),
    "MCP run_shell, local": () => runShell(onLocal.client),
    "docker sandbox.exec (no MCP)": async () => {
      const r = await direct.exec(["bash", "-c", "true"], { timeoutSec: 60 });
      if (r.exitCode !== 0) throw new Error(`sandbox exec exited ${r.exitCode}: ${r.stderr}`);
    },
  };
  const samples: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
  try {
    for (let i = 0; i < WARMUP + N; i++) {
      for (const [name, fn] of Object.entries(ways)) {
        const ms = await timed(fn);
        if (i >= WARMUP) samples[name]!.push(ms);
      }
    }
  } finally {
    await onDocker.close();
    await onLocal.close();
    await direct.close();
    rmSync(ws, { recursive: true, force: true });
  }

  const med = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)]));
  const mcpDocker = med["MCP run_shell, docker"]!;
  const cliExec = med["docker exec CLI"]!;
  const mcpLocal = med["MCP run_shell, local"]!;
  const ratios = {
    mcp_docker_over_docker_exec_cli: +(mcpDocker / cliExec).toFixed(3),
    mcp_docker_over_mcp_local: +(mcpDocker / mcpLocal).toFixed(3),
    mcp_docker_over_sandbox_exec: +(mcpDocker / med["docker sandbox.exec (no MCP)"]!).toFixed(3),
  };
  const starts = {
    create_docker_sandbox_ms: +median(sandboxStart).toFixed(0),
    serve_docker_ms: +median(serveStart.docker).toFixed(0),
    serve_local_ms: +median(serveStart.local).toFixed(0),
  };
  console.log(`run_shell \`true\`: ${N} calls each (interleaved, after ${WARMUP} warm-up rounds), image ${IMAGE}`);
  for (const [k, v] of Object.entries(samples)) {
    console.log(`  ${k.padEnd(30)} median ${median(v).toFixed(1).padStart(7)} ms   p90 ${p90(v).toFixed(1).padStart(7)} ms`);
  }
  console.log(`  MCP docker / docker exec CLI  x${ratios.mcp_docker_over_docker_exec_cli.toFixed(2)}  (target <= 1.0: ${ratios.mcp_docker_over_docker_exec_cli <= 1 ? "OK" : "MISSED"})`);
  console.log(`  MCP docker / MCP local        x${ratios.mcp_docker_over_mcp_local.toFixed(2)}`);
  console.log(`start, median of ${STARTS}: createDockerSandbox ${starts.create_docker_sandbox_ms} ms; serve to first run_shell answered: docker ${starts.serve_docker_ms} ms, local ${starts.serve_local_ms} ms`);
  console.log(JSON.stringify({ n: N, median_ms: med, ratios, start_median_ms: starts }));
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});
