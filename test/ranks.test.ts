import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createSandbox, type Sandbox } from "../sandbox/index.js";
import { runRanks } from "../sandbox/ranks.js";
import { processesMatching } from "./sandbox-test-helpers.js";

// runRanks end to end: the real Python launcher, real gloo ranks inside the real bubblewrap sandbox,
// per-rank JUnit parsed and merged on the TS side.

const MARKER = `infradev_ranks_marker_${process.pid}`;

const TESTS = `
import os, time
import pytest
import torch
import torch.distributed as dist

MARKER = "${MARKER}"

@pytest.fixture(scope="session", autouse=True)
def group():
    dist.init_process_group("gloo")
    yield
    dist.destroy_process_group()

def test_sum():
    t = torch.ones(4) * (dist.get_rank() + 1)
    dist.all_reduce(t)
    assert t.tolist() == [3.0] * 4

def test_rank1_blocks():
    # rank 0 skips the collective: rank 1 waits forever.
    if dist.get_rank() == 1:
        dist.all_reduce(torch.ones(1))

def test_after_hang():
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [2.0, 2.0]

def test_rank0_fails():
    assert dist.get_rank() != 0, "only rank 0 fails"

def test_zz_rank1_exits():
    if dist.get_rank() == 1:
        os._exit(3)
    dist.barrier()
`;

let dir: string;
let sandbox: Sandbox;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "infradev-ranks-"));
  writeFileSync(join(dir, "test_ranks.py"), TESTS);
  sandbox = await createSandbox({ kind: "local", hostRepoDir: dir });
});
afterAll(async () => {
  await sandbox?.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("runRanks", () => {
  it("merges per-rank results: pass, a hang named as such, the suite continuing, a one-rank failure, a crash", async () => {
    const progress: Array<[number, number]> = [];
    const perTest = 6;
    const started = Date.now();
    const r = await runRanks(sandbox, {
      ranks: 2,
      pytestArgs: ["test_ranks.py"],
      outDir: `.infradev/results/ranks-test-${process.pid}`,
      perTestTimeoutSec: perTest,
      runTimeoutSec: 300,
      onProgress: (done, total) => progress.push([done, total]),
    });
    const elapsed = (Date.now() - started) / 1000;
    expect(r.harnessError).toBeUndefined();
    expect(r.lostRecords).toBeUndefined();
    const byId = Object.fromEntries(r.cases.map((c) => [c.id.split("::")[1], c]));
    expect(byId.test_sum).toMatchObject({ outcome: "passed" });
    expect(byId.test_rank1_blocks).toMatchObject({ outcome: "error", reason: "hang" });
    expect(byId.test_after_hang).toMatchObject({ outcome: "passed" });
    expect(byId.test_rank0_fails!.outcome).toBe("failed");
    expect(byId.test_rank0_fails!.ranks.map((x) => x.outcome)).toEqual(["failed", "passed"]);
    expect(byId.test_rank0_fails!.ranks[0]!.excerpt).toContain("only rank 0 fails");
    expect(byId.test_zz_rank1_exits!.outcome).not.toBe("passed");
    expect(byId.test_zz_rank1_exits!.reason).toBe("crash");
    // Resources per rank come through: the passing all_reduce moved 4 float32 on each rank.
    expect(byId.test_sum!.ranks.map((x) => x.resources?.bytes.all_reduce)).toEqual([16, 16]);
    const hang = r.launch!.events.find((e) => e.kind === "hang");
    expect(hang?.test).toMatch(/test_rank1_blocks$/);
    // Detected within the limit plus a few seconds (restarts and torch imports included in elapsed).
    expect(hang!.after_s).toBeLessThan(perTest + 5);
    expect(elapsed).toBeLessThan(200);
    expect(progress.length).toBeGreaterThan(0);
    expect(progress.at(-1)![1]).toBe(5);
    expect(processesMatching(MARKER)).toEqual([]);
    expect(processesMatching(`ranks-test-${process.pid}`)).toEqual([]);
    // Progress came from the launcher's stderr stream: it counts up to the total and ends there.
    expect(progress.map(([d]) => d)).toEqual([...progress.map(([d]) => d)].sort((a, b) => a - b));
    expect(progress.at(-1)).toEqual([5, 5]);
    // Independent records per rank and session: the hang restarted the ranks (session 1).
    expect(new Set(r.integrity.map((i) => i.session))).toEqual(new Set([0, 1]));
    expect(r.logs.map((l) => l.name)).toEqual(expect.arrayContaining(["rank0.log", "rank1.log", "launcher.txt", "launcher.stderr"]));
  });

  it("reports a launcher that cannot start as lost records (the sandbox ran; a control run tells whose fault), not as failed tests", async () => {
    const broken = await createSandbox({ kind: "local", hostRepoDir: dir, python: "/nonexistent/python3" });
    try {
      const r = await runRanks(broken, { ranks: 2, pytestArgs: ["test_ranks.py"], outDir: ".infradev/results/broken", perTestTimeoutSec: 5, runTimeoutSec: 30 });
      expect(r.harnessError).toBeUndefined();
      expect(r.lostRecords).toMatch(/exited with code 127, not one of its own/);
      expect(r.cases).toEqual([]);
    } finally {
      await broken.close();
    }
  });
});
