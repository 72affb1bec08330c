import { existsSync } from "node:fs";
import { UsageError } from "../../lib/errors.js";
import type { PublicSpec } from "./loader.js";

export interface Runnability {
  runnable: boolean;
  reason?: string;
}

/** Where the interpreter of a task's tests came from (the one rule: taskPython). */
export type PythonSource = "--python" | "INFRADEV_PYTHON" | "task.yaml env.python";

/**
 * The interpreter the task's tests run with, everywhere (grade, calibrate, demo, serve): `--python`
 * when given, else $INFRADEV_PYTHON, else task.yaml's `env.python` (default /usr/bin/python3). With
 * --sandbox docker it names the interpreter inside the image.
 */
export function taskPython(spec: Pick<PublicSpec, "env">, explicit?: string, env: NodeJS.ProcessEnv = process.env): { python: string; source: PythonSource } {
  if (explicit) return { python: explicit, source: "--python" };
  if (env.INFRADEV_PYTHON) return { python: env.INFRADEV_PYTHON, source: "INFRADEV_PYTHON" };
  return { python: spec.env.python, source: "task.yaml env.python" };
}

export interface RunnableProbe {
  /** Test hook: whether the machine has a CUDA GPU (default: /dev/nvidiactl or /dev/nvidia0 exists). */
  hasGpu?: boolean;
  /** The interpreter the tests would use (default: task.yaml's env.python). */
  python?: string;
  /** docker: the interpreter lives in the image, so the host's file system says nothing about it. */
  sandbox?: string;
}

/** Whether this machine can run a task at all; the reason is shown, never swallowed. */
export function taskRunnableHere(spec: Pick<PublicSpec, "env" | "requires_gpu">, probe: RunnableProbe = {}): Runnability {
  if (spec.requires_gpu) {
    const hasGpu = probe.hasGpu ?? (existsSync("/dev/nvidiactl") || existsSync("/dev/nvidia0"));
    if (!hasGpu) return { runnable: false, reason: "requires a CUDA GPU; none on this machine (no /dev/nvidia*)" };
  }
  const python = probe.python ?? spec.env.python;
  if (probe.sandbox !== "docker" && python.startsWith("/") && !existsSync(python)) {
    return { runnable: false, reason: `needs the Python interpreter ${python}, which is missing here` };
  }
  return { runnable: true };
}

/** The flag that grades a task this machine cannot run (for experts: its results describe this machine, not the task). */
export const SKIP_RUNNABLE_FLAG = "--skip-runnable-check";

/** A task this node cannot run, refused before anything is calibrated, cached or served (exit 2). */
export class NotRunnableError extends UsageError {
  constructor(
    readonly taskId: string,
    readonly reason: string,
    command: string,
  ) {
    super(`${command ? `${command}: ` : ""}task ${taskId} cannot run on this machine: ${reason}; nothing was run or cached (${SKIP_RUNNABLE_FLAG} runs it anyway, for experts)`);
    this.name = "NotRunnableError";
  }
}

export interface RequireRunnableOptions extends RunnableProbe {
  /** The command's name, for the message (`grade`, `calibrate`, `demo`, `serve`); "" for none (a caller that prefixes it itself). */
  command: string;
  /** SKIP_RUNNABLE_FLAG was given: warn loudly instead of refusing. */
  skipCheck?: boolean;
  /** Where the loud warning goes (default: stderr). */
  warn?: (line: string) => void;
}

/**
 * Refuses a task this machine cannot run (NotRunnableError: the CLI prints it in one line, exit 2),
 * or, with the expert override, says in capitals what that means and goes on. Call it before
 * anything is calibrated, graded, cached or served; `serve` calls it the same way.
 */
export function requireRunnableHere(task: { id: string; spec: Pick<PublicSpec, "env" | "requires_gpu"> }, opts: RequireRunnableOptions): void {
  const r = taskRunnableHere(task.spec, opts);
  if (r.runnable) return;
  const reason = r.reason ?? "not runnable here";
  if (!opts.skipCheck) throw new NotRunnableError(task.id, reason, opts.command);
  (opts.warn ?? ((l: string) => process.stderr.write(`${l}\n`)))(
    `infradev${opts.command ? ` ${opts.command}` : ""}: WARNING: ${SKIP_RUNNABLE_FLAG}: task ${task.id} cannot run on this machine (${reason}), running it ANYWAY: ` +
      "tests that need what is missing fail or error, gold's calibration and every score describe this machine, not the task",
  );
}
