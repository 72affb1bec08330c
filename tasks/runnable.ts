import { existsSync } from "node:fs";
import type { PublicSpec } from "./loader.js";

export interface Runnability {
  runnable: boolean;
  reason?: string;
}

/** Whether this machine can run a task at all; the reason is shown, never swallowed. */
export function taskRunnableHere(spec: PublicSpec, probe: { hasGpu?: boolean } = {}): Runnability {
  if (spec.requires_gpu) {
    const hasGpu = probe.hasGpu ?? (existsSync("/dev/nvidiactl") || existsSync("/dev/nvidia0"));
    if (!hasGpu) return { runnable: false, reason: "requires a CUDA GPU; none on this machine (no /dev/nvidia*)" };
  }
  if (spec.env.python.startsWith("/") && !existsSync(spec.env.python)) {
    return { runnable: false, reason: `needs the Python interpreter ${spec.env.python}, which is missing here` };
  }
  return { runnable: true };
}
