/**
 * The docker backend through the CLI: `infradev serve --sandbox docker` with the docker flags, a
 * SIGKILLed server's container removed by `infradev sandbox prune`, one container per session, and
 * the grader's container sharing no writable mount with the agent's. The flag parsing part needs no
 * engine; the rest skips without one unless INFRADEV_REQUIRE_DOCKER=1, which makes it fail.
 */
import { execFile } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { Command } from "commander";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import { addDockerOptions, dockerOptionsFromFlags, type DockerFlags } from "../../../src/cli/sandbox-options.js";
import { freshWorkspace, removeWorkspace } from "../../../src/grader/workspace/workspace.js";
import { bundledTasksDir, packageRoot } from "../../../src/lib/paths.js";
import { gpuDeviceRequests, type PruneResult } from "../../../src/sandbox/docker/create.js";
import { LABEL } from "../../../src/sandbox/docker/spec.js";
import { loadGraderTask } from "../../../src/task/hidden/grader-task.js";
import { TEST_DOCKER_OPTIONS, backendCliFlags, ensureBuilt } from "../../helpers/backends.js";
import { dockerSuitePlan, ensureTestImage } from "../../helpers/docker-image.js";

const run = promisify(execFile);
const TASK = "grad-bucketing";

/** Parses argv the way `serve` / `grade` do, with the docker flags alone. */
function parseFlags(argv: string[]): { flags: DockerFlags; error?: string } {
  let error: string | undefined;
  const cmd = new Command("t").exitOverride().configureOutput({ writeErr: (s) => (error = s), writeOut: () => undefined });
  cmd.option("--sandbox <kind>", "", "local");
  let flags: DockerFlags = {};
  addDockerOptions(cmd).action((opts: DockerFlags) => {
    flags = opts;
  });
  try {
    cmd.parse(argv, { from: "user" });
  } catch {
    return { flags, error: error ?? "failed" };
  }
  return { flags };
}

describe("docker flags (no engine needed)", () => {
  it("turn into the factory's docker options, only those given", () => {
    const { flags, error } = parseFlags(["--sandbox", "docker", "--image", "img:1", "--gpus", "0,3", "--memory-mb", "2048", "--pids-limit", "512", "--cpus", "1.5", "--shm-mb", "256", "--network", "bridge", "--host-system-mounts"]);
    expect(error).toBeUndefined();
    expect(dockerOptionsFromFlags(flags)).toEqual({ image: "img:1", gpus: ["0", "3"], memoryMb: 2048, pidsLimit: 512, cpus: 1.5, shmSizeMb: 256, network: "bridge", hostSystemMounts: true });
    expect(gpuDeviceRequests(dockerOptionsFromFlags(flags).gpus)).toEqual([{ Driver: "", Count: 0, DeviceIDs: ["0", "3"], Capabilities: [["gpu"]], Options: {} }]);
    expect(dockerOptionsFromFlags(parseFlags(["--sandbox", "docker"]).flags)).toEqual({});
    expect(dockerOptionsFromFlags(parseFlags(["--sandbox", "docker", "--gpus", "all"]).flags).gpus).toBe("all");
    expect(dockerOptionsFromFlags(parseFlags(["--sandbox", "docker", "--gpus", "2"]).flags).gpus).toBe(2);
    expect(dockerOptionsFromFlags(parseFlags(["--sandbox", "docker", "--gpus", "none"]).flags).gpus).toBe(0);
  });

  it("refuse bad values and another backend, naming the flag", () => {
    expect(parseFlags(["--sandbox", "docker", "--memory-mb", "lots"]).error).toMatch(/--memory-mb.*whole number/);
    expect(parseFlags(["--sandbox", "docker", "--cpus", "0"]).error).toMatch(/--cpus.*> 0/);
    expect(parseFlags(["--sandbox", "docker", "--network", "host"]).error).toMatch(/--network.*none, bridge/);
    expect(parseFlags(["--sandbox", "docker", "--gpus", ","]).error).toMatch(/--gpus/);
    expect(parseFlags(["--image", "img:1", "--gpus", "all"]).error).toMatch(/--image, --gpus apply only to --sandbox docker \(got --sandbox local\)/);
  });
});

const plan = await dockerSuitePlan();

interface Served {
  client: Client;
  transport: StdioClientTransport;
  runId: string;
}

describe.skipIf(!plan.run)("infradev serve --sandbox docker, and sandbox prune (real engine)", () => {
  const docker = new Docker();
  let cli: string;
  let runsDir: string;
  const clients: Client[] = [];

  /** The session's containers, stopped ones included. */
  const containersOf = async (runId: string) => docker.listContainers({ all: true, filters: { label: [`${LABEL.session}=${runId}`] } });

  async function serve(extra: string[] = []): Promise<Served> {
    const before = new Set(readdirSync(runsDir));
    const transport = new StdioClientTransport({
      command: process.execPath,
      args: [cli, "serve", "--task", TASK, "--sandbox", "docker", ...backendCliFlags("docker"), "--runs-dir", runsDir, ...extra],
      env: { ...(process.env as Record<string, string>), INFRADEV_LOG_LEVEL: "warn" },
      stderr: "pipe",
    });
    const client = new Client({ name: "infradev-docker-cli", version: "0" });
    await client.connect(transport);
    clients.push(client);
    // serve answers initialize before it builds the session (container included): a first call waits for it.
    await client.callTool({ name: "get_task", arguments: {} });
    const runId = readdirSync(runsDir).find((r) => !before.has(r))!;
    return { client, transport, runId };
  }

  const shell = async (s: Served, command: string) =>
    ((await s.client.callTool({ name: "run_shell", arguments: { command } })) as unknown as { structuredContent: { exit_code: number; stdout: string } }).structuredContent;

  beforeAll(async () => {
    if (!plan.reachable) throw new Error(plan.whyNot);
    await ensureTestImage();
    cli = ensureBuilt();
    runsDir = mkdtempSync(join(tmpdir(), "infradev-docker-cli-"));
  }, 300_000);
  afterAll(async () => {
    for (const c of clients) await c.close().catch(() => undefined);
    if (runsDir) rmSync(runsDir, { recursive: true, force: true });
  });

  it("killing the server leaves no container once `sandbox prune` has run; a second session gets its own container", async () => {
    const first = await serve(["--memory-mb", "1024", "--pids-limit", "256", "--shm-mb", "128", "--cpus", "1"]);
    const [c1] = await containersOf(first.runId);
    expect(c1, "the first session's container").toBeDefined();
    // The flags reached the container.
    const inspect = await docker.getContainer(c1!.Id).inspect();
    expect(inspect.HostConfig).toMatchObject({ Memory: 1024 * 2 ** 20, PidsLimit: 256, ShmSize: 128 * 2 ** 20, NanoCpus: 1e9, NetworkMode: "none" });
    expect(inspect.Config.Image).toBe(TEST_DOCKER_OPTIONS.image);

    const second = await serve();
    const containers2 = await containersOf(second.runId);
    expect(containers2).toHaveLength(1);
    expect(containers2[0]!.Id).not.toBe(c1!.Id);
    await shell(first, "echo from-the-first > only-first.txt");
    expect((await shell(second, "cat only-first.txt 2>&1; ls")).stdout).not.toContain("from-the-first");

    const pid = first.transport.pid!;
    process.kill(pid, "SIGKILL");
    const gone = () => {
      try {
        process.kill(pid, 0);
        return false;
      } catch {
        return true;
      }
    };
    for (let i = 0; i < 100 && !gone(); i++) await new Promise((r) => setTimeout(r, 50));
    expect(gone(), "the server survived SIGKILL").toBe(true);
    expect((await containersOf(first.runId))[0]?.State, "nothing in a SIGKILLed server can remove its container").toBe("running");

    const { stdout } = await run(process.execPath, [cli, "sandbox", "prune", "--json"]);
    const pruned = JSON.parse(stdout) as PruneResult;
    expect(pruned.removed).toContainEqual(expect.objectContaining({ id: c1!.Id, session: first.runId, kind: "agent", reason: "owner gone" }));
    expect(pruned.removed.map((r) => r.id)).not.toContain(containers2[0]!.Id);
    expect(await containersOf(first.runId)).toEqual([]);

    // The live session is untouched, and removes its own container when its client goes.
    expect((await shell(second, "echo still-here")).stdout).toBe("still-here\n");
    await second.client.close();
    for (let i = 0; i < 200 && (await containersOf(second.runId)).length > 0; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await containersOf(second.runId)).toEqual([]);
  });

  it("the grader's container shares no writable mount with the agent's", async () => {
    const agent = await serve();
    const [agentC] = await containersOf(agent.runId);
    const task = loadGraderTask(TASK);
    const ws = await freshWorkspace(task);
    const sandbox = await graderSandboxFactory("docker", [bundledTasksDir(), runsDir], TEST_DOCKER_OPTIONS)({ task, hostRepoDir: ws.repoDir });
    try {
      const binds = async (id: string) => ((await docker.getContainer(id).inspect()).Mounts ?? []).filter((m) => m.Type === "bind");
      const agentMounts = await binds(agentC!.Id);
      const graderC = (await docker.listContainers({ filters: { label: [`${LABEL.kind}=grader`, `${LABEL.pid}=${process.pid}`] } }))[0]!;
      const graderMounts = await binds(graderC.Id);
      const overlaps = (a: string, b: string) => a === b || a.startsWith(`${b}/`) || b.startsWith(`${a}/`);
      for (const [mine, theirs] of [
        [agentMounts, graderMounts],
        [graderMounts, agentMounts],
      ] as const) {
        for (const rw of mine.filter((m) => m.RW)) {
          const shared = theirs.filter((m) => overlaps(m.Source, rw.Source));
          expect(shared, `writable ${rw.Source} is also mounted in the other container`).toEqual([]);
        }
      }
      expect(graderMounts.filter((m) => m.RW).map((m) => [m.Source, m.Destination])).toEqual([[ws.repoDir, "/workspace"]]);
      // Nothing of the package (tasks, runs) is bound into the grader's container.
      expect(graderMounts.map((m) => m.Source).filter((s) => s.startsWith(packageRoot()) && !s.endsWith("/python/sandbox"))).toEqual([]);
    } finally {
      await sandbox.close();
      removeWorkspace(ws);
      await agent.client.close();
    }
  });
});
