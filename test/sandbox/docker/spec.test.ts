/**
 * The docker backend's container lifecycle against a real engine: GPU device requests in the spec the
 * engine stores, clear set-up errors, one container per session, close() and prune of orphans.
 */
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import Docker from "dockerode";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  DockerSandboxError,
  buildContainerSpec,
  createDockerSandbox,
  gpuDeviceRequests,
  parseGpus,
  pruneSandboxes,
  type DockerSandbox,
} from "../../../src/sandbox/docker/create.js";
import { LABEL } from "../../../src/sandbox/docker/spec.js";
import { SandboxUnavailableError } from "../../../src/sandbox/exec-common.js";
import { createSandbox } from "../../../src/sandbox/picker.js";
import { TEST_IMAGE, dockerSuitePlan, ensureTestImage } from "../../helpers/docker-image.js";
import { fakeTask, openTestSandbox, type FakeTask } from "../../helpers/docker-sandbox.js";

const plan = await dockerSuitePlan();

describe("docker sandbox: GPU device requests (spec builder, no engine needed)", () => {
  it("maps all / N / ids as `docker run --gpus` does", () => {
    expect(gpuDeviceRequests("all")).toEqual([{ Driver: "", Count: -1, DeviceIDs: [], Capabilities: [["gpu"]], Options: {} }]);
    expect(gpuDeviceRequests(2)).toEqual([{ Driver: "", Count: 2, DeviceIDs: [], Capabilities: [["gpu"]], Options: {} }]);
    expect(gpuDeviceRequests(["0", "3"])).toEqual([{ Driver: "", Count: 0, DeviceIDs: ["0", "3"], Capabilities: [["gpu"]], Options: {} }]);
    expect(gpuDeviceRequests(undefined)).toEqual([]);
    expect(gpuDeviceRequests(0)).toEqual([]);
    expect(() => gpuDeviceRequests(-1)).toThrow(/gpus must be/);
  });

  it("parses --gpus / task.yaml values", () => {
    expect(parseGpus("all")).toBe("all");
    expect(parseGpus("2")).toBe(2);
    expect(parseGpus("0,3")).toEqual(["0", "3"]);
    expect(parseGpus("device=0,3")).toEqual(["0", "3"]);
    expect(parseGpus('"device=GPU-abc"')).toEqual(["GPU-abc"]);
    expect(parseGpus("none")).toBeUndefined();
    expect(parseGpus(undefined)).toBeUndefined();
  });

  it("sets limits, shm, network, labels and the read-only root in the spec", () => {
    const spec = buildContainerSpec({
      image: "img",
      name: "n",
      hostRepoDir: "/w",
      hostPythonHelpersDir: "/h",
      readOnlyMounts: [{ host: "/c", sandbox: "/cache" }],
      hostSystemMounts: false,
      gpus: "all",
      limits: { memoryMb: 1024, pidsLimit: 100, cpus: 1.5, shmSizeMb: 8192 },
      network: "none",
      readOnlyRootfs: true,
      masks: { dirs: ["/cache/hidden"], files: ["/cache/secret"] },
      labels: { a: "b" },
      env: { K: "V" },
    });
    const hc = spec.HostConfig!;
    expect(hc.Binds).toEqual(["/w:/workspace:rw", "/h:/opt/infradev/python:ro", "/c:/cache:ro", "/dev/null:/cache/secret:ro"]);
    expect(hc.Tmpfs?.["/cache/hidden"]).toMatch(/^ro,/);
    expect(hc).toMatchObject({ Memory: 1024 * 2 ** 20, MemorySwap: 1024 * 2 ** 20, PidsLimit: 100, NanoCpus: 1.5e9, ShmSize: 8192 * 2 ** 20 });
    expect(hc).toMatchObject({ NetworkMode: "none", ReadonlyRootfs: true, Init: true, CapDrop: ["ALL"], SecurityOpt: ["no-new-privileges"] });
    expect(hc.DeviceRequests).toEqual(gpuDeviceRequests("all"));
    expect(spec.Labels).toEqual({ a: "b" });
    expect(spec.Env).toEqual(["K=V"]);
  });
});

describe("docker sandbox: unreachable engine (no engine needed)", () => {
  it("says how to start the engine, as a harness fault", async () => {
    const task = fakeTask();
    try {
      const err = await createDockerSandbox({
        hostRepoDir: task.workspace,
        image: TEST_IMAGE,
        sessionId: "unreachable",
        docker: new Docker({ socketPath: join(task.root, "no-engine.sock") }),
      }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DockerSandboxError);
      expect(err).toBeInstanceOf(SandboxUnavailableError);
      expect(err).toMatchObject({ code: "engine_unreachable", harnessFault: true, kind: "docker" });
      expect((err as Error).message).toMatch(/docker engine is unreachable/);
      expect((err as Error).message).toMatch(/dockerd|DOCKER_HOST/);
    } finally {
      task.cleanup();
    }
  });

  it("honours DOCKER_HOST (a tcp engine that is not there)", async () => {
    const task = fakeTask();
    const saved = process.env.DOCKER_HOST;
    process.env.DOCKER_HOST = "tcp://127.0.0.1:1";
    try {
      const err = await createDockerSandbox({ hostRepoDir: task.workspace, image: TEST_IMAGE, sessionId: "tcp" }).catch((e: unknown) => e);
      expect(err).toMatchObject({ code: "engine_unreachable" });
      expect((err as Error).message).toContain("DOCKER_HOST=tcp://127.0.0.1:1");
    } finally {
      if (saved === undefined) delete process.env.DOCKER_HOST;
      else process.env.DOCKER_HOST = saved;
      task.cleanup();
    }
  });
});

describe.skipIf(!plan.run)("docker sandbox: lifecycle on a real engine", () => {
  let task: FakeTask;
  let docker: Docker;
  const opened: DockerSandbox[] = [];

  beforeAll(async () => {
    if (!plan.reachable) throw new Error(plan.whyNot);
    docker = new Docker();
    await ensureTestImage(docker);
    task = fakeTask();
  });
  afterAll(async () => {
    for (const sb of opened) await sb.close().catch(() => undefined);
    task?.cleanup();
  });

  it("the engine stores the GPU device requests it was given (all, 2, [0,3])", async () => {
    for (const gpus of ["all", 2, ["0", "3"]] as const) {
      const spec = buildContainerSpec({
        image: TEST_IMAGE,
        name: `infradev-gpuspec-${process.pid}-${Math.random().toString(36).slice(2, 8)}`,
        hostRepoDir: task.workspace,
        hostPythonHelpersDir: task.workspace,
        readOnlyMounts: [],
        hostSystemMounts: true,
        gpus: gpus as "all" | number | string[],
        limits: { memoryMb: 256, pidsLimit: 64, shmSizeMb: 64 },
        network: "none",
        readOnlyRootfs: true,
        masks: { dirs: [], files: [] },
        labels: { [LABEL.managed]: "true", [LABEL.session]: "gpuspec", [LABEL.pid]: "0", [LABEL.host]: "nowhere" },
        env: {},
      });
      const c = await docker.createContainer(spec); // created, not started: no GPU needed yet
      try {
        const reqs = (await c.inspect()).HostConfig.DeviceRequests ?? [];
        expect(reqs).toHaveLength(1);
        expect(reqs[0]!.Capabilities).toEqual([["gpu"]]);
        if (gpus === "all") expect(reqs[0]!.Count).toBe(-1);
        else if (gpus === 2) expect(reqs[0]!.Count).toBe(2);
        else expect(reqs[0]!.DeviceIDs).toEqual(["0", "3"]);
      } finally {
        await c.remove({ force: true });
      }
    }
  });

  it("starting with GPUs works on a GPU engine, or fails clearly and leaves no container", async () => {
    const session = `vitest-gpu-${process.pid}`;
    const result = await openTestSandbox(task, { gpus: "all", sessionId: session }).catch((e: unknown) => e);
    if (result instanceof Error) {
      expect(result).toMatchObject({ name: "DockerSandboxError", code: "gpu_unavailable", harnessFault: true });
      expect(result.message).toMatch(/nvidia-container-toolkit/);
      expect(result.message).toMatch(/without --gpus/);
    } else {
      const sb = result as DockerSandbox;
      opened.push(sb);
      const reqs = (await sb.container.inspect()).HostConfig.DeviceRequests ?? [];
      expect(reqs[0]).toMatchObject({ Count: -1, Capabilities: [["gpu"]] });
    }
    const left = await docker.listContainers({ all: true, filters: { label: [`${LABEL.session}=${session}`] } });
    expect(left.length).toBe(result instanceof Error ? 0 : 1);
  });

  it("says `docker pull <image>` when the image is missing (no implicit pull)", async () => {
    const err = await openTestSandbox(task, { image: "infradev-no-such-image:nope" }).catch((e: unknown) => e);
    expect(err).toMatchObject({ name: "DockerSandboxError", code: "image_missing", harnessFault: true });
    expect((err as Error).message).toContain("docker pull infradev-no-such-image:nope");
    expect((err as Error).message).toMatch(/no implicit pull/);
  });

  it("gives two sessions two containers, labelled, each with its own /tmp and the same workspace", async () => {
    const a = await openTestSandbox(task, { sessionId: "vitest-session-a", purpose: "agent" });
    opened.push(a);
    const b = await openTestSandbox(task, { sessionId: "vitest-session-b", purpose: "grader" });
    opened.push(b);
    expect(a.containerId).not.toBe(b.containerId);
    const labels = (await b.container.inspect()).Config.Labels;
    expect(labels).toMatchObject({ [LABEL.session]: "vitest-session-b", [LABEL.kind]: "grader", [LABEL.pid]: String(process.pid), [LABEL.managed]: "true" });
    await a.exec(["sh", "-c", "echo a > /tmp/mine && echo shared > /workspace/shared.txt"]);
    expect((await b.exec(["sh", "-c", "cat /tmp/mine 2>/dev/null || echo none"])).stdout).toBe("none\n");
    expect((await b.exec(["cat", "shared.txt"])).stdout).toBe("shared\n");
  });

  it("createSandbox({ kind: 'docker' }) takes the image and GPUs from the task unless given", async () => {
    const sb = await createSandbox({
      kind: "docker",
      hostRepoDir: task.workspace,
      hiddenPaths: [task.hidden],
      task: { id: "fake", spec: { image: TEST_IMAGE } },
      purpose: "grader",
      sessionId: "vitest-factory",
      hostSystemMounts: true,
      memoryMb: 256,
      shmSizeMb: 64,
    });
    try {
      expect(sb.kind).toBe("docker");
      expect((await sb.exec(["python3", "hello.py"])).stdout).toBe("hello from the workspace\n");
    } finally {
      await sb.close();
    }
    await expect(createSandbox({ kind: "docker", hostRepoDir: task.workspace, task: { id: "fake", spec: {} } })).rejects.toMatchObject({
      code: "bad_options",
      message: expect.stringMatching(/no image to run for task fake: set `image:` in task.yaml or pass --image/),
    });
  });

  it("close() removes the container and is idempotent; exec after close throws", async () => {
    const sb = await openTestSandbox(task, { sessionId: "vitest-close" });
    const running = sb.exec(["sleep", "300"], { timeoutSec: 60 });
    await new Promise((r) => setTimeout(r, 500));
    await sb.close();
    expect((await running).cancelled).toBe(true);
    await sb.close();
    await expect(sb.container.inspect()).rejects.toMatchObject({ statusCode: 404 });
    await expect(sb.exec(["true"])).rejects.toThrow(/after close/);
  });

  it("prune removes the container of a killed session and keeps live ones", async () => {
    const live = await openTestSandbox(task, { sessionId: "vitest-live" });
    opened.push(live);
    // Straight to node with tsx's loader: the pid that owns the container is the one we kill.
    const child = spawn(process.execPath, ["--import", "tsx", "test/helpers/docker-session-child.ts", task.workspace, "vitest-orphan"], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout.on("data", (c: Buffer) => (out += c.toString()));
    const deadline = Date.now() + 90_000;
    while (!/READY \w+ \d+/.test(out) && Date.now() < deadline && child.exitCode === null) await new Promise((r) => setTimeout(r, 100));
    const [, orphanId, ownerPid] = /READY (\w+) (\d+)/.exec(out) ?? [];
    expect(orphanId, `child said: ${out}`).toBeDefined();
    expect(Number(ownerPid)).toBe(child.pid);
    // The owner dies without close(): its container is still running.
    const exited = once(child, "exit");
    child.kill("SIGKILL");
    await exited;
    expect((await docker.getContainer(orphanId!).inspect()).State.Running).toBe(true);

    // Too young for olderThanSec: kept.
    const young = await pruneSandboxes({ olderThanSec: 3600 });
    expect(young.removed.map((r) => r.id)).not.toContain(orphanId);

    const pruned = await pruneSandboxes();
    expect(pruned.removed).toContainEqual(expect.objectContaining({ id: orphanId, session: "vitest-orphan", reason: "owner gone" }));
    expect(pruned.removed.map((r) => r.id)).not.toContain(live.containerId);
    await expect(docker.getContainer(orphanId!).inspect()).rejects.toMatchObject({ statusCode: 404 });
    expect((await live.container.inspect()).State.Running).toBe(true);
  });
});
