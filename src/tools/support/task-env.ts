import { z } from "zod";
import type { PublicTask } from "../../task/public/loader.js";

export type ModeCheck = { ok: true; mode: string; env: Record<string, string> } | { ok: false; error: string };

/** The default mode: "default" when the task has one, else the first mode it declares. */
export function defaultMode(task: PublicTask): string {
  const names = Object.keys(task.spec.modes);
  return names.includes("default") ? "default" : (names[0] ?? "default");
}

/**
 * The `mode` argument of a tool: exactly the task's modes, as an enum in the input schema, so that
 * anything else ("constructor", "__proto__", a typo) is refused by the schema before a handler runs.
 */
export function modeSchema(task: PublicTask, description: string) {
  const names = Object.keys(task.spec.modes);
  return z.enum((names.length ? names : [defaultMode(task)]) as [string, ...string[]]).optional().describe(description);
}

/** The environment of a mode: the task's env vars, then the mode's (the mode wins). */
export function modeEnv(task: PublicTask, mode: string | undefined): ModeCheck {
  const name = mode ?? defaultMode(task);
  const modes = task.spec.modes;
  if (!Object.hasOwn(modes, name)) {
    return { ok: false, error: `mode "${name}" is not a mode of task ${task.id}; choose one of: ${Object.keys(modes).join(", ") || "(none)"}` };
  }
  return { ok: true, mode: name, env: { ...task.spec.env.vars, ...modes[name]! } };
}

/** A port for a rendezvous inside the sandbox's own network namespace (no clash with the host). */
export function randomPort(): number {
  return 20_000 + Math.floor(Math.random() * 30_000);
}
