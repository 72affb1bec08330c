/**
 * Round trip of a trivial command (`true`) in the docker sandbox, measured in one run:
 *   - DockerSandbox.exec (Engine API over the socket, with the tree-kill wrapper, output capture and log)
 *   - a bare Engine API exec (no wrapper), the floor of what the API can do
 *   - `docker exec <container> true` from the CLI (a process per call)
 *   - the local (bubblewrap) backend's exec, when bwrap works here
 * and the container start time (createDockerSandbox end to end, and a bare create + start).
 * The ways are interleaved call by call so machine load hits them alike; medians and ratios printed.
 *
 *   npx tsx bench/docker_roundtrip.ts [--n 40] [--image infradev-test-base:local]
 *
 * The MCP-level comparison (run_shell through the server) belongs with the server's bench.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Duplex } from "node:stream";
import { Writable } from "node:stream";
import { execa } from "execa";
import { createDockerSandbox, type DockerSandbox } from "../src/sandbox/docker/create.js";
import { createLocalSandbox } from "../src/sandbox/local/sandbox.js";
import type { Sandbox } from "../src/sandbox/types.js";
import { TEST_IMAGE, ensureTestImage } from "../test/helpers/docker-image.js";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && process.argv[i + 1] ? process.argv[i + 1]! : fallback;
}

const N = Number(arg("n", "40"));
const IMAGE = arg("image", TEST_IMAGE);
const WARMUP = 3;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

function p90(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * 0.9))]!;
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

async function bareApiExec(sb: DockerSandbox): Promise<void> {
  const exec = await sb.container.exec({ Cmd: ["true"], AttachStdout: true, AttachStderr: true, Tty: false });
  const stream = (await exec.start({ hijack: true, stdin: false })) as Duplex;
  const sink = new Writable({ write: (_c, _e, cb) => cb() });
  sb.docker.modem.demuxStream(stream, sink, sink);
  await new Promise<void>((resolve) => stream.on("end", resolve).on("close", resolve));
  for (;;) {
    const info = await exec.inspect();
    if (!info.Running) {
      if (info.ExitCode !== 0) throw new Error(`bare exec exited ${info.ExitCode}`);
      return;
    }
  }
}

async function main(): Promise<void> {
  if (IMAGE === TEST_IMAGE) await ensureTestImage();
  const ws = mkdtempSync(join(tmpdir(), "infradev-bench-docker-"));
  const hostSystemMounts = IMAGE === TEST_IMAGE;
  const open = () => createDockerSandbox({ hostRepoDir: ws, image: IMAGE, sessionId: `bench-${process.pid}`, hostSystemMounts, memoryMb: 1024, shmSizeMb: 64 });

  // Container start: the sandbox end to end (ping, image check, create, start, attach, events), then closed.
  const startTimes: number[] = [];
  for (let i = 0; i < 5; i++) {
    let sb: DockerSandbox | undefined;
    startTimes.push(await timed(async () => (sb = await open())));
    await sb!.close();
  }
  const sb = await open();
  let local: Sandbox | undefined;
  try {
    local = await createLocalSandbox({ hostRepoDir: ws });
  } catch (err) {
    console.error(`(local backend skipped: ${(err as Error).message.split("\n")[0]})`);
  }

  const ways: Record<string, () => Promise<unknown>> = {
    "docker sandbox.exec (Engine API)": async () => {
      const r = await sb.exec(["true"], { timeoutSec: 60 });
      if (r.exitCode !== 0) throw new Error(`sandbox exec exited ${r.exitCode}: ${r.stderr}`);
    },
    "bare Engine API exec": () => bareApiExec(sb),
    "docker exec CLI": () => execa("docker", ["exec", sb.containerId, "true"]),
  };
  if (local) {
    ways["local sandbox.exec (bwrap)"] = async () => {
      const r = await local!.exec(["true"], { timeoutSec: 60 });
      if (r.exitCode !== 0) throw new Error(`local exec exited ${r.exitCode}: ${r.stderr}`);
    };
  }
  const samples: Record<string, number[]> = Object.fromEntries(Object.keys(ways).map((k) => [k, []]));
  for (let i = 0; i < WARMUP + N; i++) {
    for (const [name, fn] of Object.entries(ways)) {
      const ms = await timed(fn);
      if (i >= WARMUP) samples[name]!.push(ms);
    }
  }
  await sb.close();
  await local?.close();
  rmSync(ws, { recursive: true, force: true });

  const med = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)]));
  const cli = med["docker exec CLI"]!;
  console.log(`docker round trip of \`true\`, ${N} calls each (interleaved), image ${IMAGE}`);
  for (const [k, v] of Object.entries(samples)) {
    console.log(`  ${k.padEnd(34)} median ${median(v).toFixed(1).padStart(7)} ms   p90 ${p90(v).toFixed(1).padStart(7)} ms   ×CLI ${(median(v) / cli).toFixed(2)}`);
  }
  console.log(`  container start (createDockerSandbox)  median ${median(startTimes).toFixed(0)} ms  (${startTimes.map((t) => t.toFixed(0)).join(", ")})`);
  const ratios: Record<string, number> = {
    sandbox_exec_over_cli: med["docker sandbox.exec (Engine API)"]! / cli,
    bare_api_over_cli: med["bare Engine API exec"]! / cli,
  };
  if (med["local sandbox.exec (bwrap)"] !== undefined) ratios.docker_sandbox_over_local = med["docker sandbox.exec (Engine API)"]! / med["local sandbox.exec (bwrap)"]!;
  console.log(JSON.stringify({ n: N, median_ms: med, container_start_ms: median(startTimes), ratios }, null, 1));
}

main().catch((err: Error) => {
  console.error(err);
  process.exit(1);
});
