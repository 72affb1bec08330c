import { cpus, platform, release } from "node:os";
import { execa } from "execa";
import { sha256 } from "./files.js";
import type { HardwareFingerprint } from "./types.js";

/**
 * What gold's calibration depends on besides the task: CPU model and count, GPU names (nvidia-smi,
 * when present) and the torch version of the task's interpreter (read from package metadata, so
 * torch is not imported).
 */
export async function hardwareFingerprint(python: string): Promise<HardwareFingerprint> {
  const cpu = cpus();
  const smi = await execa("nvidia-smi", ["--query-gpu=name", "--format=csv,noheader"], { reject: false, timeout: 20_000, stdin: "ignore" });
  const gpus = smi.exitCode === 0 ? smi.stdout.split("\n").map((l) => l.trim()).filter(Boolean) : [];
  const torch = await execa(
    python,
    ["-c", "import importlib.metadata as m\ntry:\n print(m.version('torch'))\nexcept Exception:\n print('none')"],
    { reject: false, timeout: 60_000, stdin: "ignore" },
  );
  return {
    cpu_model: cpu[0]?.model.trim() ?? "unknown",
    cpu_count: cpu.length,
    gpus,
    torch: torch.exitCode === 0 ? torch.stdout.trim() : `unknown (${python} failed)`,
    platform: `${platform()} ${release().split(".").slice(0, 2).join(".")}`,
  };
}

export function fingerprintHash(fp: HardwareFingerprint): string {
  return sha256(JSON.stringify([fp.cpu_model, fp.cpu_count, fp.gpus, fp.torch, fp.platform])).slice(0, 16);
}
