import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { JobSpec, JobStatus } from "../../../src/campaign/engines/types.js";
import { engineFor } from "../../../src/campaign/engines/registry.js";
import { KILL_GRACE_MS, LocalEngine, localGpuIds } from "../../../src/campaign/engines/local.js";
import { REPO_ROOT } from "../../helpers/paths.js";

/**
 * The local engine with real child processes: capacity (observed from the jobs' own start/end
 * timestamps), cores and GPUs held, time limits and cancels that end the whole process group, and
 * the watchdog that ends a job when the engine's process is SIGKILLed. No GPU here: the GPU ids are
 * handed to the engine explicitly (a stand-in for `nvidia-smi -L`), which is all its accounting reads.
 */

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-engine-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A job that records when it started and ended (its own clock) and what it was given. */
function timedJob(id: string, ms: number, extra: Partial<JobSpec> = {}): JobSpec {
  const file = join(root, `${id}.times`);
  const code = `const fs=require("fs");const t0=Date.now();setTimeout(()=>{fs.writeFileSync(${JSON.stringify(file)},JSON.stringify({start:t0,end:Date.now(),cuda:process.env.CUDA_VISIBLE_DEVICES}))},${ms})`;
  return { id, argv: [process.execPath, "-e", code], cwd: root, gpus: 0, cpus: 1, timeLimitSec: 60, stdoutPath: join(root, `${id}.out`), stderrPath: join(root, `${id}.err`), ...extra };
}
const times = (id: string) => JSON.parse(readFileSync(join(root, `${id}.times`), "utf8")) as { start: number; end: number; cuda: string };

/** Most jobs running at one instant, from [start, end] intervals. */
function maxOverlap(spans: Array<{ start: number; end: number }>): number {
  const events = spans.flatMap((s) => [[s.start, 1] as const, [s.end, -1] as const]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  let now = 0;
  let most = 0;
  for (const [, d] of events) most = Math.max(most, (now += d));
  return most;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
async function until(what: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!what() && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  return what();
}

describe("local engine", () => {
  it("never runs more than --concurrency jobs at once, and does run that many", async () => {
    const states: string[] = [];
    const engine = await engineFor("local", { concurrency: 2, onState: (job, s) => states.push(`${job.id}:${s.state}`) });
    const ids = ["c1", "c2", "c3", "c4", "c5"];
    const handles = await Promise.all(ids.map((id) => engine.submit({ ...timedJob(id, 600), cpus: 1 })));
    const done = await Promise.all(handles.map((h) => engine.wait(h.engineId)));
    expect(done.map((d) => d.state)).toEqual(ids.map(() => "done"));
    expect(maxOverlap(ids.map(times))).toBe(2);
    expect(states.filter((s) => s.startsWith("c1:"))).toEqual(["c1:queued", "c1:running", "c1:done"]);
    await engine.close();
  });

  it("a job holds its cores: two 2-core jobs on 2 cores run one after the other", async () => {
    const engine = new LocalEngine({ concurrency: 4, cpus: 2, gpuIds: [] });
    const hs = await Promise.all(["w1", "w2"].map((id) => engine.submit(timedJob(id, 400, { cpus: 2 }))));
    await Promise.all(hs.map((h) => engine.wait(h.engineId)));
    expect(maxOverlap(["w1", "w2"].map(times))).toBe(1);
    await engine.close();
  });

  it("a GPU job waits for free GPUs and sees only its own; one that needs more than there are fails at once", async () => {
    const engine = new LocalEngine({ concurrency: 4, cpus: 4, gpuIds: ["0", "1", "2"] });
    const ids = ["g1", "g2"];
    const hs = await Promise.all(ids.map((id) => engine.submit(timedJob(id, 400, { gpus: 2 }))));
    const cpuJob = await engine.submit(timedJob("g-cpu", 100));
    const tooBig = await engine.submit(timedJob("g-big", 100, { gpus: 4 }));
    const big = await engine.wait(tooBig.engineId);
    expect(big.state).toBe("failed");
    expect(big.reason).toMatch(/needs 4 GPU\(s\); this machine has 3/);
    await Promise.all([...hs, cpuJob].map((h) => engine.wait(h.engineId)));
    expect(maxOverlap(ids.map(times))).toBe(1);
    for (const id of ids) expect(times(id).cuda.split(",")).toHaveLength(2);
    expect(times("g-cpu").cuda).toBe("");
    expect(existsSync(join(root, "g-big.times"))).toBe(false);
    await engine.close();
  });

  it("the time limit ends the job's whole process group (state timeout)", async () => {
    const engine = new LocalEngine({ concurrency: 1 });
    const pidFile = join(root, "tl.pid");
    // The job starts a grandchild (same group) and both would sleep for minutes.
    const job: JobSpec = { ...timedJob("tl", 1), argv: ["/bin/sh", "-c", `sleep 300 & echo $! > ${pidFile}; wait`], timeLimitSec: 1 };
    const t0 = Date.now();
    const { engineId } = await engine.submit(job);
    const s = await engine.wait(engineId);
    expect(s.state).toBe("timeout");
    expect(s.reason).toMatch(/time limit of 1 s/);
    expect(Date.now() - t0).toBeLessThan(1000 + KILL_GRACE_MS);
    const grandchild = Number(readFileSync(pidFile, "utf8"));
    expect(await until(() => !alive(grandchild), 2000)).toBe(true);
    await engine.close();
  });

  it("cancel ends a running job's group and drops a queued one without starting it", async () => {
    const engine = new LocalEngine({ concurrency: 1 });
    const pidFile = join(root, "cx.pid");
    const running = await engine.submit({ ...timedJob("cx", 1), argv: ["/bin/sh", "-c", `sleep 300 & echo $! > ${pidFile}; wait`] });
    const queued = await engine.submit(timedJob("cq", 100));
    expect(await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", 5000)).toBe(true);
    expect((await engine.status([queued.engineId]))[0]!.state).toBe("queued");
    await engine.cancel(queued.engineId);
    await engine.cancel(running.engineId);
    const [r, q] = await engine.status([running.engineId, queued.engineId]);
    expect([r!.state, q!.state]).toEqual(["cancelled", "cancelled"]);
    expect(await until(() => !alive(Number(readFileSync(pidFile, "utf8"))), 2000)).toBe(true);
    expect(existsSync(join(root, "cq.times"))).toBe(false);
    await engine.close();
  });

  it("a job that ignores SIGTERM is killed after the grace period", async () => {
    const engine = new LocalEngine({ concurrency: 1 });
    const { engineId } = await engine.submit({ ...timedJob("stubborn", 1), argv: ["/bin/sh", "-c", "trap '' TERM; sleep 300 & wait; sleep 300"], timeLimitSec: 1 });
    const t0 = Date.now();
    const s: JobStatus = await engine.wait(engineId);
    expect(s.state).toBe("timeout");
    expect(Date.now() - t0).toBeGreaterThanOrEqual(KILL_GRACE_MS);
    await engine.close();
  }, 30_000);

  it("when the engine's process is SIGKILLed, its jobs end too (the watchdog's pipe closes)", async () => {
    const pidFile = join(root, "orphan.pid");
    const host = join(root, "host.mts");
    writeFileSync(
      host,
      `import { LocalEngine } from ${JSON.stringify(join(REPO_ROOT, "src", "campaign", "engines", "local.ts"))};
const e = new LocalEngine({ concurrency: 1 });
await e.submit({ id: "orphan", argv: ["/bin/sh", "-c", "sleep 300 & echo $! > ${pidFile}; wait"], cwd: ${JSON.stringify(root)}, gpus: 0, cpus: 1, timeLimitSec: 600, stdoutPath: ${JSON.stringify(join(root, "o.out"))}, stderrPath: ${JSON.stringify(join(root, "o.err"))} });
setInterval(() => {}, 1000);
`,
    );
    const tsx = join(REPO_ROOT, "node_modules", ".bin", "tsx");
    const p = spawn(tsx, [host], { stdio: "ignore" });
    expect(await until(() => existsSync(pidFile) && readFileSync(pidFile, "utf8").trim() !== "", 20_000)).toBe(true);
    const sleeper = Number(readFileSync(pidFile, "utf8"));
    expect(alive(sleeper)).toBe(true);
    // tsx runs the script in a child node: kill the whole tree's leader group by pid, hard.
    const kids = childPids(p.pid!);
    process.kill(p.pid!, "SIGKILL");
    for (const pid of kids) process.kill(pid, "SIGKILL");
    expect(await until(() => !alive(sleeper), 3000)).toBe(true);
  }, 40_000);

  it("reads GPU ids from CUDA_VISIBLE_DEVICES when it is set", () => {
    expect(localGpuIds({ CUDA_VISIBLE_DEVICES: "2,5" })).toEqual(["2", "5"]);
    expect(localGpuIds({ CUDA_VISIBLE_DEVICES: "" })).toEqual([]);
  });
});

/** Direct children of a process (Linux /proc). */
function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}
