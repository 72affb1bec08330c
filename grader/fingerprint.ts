import { cpus, platform, release } from "node:os";
import { execa } from "execa";
import { sha256 } from "./files.js";
import type { HardwareFingerprint } from "./types.js";

/**
 * torch's version without importing torch (an import costs seconds): torch/version.py, found with
 * find_spec, else the installed package's metadata.
 */
const TORCH_VERSION_PY = `
import importlib.util, os, re
v = None
spec = importlib.util.find_spec("torch")
if spec is None or not spec.origin:
    v = "none"
else:
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            m = re.search(r"^__version__\\s*=\\s*['\\"]([^'\\"]+)", f.read(), re.M)
            v = m.group(1) if m else None
    except OSError:
        pass
    if v is None:
        import importlib.metadata
        v = importlib.metadata.version("torch")
print(v)
`;

/**
 * What gold's calibration depends on besides the task: CPU model and count, GPU names (nvidia-smi,
 * when present) and the torch version of the task's interpreter (torch is not imported).
 */
export async function hardwareFingerprint(python: string): Promise<HardwareFingerprint> {
  const cpu = cpus();
  const [smi, torch] = await Promise.all([
    execa("nvidia-smi", ["--query-gpu=name", "--format=csv,noheader"], { reject: false, timeout: 20_000, stdin: "ignore" }),
    execa(python, ["-c", TORCH_VERSION_PY], { reject: false, timeout: 60_000, stdin: "ignore" }),
  ]);
  const gpus = smi.exitCode === 0 ? smi.stdout.split("\n").map((l) => l.trim()).filter(Boolean) : [];
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
