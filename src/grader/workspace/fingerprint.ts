import { mkdtempSync, rmSync } from "node:fs";
import { cpus, platform, release, tmpdir } from "node:os";
import { join } from "node:path";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { sha256 } from "../../lib/files.js";
import type { SandboxFactory } from "../grade/pipeline.js";
import type { HardwareFingerprint } from "../grade/types.js";

/**
 * Run by the tests' interpreter inside the sandbox: torch's version without importing torch (an
 * import costs seconds: torch/version.py, found with find_spec, else the package's metadata), the
 * interpreter itself, and the GPUs nvidia-smi lists there. One JSON line on stdout.
 */
const PROBE_PY = `
import importlib.util, json, os, re, shutil, subprocess, sys
v = None
try:
    spec = importlib.util.find_spec("torch")
except Exception as e:
    spec, v = None, "unknown (%s)" % type(e).__name__
if v is None and (spec is None or not spec.origin):
    v = "none"
elif v is None:
    try:
        with open(os.path.join(os.path.dirname(spec.origin), "version.py")) as f:
            m = re.search(r"^__version__\\s*=\\s*['\\"]([^'\\"]+)", f.read(), re.M)
            v = m.group(1) if m else None
    except OSError:
        pass
    if v is None:
        import importlib.metadata
        v = importlib.metadata.version("torch")
gpus = []
smi = shutil.which("nvidia-smi")
if smi:
    try:
        r = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        if r.returncode == 0:
            gpus = [l.strip() for l in r.stdout.splitlines() if l.strip()]
    except Exception:
        pass
print(json.dumps({"torch": v, "python": "%s %s" % (sys.executable, sys.version.split()[0]), "gpus": gpus}))
`;

/**
 * What gold's calibration depends on besides the task, taken WHERE THE TESTS RUN: a sandbox from the
 * grader's own factory (the same backend, image, interpreter and task environment as the graded
 * runs; for docker the image's interpreter), over an empty folder, runs PROBE_PY. CPU model and
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
      const r = await sandbox.exec([sandbox.python, "-c", PROBE_PY], { env: task.fullSpec.env.vars, timeoutSec: 60 });
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
