import { mkdtempSync, rmSync } from "node:fs";
import { cpus, platform, release, tmpdir } from "node:os";
import { join, posix } from "node:path";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { sha256 } from "../../lib/files.js";
import type { SandboxFactory } from "../grade/pipeline.js";
import type { HardwareFingerprint } from "../grade/types.js";

/**
 * What gold's calibration depends on besides the task, taken WHERE THE TESTS RUN: a sandbox from the
 * grader's own factory (the same backend, image, interpreter and task environment as the graded
 * runs; for docker the image's interpreter), over an empty folder, runs python/sandbox/infradev_fingerprint.py. CPU model and
 * count and the kernel are the host's. When the sandbox or the interpreter fails, the fields say
 * `unknown (why)` (the graded run then fails in the same way, as a harness fault).
 */
export async function hardwareFingerprint(task: GraderTask, sandboxFactory: SandboxFactory): Promise<HardwareFingerprint> {
  const cpu = cpus();
  const host = { cpu_model: cpu[0]?.model.trim() ?? "unknown", cpu_count: cpu.length, platform: `${platform()} ${release().split(".").slice(0, 2).join(".")}` };
  const empty = mkdtempSync(join(tmpdir(), "infradev-fingerprint-"));
  try {
    let sandbox: Awaited<ReturnType<SandboxFactory>>;
    try {
      sandbox = await sandboxFactory({ task, hostRepoDir: empty });
    } catch (e) {
      const why = `unknown (the sandbox could not start: ${(e as Error).message.split("\n")[0]})`;
      return { ...host, gpus: [], torch: why, sandbox: "unknown", python: why };
    }
    try {
      const r = await sandbox.exec([sandbox.python, posix.join(sandbox.pythonHelpersDir, "infradev_fingerprint.py")], { env: task.fullSpec.env.vars, timeoutSec: 60 });
      const line = r.stdout.trim().split("\n").pop() ?? "";
      try {
        const got = JSON.parse(line) as { torch: string; python: string; gpus: string[] };
        return { ...host, gpus: got.gpus, torch: got.torch, sandbox: sandbox.kind, python: got.python };
      } catch {
        const why = `unknown (${sandbox.python} in the ${sandbox.kind} sandbox: ${r.harnessError ?? `exit ${r.exitCode}: ${(r.stderr.trim().split("\n").pop() ?? "").slice(0, 200)}`})`;
        return { ...host, gpus: [], torch: why, sandbox: sandbox.kind, python: why };
      }
    } finally {
      await sandbox.close();
    }
  } finally {
    rmSync(empty, { recursive: true, force: true });
  }
}

export function fingerprintHash(fp: HardwareFingerprint): string {
  return sha256(JSON.stringify([fp.cpu_model, fp.cpu_count, fp.gpus, fp.torch, fp.platform, fp.sandbox, fp.python])).slice(0, 16);
}
