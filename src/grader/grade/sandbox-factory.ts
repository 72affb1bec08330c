/** The grader's sandbox factory: a fresh sandbox per session over a submission's workspace, through the one picker. */
import { resolve } from "node:path";
import type { DockerSettings } from "../../sandbox/picker.js";
import type { SandboxKind } from "../../sandbox/types.js";
import { taskPython } from "../../task/public/runnable.js";
import type { SandboxFactory } from "./pipeline.js";

export interface GraderSandboxOptions {
  /** The tests' interpreter as given on the command line (the rule: tasks/runnable.ts taskPython). */
  python?: string;
}

/**
 * The grader's sandbox: a fresh one per submission over its fresh workspace, from createSandbox.
 * The task folder (hidden parts), the tasks root, the results and the calibration cache are never
 * visible inside it. `docker`: the docker flags, used only when `kind` is docker.
 */
export function graderSandboxFactory(kind: SandboxKind, hiddenPaths: string[], docker: DockerSettings = {}, opts: GraderSandboxOptions = {}): SandboxFactory {
  let logger: import("../../lib/logger.js").Logger | undefined;
  return async ({ task, hostRepoDir, readOnlyOverlays }) => {
    const [{ createSandbox }, { createLogger }] = await Promise.all([import("../../sandbox/picker.js"), import("../../lib/logger.js")]);
    logger ??= createLogger("infradev-grade");
    const common = {
      hostRepoDir,
      readOnlyMounts: [],
      // The staged tests, probes and canaries: bound read-only over the test dirs (Contract C).
      readOnlyOverlays: readOnlyOverlays ?? [],
      hiddenPaths: [...new Set([resolve(task.taskDir), ...hiddenPaths.map((p) => resolve(p))])],
      // The task's env.pythonpath stand-ins: copied, read-only, first on every exec's PYTHONPATH.
      pythonPath: task.pythonPath.map((host) => ({ host, boundary: task.taskDir })),
      python: taskPython(task.fullSpec, opts.python).python,
      sessionId: `grade-${task.id}-${process.pid}-${Date.now()}`,
      task,
      logger,
      purpose: "grader" as const,
    };
    return kind === "docker" ? createSandbox({ kind, ...common, ...docker }) : createSandbox({ kind, ...common });
  };
}

