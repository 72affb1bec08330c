import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { taskRows } from "../../src/cli/tasks.js";
import { loadPublicTask } from "../../src/task/public/loader.js";
import { loadGraderTask } from "../../src/task/hidden/grader-task.js";
import { taskRunnableHere } from "../../src/task/public/runnable.js";

/**
 * The GPU task `cuda-graph-decode` on a machine without CUDA: it loads, says why it cannot run here,
 * its hidden parts are consistent, and its eager half (official tests, CPU) behaves as the task
 * claims for golden, every adversarial patch and base. The graph half runs only on a GPU
 * (bench/gpu_task_matrix.py).
 */

const TASK = "cuda-graph-decode";
const PYTHON = process.env.INFRADEV_PYTHON ?? "/usr/bin/python3";
const hasTorch = spawnSync(PYTHON, ["-c", "import torch, pytest"], { stdio: "ignore" }).status === 0;
const scratch = mkdtempSync(join(tmpdir(), "infradev-gpu-task-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("cuda-graph-decode: the task files", () => {
  it("loads through both doors with two modes and requires a GPU", () => {
    const pub = loadPublicTask(TASK);
    expect(pub.spec.requires_gpu).toBe(true);
    expect(pub.spec.category).toBe("inference");
    expect(pub.spec.type).toBe("feature");
    expect(pub.spec.ranks).toBe(1);
    expect(pub.spec.modes).toEqual({ eager: { NANODECODE_CUDA_GRAPHS: "0" }, cuda_graphs: { NANODECODE_CUDA_GRAPHS: "1" } });
    expect(pub.prompt).toContain("## Interface contract");
    const task = loadGraderTask(TASK);
    expect(task.hidden.adversarial.map((a) => a.name).sort()).toEqual(["fresh-output-in-graph", "python-side-state", "recapture-every-step"]);
    expect(task.hidden.hollowPatch).not.toBeNull();
  });

  it("is listed as not runnable without CUDA, with the reason", () => {
    expect(taskRunnableHere(loadPublicTask(TASK).spec, { hasGpu: false })).toEqual({
      runnable: false,
      reason: expect.stringMatching(/CUDA GPU/),
    });
    expect(taskRunnableHere(loadPublicTask(TASK).spec, { hasGpu: true }).runnable).toBe(true);
    const row = taskRows().find((r) => r.id === TASK)!;
    const gpuHere = existsSync("/dev/nvidiactl") || existsSync("/dev/nvidia0");
    expect(row.runnable).toBe(gpuHere);
    if (!gpuHere) expect(row.reason).toMatch(/requires a CUDA GPU/);
  });

  it("tags every promise an adversarial patch breaks on some probe, with a valid kind", () => {
    const task = loadGraderTask(TASK);
    const probeText = readdirSync(task.hidden.probesDir)
      .filter((f) => f.endsWith(".py"))
      .map((f) => readFileSync(join(task.hidden.probesDir, f), "utf8"))
      .join("\n");
    const marks = [...probeText.matchAll(/@pytest\.mark\.probe\(promise="([^"]+)", kind="([^"]+)"\)/g)];
    const promises = new Set(marks.map((m) => m[1]));
    for (const m of marks) expect(["numerical", "resource", "state", "condition"]).toContain(m[2]);
    for (const adv of task.hidden.adversarial) for (const p of adv.breaks) expect(promises, `${adv.name} breaks ${p}`).toContain(p);
  });

  it("has patches that apply to the pre-PR snapshot and never touch tests/", () => {
    const task = loadGraderTask(TASK);
    const patches = [task.hidden.goldenPatch, task.hidden.hollowPatch!, ...task.hidden.adversarial.map((a) => a.patchPath)];
    for (const patch of patches) {
      const dir = join(scratch, `apply-${patches.indexOf(patch)}`);
      cpSync(join(task.taskDir, "repo"), dir, { recursive: true });
      execFileSync("git", ["init", "-q"], { cwd: dir });
      execFileSync("git", ["apply", "--check", patch], { cwd: dir });
      expect(readFileSync(patch, "utf8")).not.toMatch(/^\+\+\+ b\/tests\//m);
    }
  });
});

/** A fresh copy of the snapshot with a patch applied and the post-PR tests in place. */
function workspace(name: string, patch: string | null): string {
  const task = loadGraderTask(TASK);
  const dir = join(scratch, name);
  cpSync(join(task.taskDir, "repo"), dir, { recursive: true });
  execFileSync("git", ["init", "-q"], { cwd: dir });
  if (patch) execFileSync("git", ["apply", patch], { cwd: dir });
  rmSync(join(dir, "tests"), { recursive: true, force: true });
  cpSync(join(task.hidden.testsDir, "tests"), join(dir, "tests"), { recursive: true });
  return dir;
}

function officialTestsOnCpu(dir: string): { code: number | null; tail: string } {
  const r = spawnSync(PYTHON, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], {
    cwd: dir,
    env: { ...process.env, NANODECODE_DEVICE: "cpu", NANODECODE_CUDA_GRAPHS: "0", CUDA_VISIBLE_DEVICES: "" },
    encoding: "utf8",
    timeout: 120_000,
  });
  return { code: r.status, tail: `${r.stdout}${r.stderr}`.trim().split("\n").slice(-3).join("\n") };
}

describe.skipIf(!hasTorch)("cuda-graph-decode: official tests in eager mode on CPU", () => {
  it("pass with the golden patch and with every adversarial patch", () => {
    const task = loadGraderTask(TASK);
    for (const [name, patch] of [["golden", task.hidden.goldenPatch], ...task.hidden.adversarial.map((a) => [a.name, a.patchPath])] as const) {
      const r = officialTestsOnCpu(workspace(`eager-${name}`, patch));
      expect(r.code, `${name}: ${r.tail}`).toBe(0);
      expect(r.tail).toMatch(/passed/);
    }
  });

  it("fail on the pre-PR base and on the hollow patch", () => {
    const task = loadGraderTask(TASK);
    expect(officialTestsOnCpu(workspace("eager-base", null)).code).not.toBe(0);
    expect(officialTestsOnCpu(workspace("eager-hollow", task.hidden.hollowPatch)).code).not.toBe(0);
  });
});
