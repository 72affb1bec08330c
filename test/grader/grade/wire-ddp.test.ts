import { DIRECT_BACKEND_PY } from "../../helpers/attack-snippets.js";
import { TEST_FIXTURES } from "../../helpers/paths.js";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { calibrate } from "../../../src/grader/grade/calibrate.js";
import { gradeSubmission } from "../../../src/grader/grade/grade.js";
import { graderSandboxFactory } from "../../../src/grader/grade/sandbox-factory.js";
import type { Calibration, SessionResult } from "../../../src/grader/grade/types.js";
import { createSnapshot, diffAgainstBase } from "../../../src/task/public/snapshot.js";
import { loadGraderTask, type GraderTask } from "../../../src/task/hidden/grader-task.js";

/**
 * The wire verdict where gold's own tests send traffic no counter sees (wire-judge.ts): the tiny-mean
 * fixture with one more official test that trains a DistributedDataParallel model, whose reducer
 * all-reduces the gradients from C++ (the Python counters never see them; the kernel does). Real
 * bwrap, real 2-rank gloo sessions.
 *
 * - Gold's official session exceeds the bound: calibration lists it in `wire_unexplained`, gold is
 *   never tampered, and `task check` says the wire verdict is off there.
 * - Gold graded again is not tampered: in that session neither rule applies (gold's uncounted DDP
 *   traffic varied 2x between two runs of gold when this test held it to the residual: measured).
 * - A patch that smuggles an all-reduce through the backend method dug out of the counter's closure
 *   on every call is tampered by the probe session, where gold's traffic is explained and the
 *   verdict stays on — and not by the official session, where it is off.
 */

const DDP_TEST = `import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def test_ddp_steps_agree_across_ranks():
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(512, 512))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.full((4, 512), float(dist.get_rank() + step))
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()
    w = model.module.weight.detach().clone()
    ws = [torch.empty_like(w) for _ in range(dist.get_world_size())]
    dist.all_gather(ws, w)
    assert all(torch.equal(ws[0], v) for v in ws)
`;

// all_mean right, plus 4 MiB all-reduced through the uncounted backend method on every call.
const SMUGGLE = `${DIRECT_BACKEND_PY}

def all_mean(t: torch.Tensor) -> torch.Tensor:
    pg = dist.distributed_c10d._get_default_group()
    _direct(pg, "all" + "reduce")(pg, [torch.zeros(1 << 20)]).wait()
    out = t.clone()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out / dist.get_world_size()
`;

let root: string;
let task: GraderTask;
let calibration: Calibration;
const sandboxFactory = () => graderSandboxFactory("local", [root], {});

describe("wire verdict where gold's tests reach the process group from C++ (DDP)", () => {
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), "infradev-wire-ddp-"));
    const tasks = join(root, "tasks");
    cpSync(join(TEST_FIXTURES, "grader", "tasks", "tiny-mean"), join(tasks, "tiny-mean"), { recursive: true });
    writeFileSync(join(tasks, "tiny-mean", "hidden", "tests", "tests", "test_ddp.py"), DDP_TEST);
    task = loadGraderTask("tiny-mean", tasks);
    // One calibration run (not 3): the stricter reference for the regrade of gold below, and a minute
    // less of CI.
    calibration = (await calibrate({ task, cacheDir: join(root, "cal"), sandboxFactory: sandboxFactory(), runs: 1 })).calibration;
  }, 400_000);
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it("gold's official session exceeds the bound: listed in wire_unexplained, gold not tampered, its residual kept", () => {
    expect(calibration.wire_unexplained).toEqual(["cpu.official"]);
    expect(calibration.wire_reference?.["cpu.official"]?.payload_max).toBeGreaterThan(3e6); // DDP: 3 steps of 1 MiB gradients and the parameters' broadcast
    expect(Object.keys(calibration.wire_reference ?? {}).sort()).toEqual(["cpu.official", "cpu.probe"]);
  });

  it("gold graded again is not tampered; a patch smuggling all-reduces past the counters is, by the session where the verdict is on", async () => {
    const gold = await gradeSubmission({ task, patchFile: task.hidden.goldenPatch, outDir: join(root, "out"), calibration, sandboxFactory: sandboxFactory() });
    expect(gold.result.tamper_evidence).toEqual([]);
    expect(gold.result.status).toBe("graded");
    const official = JSON.parse(readFileSync(join(gold.artifactDir, "sessions", "cpu.official.json"), "utf8")) as SessionResult;
    expect(official.wire?.verdict, "gold's own DDP traffic is beyond the bound").toBe(true);

    const src = join(root, "src-smuggle");
    await createSnapshot(task, src);
    const ops = join(src, "tinyinfra", "ops.py");
    writeFileSync(ops, readFileSync(ops, "utf8") + SMUGGLE);
    const patch = join(root, "smuggle.patch");
    writeFileSync(patch, await diffAgainstBase(src));
    const bad = await gradeSubmission({ task, patchFile: patch, outDir: join(root, "out"), calibration, sandboxFactory: sandboxFactory() });
    const why = JSON.stringify({ status: bad.result.status, evidence: bad.result.tamper_evidence, sessions: readdirSync(join(bad.artifactDir, "sessions")) });
    expect(bad.result.status, why).toBe("tampered");
    const lines = bad.result.tamper_evidence.join("\n");
    expect(lines, why).toMatch(/cpu\.probe: .*collectives run past the counters/);
    expect(lines, why).not.toMatch(/cpu\.official: .*loopback/);
  }, 300_000);
});
