import type { PublicTask } from "../../task/public/loader.js";

/**
 * The workflow every task follows, in the order the skill teaches it. get_task returns it, the
 * `task` prompt appends it, and the server's instructions summarise it.
 */
export function workflowRules(task: PublicTask): string[] {
  const modes = Object.keys(task.spec.modes);
  return [
    "Work only in the workspace (the sandbox's repo dir); run_shell is your shell there. Nothing outside it is visible.",
    "Gate first: pytest_collect must report the tests collected with no collection error before anything else, and again after every edit that adds or moves code.",
    "Then run the relevant tests in one process (pytest_run with ranks: 1), then on the task's ranks (pytest_run, default ranks).",
    "Before changing a function, find_callers on it and check every call site and every piece of state it touches; test stateful objects over several calls.",
    "Compare each new computation with a naive reference and with the invariants of the math (e.g. averaged, not summed, across ranks).",
    "Measure the resource the task promises (measure with compare_with_base: calls / bytes per collective, peak memory, wall time) and show the saving against base.",
    modes.length > 1
      ? `Rerun under every execution mode (${modes.join(", ")}) with pytest_run's mode field.`
      : "Rerun under every execution mode the task declares (pytest_run's mode field).",
    "get_diff to review the patch; submit when done (the patch is also saved when the session ends).",
  ];
}

/** The "interface contract" section of a prompt (a heading containing those words), or null. */
export function interfaceContract(prompt: string): string | null {
  const lines = prompt.split("\n");
  const start = lines.findIndex((l) => /^#{1,6}\s.*interface contract/i.test(l));
  if (start < 0) return null;
  const level = /^(#+)/.exec(lines[start]!)![1]!.length;
  let end = lines.length;
  let inFence = false;
  for (let i = start + 1; i < lines.length; i++) {
    if (/^\s*(```|~~~)/.test(lines[i]!)) inFence = !inFence;
    const h = inFence ? null : /^(#+)\s/.exec(lines[i]!);
    if (h && h[1]!.length <= level) {
      end = i;
      break;
    }
  }
  return lines.slice(start, end).join("\n").trim();
}
