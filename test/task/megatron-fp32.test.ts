import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";
import { seedGitCache } from "../helpers/upstream.js";
import { interfaceContract, promptLeaks } from "../../src/grader/check/task-analysis.js";

/**
 * megatron-fp32-local-accum (Megatron-LM PR #4028, scaffolded by `infradev task new`) without a GPU:
 * it loads from the git cache seeded from the bundle, hides the merge commit and the test selection,
 * deselects exactly the 2-GPU cases, tags every promise and every adversarial claim on a probe, and
 * its prompt names the interface contract without copying golden code. The grading runs on an H200
 * (bench/gpu_issue25.sh).
 */

const TASK = "megatron-fp32-local-accum";
let scratch: string;
let restore: () => void;
beforeAll(async () => {
  ({ scratch, restore } = await seedGitCache(["megatron-lm-pr4028"], "infradev-megatron-fp32-"));
});
afterAll(() => restore?.());

describe("megatron-fp32-local-accum", () => {
  it("loads: git source at the PR's base, 1 GPU, the 8 two-GPU cases deselected with a reason, merge grader-only", () => {
    const pub = loadPublicTask(TASK);
    expect(pub.source).toEqual({ kind: "git", url: "https://github.com/NVIDIA/Megatron-LM.git", base: "d45fa3e8e140fe5262179f6f94823869b89026a7" });
    expect(pub.spec).toMatchObject({ category: "training", type: "feature", ranks: 1, requires_gpu: true });
    expect(JSON.stringify(pub.spec)).not.toContain("c586f6d");
    expect(pub.spec).not.toHaveProperty("official_tests");
    const task = loadGraderTask(TASK);
    const deselect = task.fullSpec.official_tests!.deselect;
    expect(deselect.map((d) => d.id.replace(/.*::/, ""))).toEqual(
      ["FFF", "FFT", "FTF", "FTT", "TFF", "TFT", "TTF", "TTT"].map((b) => `test_grad_sync[2-${[...b].map((c) => (c === "T" ? "True" : "False")).join("-")}]`),
    );
    for (const d of deselect) expect(d.reason).toMatch(/2\+ GPUs/);
    const tests = readFileSync(join(task.hidden.testsDir, "tests/unit_tests/distributed/test_param_and_grad_buffer.py"), "utf8");
    expect(tests).toMatch(/class TestFP32LocalGradAccumulation/);
    expect(task.hidden.adversarial.map((a) => a.name).sort()).toEqual(["accumulate-in-bf16", "copy-back-sync-only", "first-pattern-only", "fp32-shadow-whole-buffer", "no-copy-in"]);
    expect(task.hidden.alternatives.map((a) => a.name).sort()).toEqual(["bucket-copy-methods", "flat-fp32-per-buffer", "regex-matcher-param-to-name"]);
    expect(task.hidden.promises?.map((p) => p.id)).toContain("fp32-local-accumulation");
  });

  it("tags every promise and every adversarial claim on a probe of a known kind; no placeholder is left", () => {
    const task = loadGraderTask(TASK);
    const text = readdirSync(task.hidden.probesDir)
      .filter((f) => f.endsWith(".py"))
      .map((f) => readFileSync(join(task.hidden.probesDir, f), "utf8"))
      .join("\n");
    const marks = [...text.matchAll(/@pytest\.mark\.probe\(promise="([^"]+)", kind="([^"]+)"\)/g)];
    const probed = new Set(marks.map((m) => m[1]));
    for (const m of marks) expect(["numerical", "resource", "state", "condition"]).toContain(m[2]);
    for (const p of task.hidden.promises!) expect(probed, p.id).toContain(p.id);
    for (const a of task.hidden.adversarial) for (const p of a.breaks) expect(probed, `${a.name}: ${p}`).toContain(p);
    expect(text + task.prompt).not.toContain("TODO(author)");
  });

  it("names every symbol of the contract in prompt.md and copies no golden code into it", async () => {
    const task = loadGraderTask(TASK);
    const opts = { workDir: join(scratch, "analysis") };
    const contract = await interfaceContract(task, opts);
    expect(contract.map((c) => c.name)).toEqual(expect.arrayContaining(["param_name_patterns_for_fp32_local_accumulation", "params_with_extra_main_grads", "extra_main_grads"]));
    for (const c of contract) expect(task.prompt, `${c.name} (${c.definedAt})`).toContain(c.name.split(".").at(-1)!);
    expect(await promptLeaks(task, opts)).toEqual([]);
  }, 300_000);
});
