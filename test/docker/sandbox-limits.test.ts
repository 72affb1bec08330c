/**
 * The docker backend's limits against a real engine: timeouts and aborts kill the whole process
 * tree inside the container, a fork bomb hits the pids limit, a memory hog is OOM-killed and
 * reported as such, and a 2-rank torch gloo all_reduce works inside (shm, loopback).
 */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DockerSandbox } from "../../src/sandbox/docker/create.js";
import { dockerSuitePlan, ensureTestImage } from "../helpers/docker-image.js";
import { fakeTask, openTestSandbox, strayProcesses, type FakeTask } from "../helpers/docker-sandbox.js";

const plan = await dockerSuitePlan();

describe.skipIf(!plan.run)("docker sandbox: timeouts, pids, memory, multi-rank", () => {
  let task: FakeTask;
  let sb: DockerSandbox;

  beforeAll(async () => {
    if (!plan.reachable) throw new Error(plan.whyNot);
    await ensureTestImage();
    task = fakeTask();
    sb = await openTestSandbox(task, { memoryMb: 1024, pidsLimit: 128, shmSizeMb: 512 });
  });
  afterAll(async () => {
    await sb?.close();
    task?.cleanup();
  });

  it("a timeout kills the whole tree, including children that left the process group", async () => {
    const cmd = "sleep 1000 & setsid sleep 1001 & (trap '' TERM HUP; sleep 1002) & sleep 1003";
    const started = Date.now();
    const r = await sb.exec(["sh", "-c", cmd], { timeoutSec: 2 });
    expect(r).toMatchObject({ timedOut: true, cancelled: false, exitCode: null });
    // SIGTERM first; what ignores it (the trap '' TERM subshell) gets SIGKILL after the grace.
    expect(["SIGTERM", "SIGKILL"]).toContain(r.signal);
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(await strayProcesses(sb)).toEqual([]);
  });

  it("`sleep 1000` with a 2 s timeout returns timedOut and leaves no process", async () => {
    const r = await sb.exec(["sleep", "1000"], { timeoutSec: 2 });
    expect(r.timedOut).toBe(true);
    expect(r.durationMs).toBeGreaterThanOrEqual(1900);
    expect(await strayProcesses(sb)).toEqual([]);
  });

  it("an abort signal cancels the command and kills its tree", async () => {
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 1000);
    const r = await sb.exec(["sh", "-c", "sleep 500 & sleep 501"], { signal: ac.signal, timeoutSec: 60 });
    expect(r).toMatchObject({ cancelled: true, timedOut: false, exitCode: null });
    expect(await strayProcesses(sb)).toEqual([]);
    const pre = new AbortController();
    pre.abort();
    expect(await sb.exec(["true"], { signal: pre.signal })).toMatchObject({ cancelled: true, exitCode: null });
  });

  it("keeps output produced before the timeout", async () => {
    const r = await sb.exec(["sh", "-c", "echo before; echo warn >&2; sleep 1000"], { timeoutSec: 2 });
    expect(r.timedOut).toBe(true);
    expect(r.stdout).toBe("before\n");
    expect(r.stderr).toBe("warn\n");
  });

  it("contains a fork bomb with the pids limit; the command fails, the container survives", async () => {
    const bomb = await sb.exec(["bash", "-c", "b() { b | b; }; b"], { timeoutSec: 8 });
    expect(bomb.exitCode).not.toBe(0);
    expect(bomb.stderr).toMatch(/Resource temporarily unavailable/);
    expect(await strayProcesses(sb)).toEqual([]);
    expect((await sb.exec(["echo", "alive"])).stdout).toBe("alive\n");
    expect((await sb.container.inspect()).State.Running).toBe(true);
  });

  it("a background fork bomb dies with the command that started it", async () => {
    const r = await sb.exec(["bash", "-c", ":(){ :|:& };:"], { timeoutSec: 8 });
    expect(r.timedOut).toBe(false);
    expect(await strayProcesses(sb)).toEqual([]);
    expect((await sb.exec(["echo", "alive"])).stdout).toBe("alive\n");
  });

  it("a fork loop sees the pids limit as EAGAIN", async () => {
    const script = [
      "import os, time",
      "n = 0",
      "try:",
      "    while True:",
      "        if os.fork() == 0:",
      "            time.sleep(30); os._exit(0)",
      "        n += 1",
      "except OSError as e:",
      "    print('fork failed after', n, e.errno, flush=True)",
      "    os._exit(3)",
    ].join("\n");
    const r = await sb.exec(["python3", "-c", script], { timeoutSec: 30 });
    expect(r.exitCode).toBe(3);
    expect(r.stdout).toMatch(/fork failed after \d+ 11/);
    expect(Number(/after (\d+)/.exec(r.stdout)![1])).toBeLessThan(128);
    // The sleeping children die with the command.
    expect(await strayProcesses(sb)).toEqual([]);
  });

  it("kills background children when the command exits (as the local backend's pid namespace does)", async () => {
    const started = Date.now();
    const r = await sb.exec(["sh", "-c", "sleep 300 & echo started"], { timeoutSec: 30 });
    expect(r).toMatchObject({ exitCode: 0, stdout: "started\n", timedOut: false });
    expect(Date.now() - started).toBeLessThan(5000);
    expect(await strayProcesses(sb)).toEqual([]);
  });

  it("kills a memory hog at the memory limit and reports oomKilled", async () => {
    // A small limit of its own: near the limit the kernel reclaims before it kills, and that takes
    // longer the larger the limit is.
    const small = await openTestSandbox(task, { memoryMb: 256, sessionId: `vitest-oom-${process.pid}` });
    try {
      await memoryHogIsReported(small);
    } finally {
      await small.close();
    }
  });

  async function memoryHogIsReported(sb: DockerSandbox): Promise<void> {
    writeFileSync(join(task.workspace, "hog.py"), "x = []\nwhile True:\n    x.append(b'x' * (32 * 1024 * 1024))\n");
    const direct = await sb.exec(["python3", "hog.py"], { timeoutSec: 60 });
    expect(direct).toMatchObject({ oomKilled: true, exitCode: 137, signal: "SIGKILL", timedOut: false });
    // Through a wrapper that turns the death into exit 1 (as a rank launcher does): still reported.
    const wrapped = await sb.exec(["sh", "-c", "python3 hog.py || exit 1"], { timeoutSec: 60 });
    expect(wrapped).toMatchObject({ oomKilled: true, exitCode: 1 });
    // An ordinary failure afterwards is not blamed on memory; the container is still alive.
    const plain = await sb.exec(["sh", "-c", "exit 137"]);
    expect(plain.exitCode).toBe(137);
    expect(plain.oomKilled).toBeUndefined();
    expect((await sb.exec(["echo", "alive"])).stdout).toBe("alive\n");
  }

  it("runs a 2-rank torch gloo all_reduce inside the container", async () => {
    writeFileSync(
      join(task.workspace, "allreduce.py"),
      [
        "import os, torch, torch.distributed as dist, torch.multiprocessing as mp",
        "def run(rank, world):",
        "    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=os.environ['PORT'])",
        "    dist.init_process_group('gloo', rank=rank, world_size=world)",
        "    t = torch.full((4,), float(rank + 1))",
        "    dist.all_reduce(t)",
        "    print(f'rank {rank} sum {t.tolist()}', flush=True)",
        "    dist.destroy_process_group()",
        "if __name__ == '__main__':",
        "    mp.spawn(run, args=(2,), nprocs=2)",
      ].join("\n"),
    );
    const port = String(20000 + (process.pid % 20000));
    const r = await sb.exec(["python3", "allreduce.py"], { env: { PORT: port }, timeoutSec: 120 });
    expect(r.stderr).not.toMatch(/Traceback/);
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toMatch(/rank 0 sum \[3\.0, 3\.0, 3\.0, 3\.0\]/);
    expect(r.stdout).toMatch(/rank 1 sum \[3\.0, 3\.0, 3\.0, 3\.0\]/);
  });
});
