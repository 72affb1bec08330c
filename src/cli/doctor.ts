import type { Command } from "commander";
import { execa } from "execa";
import { join } from "node:path";
import { hostPythonDir } from "../lib/paths.js";
import { formatTable } from "./tasks.js";

/** One check of python/host/infradev_doctor.py: ok true / false, or null where it does not apply. */
export interface DoctorCheck {
  ok: boolean | null;
  detail: string;
  [figure: string]: unknown;
}

export interface DoctorReport {
  checks: Record<string, DoctorCheck>;
  device_list: { index: number; name: string; total_memory_bytes: number; capability: string }[];
  cuda: boolean;
  gpu_required: boolean;
  exit_code: number;
  /** The interpreter that ran the checks (added on the Node side). */
  python: string;
}

export interface DoctorOptions {
  gpu?: boolean;
  python?: string;
  skipSlow?: boolean;
  timeoutSec?: number;
}

const CHECK_ORDER = ["python", "torch", "devices", "cuda_peak", "nccl", "torchrun", "bwrap"];

async function importsTorch(python: string): Promise<boolean> {
  const r = await execa(python, ["-c", "import torch"], { reject: false, stdin: "ignore", timeout: 60_000 });
  return r.exitCode === 0;
}

/**
 * The interpreter the probes would use: an explicit one, else $INFRADEV_PYTHON, else the first of
 * `python3` on PATH and /usr/bin/python3 that imports torch (GPU images keep torch in their own
 * environment; Debian keeps it in /usr/bin/python3).
 */
export async function choosePython(explicit?: string): Promise<string> {
  if (explicit) return explicit;
  if (process.env.INFRADEV_PYTHON) return process.env.INFRADEV_PYTHON;
  for (const candidate of ["python3", "/usr/bin/python3"]) {
    if (await importsTorch(candidate)) return candidate;
  }
  return "python3";
}

/** Runs the Python checks and returns their report; throws with the interpreter's output if it gave none. */
export async function runDoctor(opts: DoctorOptions = {}): Promise<DoctorReport> {
  const python = await choosePython(opts.python);
  const args = [join(hostPythonDir(), "infradev_doctor.py")];
  if (opts.gpu) args.push("--gpu");
  if (opts.skipSlow) args.push("--skip-slow");
  const r = await execa(python, args, { reject: false, stdin: "ignore", timeout: (opts.timeoutSec ?? 300) * 1000 });
  if (r.failed && r.exitCode === undefined) {
    throw new Error(`doctor: could not run ${python} (${(r.shortMessage ?? "").split("\n")[0]}); pass --python <interpreter> or set INFRADEV_PYTHON`);
  }
  try {
    return { ...(JSON.parse(r.stdout) as Omit<DoctorReport, "python">), python };
  } catch {
    const tail = `${r.stderr}\n${r.stdout}`.trim().split("\n").slice(-5).join("\n");
    throw new Error(`doctor: ${python} infradev_doctor.py exited ${r.exitCode} without a report:\n${tail}`);
  }
}

function status(name: string, check: DoctorCheck): string {
  if (check.ok === true) return "ok";
  if (check.ok === null) return "n/a";
  return name === "bwrap" || name === "torchrun" ? "WARN" : "FAIL";
}

/** The human-readable report: one row per check, then the verdict (no CUDA said in so many words). */
export function formatDoctor(report: DoctorReport): string {
  const names = [...CHECK_ORDER.filter((n) => n in report.checks), ...Object.keys(report.checks).filter((n) => !CHECK_ORDER.includes(n))];
  const rows = names.map((n) => [n, status(n, report.checks[n]!), report.checks[n]!.detail]);
  const lines = [`interpreter: ${report.python}`, formatTable(["check", "status", "detail"], rows), ""];
  if (!report.cuda) {
    const why = (report.checks.devices?.detail ?? "no GPU visible").replace(/^no CUDA:\s*/, "");
    lines.push(`no CUDA on this node: ${why}; tasks with requires_gpu are not runnable here.`);
  } else {
    lines.push(`CUDA: ${report.device_list.length} device(s); the probes measure the CUDA allocator's peak on them.`);
  }
  if (report.exit_code !== 0) {
    lines.push(report.gpu_required && !report.cuda ? "doctor --gpu: FAILED (this node has no usable GPU)" : "doctor: FAILED (see the FAIL rows)");
  } else {
    lines.push(report.gpu_required ? "doctor --gpu: every GPU check passed" : "doctor: ok");
  }
  return `${lines.join("\n")}\n`;
}

export function registerDoctorCommands(program: Command): void {
  program
    .command("doctor")
    .description("what the probes see on this node: Python, torch, GPUs, the CUDA peak measurement, NCCL, torchrun, bwrap")
    .option("--gpu", "require a working GPU: exit 1 when CUDA, the peak measurement or NCCL is missing")
    .option("--json", "print the report as JSON")
    .option("--python <interpreter>", "the Python to check (default: $INFRADEV_PYTHON, else the first python3 that imports torch)")
    .option("--skip-slow", "skip the torchrun launch")
    .action(async (opts: { gpu?: boolean; json?: boolean; python?: string; skipSlow?: boolean }) => {
      const report = await runDoctor({ gpu: opts.gpu, python: opts.python, skipSlow: opts.skipSlow });
      process.stdout.write(opts.json ? `${JSON.stringify(report, null, 2)}\n` : formatDoctor(report));
      process.exitCode = report.exit_code;
    });
}
