import { spawnSync } from "node:child_process";
import { cpSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { packageRoot } from "../../src/lib/paths.js";
import { TaskError } from "../../src/task/public/errors.js";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";
import { taskRunnableHere } from "../../src/task/public/runnable.js";
import { seedGitCache } from "../helpers/upstream.js";
import { interfaceContract, promptLeaks } from "../../src/grader/check/task-analysis.js";

/**
 * megatron-param-layout (Megatron-LM PR #3812) without a GPU: the task loads from the git cache
 * seeded from the bundle, its public view names no post-PR commit, its grader files are
 * consistent, its prompt names the interface contract and leaks no golden code, and every command
 * that would run it refuses here (exit 2, one line). The grading itself runs on an H200
 * (bench/gpu_check_megatron.sh; bench/gpu_check_megatron-param-layout.json).
 */

const TASK = "megatron-param-layout";
const tsx = join(packageRoot(), "node_modules", ".bin", "tsx");
let scratch: string;
let restore: () => void;
beforeAll(async () => {
  ({ scratch, restore } = await seedGitCache(["megatron-lm-pr3812"], "infradev-megatron-"));
});
afterAll(() => restore?.());

describe("megatron-param-layout", () => {
  it("loads: a git source at the PR's base, 1 GPU, the post-PR commit and test selection grader-only", () => {
    const pub = loadPublicTask(TASK);
    expect(pub.source).toEqual({ kind: "git", url: "https://github.com/NVIDIA/Megatron-LM.git", base: "40627d00d96cef74aceab35e0e3c170e900f3aff" });
    expect(pub.spec).toMatchObject({ category: "training", type: "refactor", ranks: 1, requires_gpu: true });
    expect(JSON.stringify(pub.spec)).not.toContain("55b8111");
    expect(pub.spec).not.toHaveProperty("official_tests");
    expect(pub.prompt).toContain("## Interface contract");
    const task = loadGraderTask(TASK);
    expect(task.fullSpec.official_tests?.deselect.map((d) => d.id.replace(/.*::/, ""))).toEqual(
      ["FFF", "FFT", "FTF", "FTT", "TFF", "TFT", "TTF", "TTT"].map((b) => `test_grad_sync[2-${[...b].map((c) => (c === "T" ? "True" : "False")).join("-")}]`),
    );
    expect(task.hidden.adversarial.map((a) => a.name).sort()).toEqual(["expert-default-size-one", "ignore-layout-kwarg", "layout-not-checked", "unpadded-drops-alignment"]);
    expect(task.hidden.alternatives.map((a) => a.name).sort()).toEqual(["layout-function-plain-buffer", "two-pass-layout-per-group"]);
    expect(task.hidden.promises?.length).toBe(11);
  });

  it("selects official tests that exist in the post-PR tests, with the deselected cases' function", () => {
    const task = loadGraderTask(TASK);
    for (const p of task.fullSpec.official_tests!.paths!) expect(readFileSync(join(task.hidden.testsDir, p), "utf8")).toMatch(/def test_/);
    const buffer = readFileSync(join(task.hidden.testsDir, "tests/unit_tests/distributed/test_param_and_grad_buffer.py"), "utf8");
    expect(buffer).toMatch(/@pytest\.mark\.parametrize\("num_distributed_optimizer_instances", \[1, 2\]\)\ndef test_grad_sync\(/);
  });

  it("tags every promise an adversarial patch breaks on a probe; every promise has a probe", () => {
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
  });

  it("has a public export without hidden/ that the server side can load and the grader cannot", () => {
    const dir = join(scratch, "export", TASK);
    cpSync(join(packageRoot(), "tasks", TASK), dir, { recursive: true, filter: (src) => !src.includes(`${TASK}/hidden`) });
    expect(readdirSync(dir).sort()).toEqual(["README.md", "prompt.md", "task.yaml"].filter((f) => readdirSync(join(packageRoot(), "tasks", TASK)).includes(f)).sort());
    expect(loadPublicTask(dir).prompt).toBe(loadPublicTask(TASK).prompt);
    expect(() => loadGraderTask(dir)).toThrow(TaskError);
  });

  it("names every symbol of the contract in prompt.md and copies no golden code into it", async () => {
    const task = loadGraderTask(TASK);
    const opts = { workDir: join(scratch, "analysis") };
    const contract = await interfaceContract(task, opts);
    expect(contract.map((c) => c.name)).toEqual(expect.arrayContaining(["compute_full_param_layout", "full_param_layout", "param_layout", "group_params_for_buffers", "pad_bucket_end"]));
    for (const c of contract) expect(task.prompt, `${c.name} (${c.definedAt})`).toContain(c.name.split(".").at(-1)!);
    expect(await promptLeaks(task, opts)).toEqual([]);
  }, 120_000);

  it("is refused here without a GPU: not runnable, exit 2 in one line, nothing run", () => {
    expect(taskRunnableHere(loadPublicTask(TASK).spec, { hasGpu: false })).toEqual({ runnable: false, reason: expect.stringMatching(/requires a CUDA GPU/) });
    const r = spawnSync(tsx, [join(packageRoot(), "src", "cli", "main.ts"), "task", "check", TASK, "--no-mutants", "--out", join(scratch, "check"), "--calibration-dir", join(scratch, "cal")], {
      encoding: "utf8",
      env: { ...process.env },
    });
    expect(r.status).toBe(2);
    expect(r.stderr.trim().split("\n")).toHaveLength(1);
    expect(r.stderr).toMatch(/task megatron-param-layout cannot run on this machine: requires a CUDA GPU/);
  });
});

describe("official_tests in installed names (grader/official-select.ts)", () => {
  it("maps real modules and case ids to this install's names, and keeps only the canaries that run", async () => {
    const { installedIdOf, officialSelection } = await import("../../src/grader/grade/official-select.js");
    const map = {
      files: {
        "t/test_aaaa.py": { real: "t/test_a.py", suite: "official" as const, names: { test_qq: "test_grad_sync", TestZz: "TestBuf" }, methods: { TestZz: { test_mm: "test_x" } }, known: [], twins: { test_tw: "test_grad_sync" } },
        "t/test_bbbb.py": { real: "t/test_b.py", suite: "official" as const, names: { test_rr: "test_other" }, methods: {}, known: [], twins: { test_tw2: "test_other" } },
        "t/test_cccc.py": { real: "infradev_canaries/official/test_c0.py", suite: "canary" as const, names: { test_pass_1: "test_pass_1" }, methods: {}, known: [] },
      },
      markers: {},
    };
    expect(installedIdOf(map, "t/test_a.py::test_grad_sync[2-False]")).toBe("t/test_aaaa.py::test_qq[2-False]");
    expect(installedIdOf(map, "t/test_a.py::TestBuf::test_x[1]")).toBe("t/test_aaaa.py::TestZz::test_mm[1]");
    expect(installedIdOf(map, "t/test_nope.py::test_x")).toBeNull();
    const spec = { id: "x", official_tests: { paths: ["t/test_a.py"], deselect: [{ id: "t/test_a.py::test_grad_sync[2-False]", reason: "needs two GPUs" }] } };
    const sel = officialSelection(spec, map)!;
    expect(sel.paths).toEqual(["t/test_aaaa.py", "t/test_cccc.py"]);
    expect(sel.options).toEqual(["--deselect=t/test_aaaa.py::test_qq[2-False]"]);
    expect(sel.canaries({ installed: "t/test_aaaa.py::test_tw", real: "", expected: "not_passed", location: "official" })).toBe(true);
    expect(sel.canaries({ installed: "t/test_bbbb.py::test_tw2", real: "", expected: "not_passed", location: "official" })).toBe(false);
    expect(() => officialSelection({ ...spec, official_tests: { paths: ["t/test_missing.py"], deselect: [] } }, map)).toThrow(/official_tests\.paths: "t\/test_missing\.py" is not a test module/);
  });
});
