import { REPO_ROOT } from "../helpers/paths.js";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { formatDoctor, runDoctor } from "../../src/cli/doctor.js";

/**
 * `infradev doctor` on whatever node runs the tests. On a CPU node (CI) it must say "no CUDA" in so
 * many words and `--gpu` must fail; on a GPU node the CUDA checks must pass.
 */

const PYTHON = process.env.INFRADEV_PYTHON ?? "/usr/bin/python3";
const hasTorch = spawnSync(PYTHON, ["-c", "import torch"], { stdio: "ignore" }).status === 0;
const hasCuda = hasTorch && spawnSync(PYTHON, ["-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"], { stdio: "ignore" }).status === 0;

describe.skipIf(!hasTorch)("infradev doctor", () => {
  it("reports python, torch and every check, each with ok true / false / null and a detail", async () => {
    const report = await runDoctor({ python: PYTHON, skipSlow: true });
    expect(report.python).toBe(PYTHON);
    expect(Object.keys(report.checks)).toEqual(["python", "torch", "devices", "cuda_peak", "nccl", "torchrun", "bwrap"]);
    for (const check of Object.values(report.checks)) {
      expect([true, false, null]).toContain(check.ok);
      expect(check.detail.length).toBeGreaterThan(0);
    }
    expect(report.checks.torch!.ok).toBe(true);
    expect(report.checks.torch!.version).toMatch(/^\d+\.\d+/);
  });

  it.skipIf(hasCuda)("says 'no CUDA' clearly on a CPU node and fails with --gpu", async () => {
    const plain = await runDoctor({ python: PYTHON, skipSlow: true });
    expect(plain.cuda).toBe(false);
    expect(plain.checks.devices!.ok).toBeNull();
    expect(plain.checks.devices!.detail).toMatch(/^no CUDA/);
    expect(plain.checks.cuda_peak!.ok).toBeNull();
    expect(plain.exit_code).toBe(0);
    expect(formatDoctor(plain)).toMatch(/no CUDA on this node: .*not runnable here/);

    const gpu = await runDoctor({ python: PYTHON, skipSlow: true, gpu: true });
    expect(gpu.exit_code).toBe(1);
    expect(formatDoctor(gpu)).toContain("doctor --gpu: FAILED (this node has no usable GPU)");
  });

  it.skipIf(!hasCuda)("on a GPU node: the 1 GiB peak is within 1% and NCCL works", async () => {
    const report = await runDoctor({ python: PYTHON, skipSlow: true, gpu: true });
    expect(report.checks.cuda_peak!.ok).toBe(true);
    expect(report.checks.nccl!.ok).toBe(true);
    expect(report.exit_code).toBe(0);
  });

  it("exits non-zero from the CLI with --gpu on a node without CUDA", () => {
    const tsx = join(REPO_ROOT, "node_modules", ".bin", "tsx");
    if (!existsSync(tsx)) return;
    const r = spawnSync(tsx, [join(REPO_ROOT, "src", "cli", "main.ts"), "doctor", "--gpu", "--skip-slow", "--python", PYTHON], {
      encoding: "utf8",
      timeout: 120_000,
    });
    expect(r.stdout).toContain("check");
    expect(r.status).toBe(hasCuda ? 0 : 1);
    if (!hasCuda) expect(r.stdout).toContain("no CUDA on this node");
  });

  it("names the interpreter when it cannot run", async () => {
    await expect(runDoctor({ python: "/nonexistent/python3" })).rejects.toThrow(/could not run \/nonexistent\/python3.*--python/);
  });
});
