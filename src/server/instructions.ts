import type { PublicTask } from "../task/public/loader.js";

/** The server's `instructions`: what a client puts ahead of the tool list. A few lines only. */
export function serverInstructions(task: PublicTask, sandboxKind: string): string {
  return [
    `InfraDev task server for "${task.id}" (${task.spec.title}; ${task.spec.ranks} ranks). All work happens in a sandboxed workspace${sandboxKind === "none" ? " (sandbox: none, NOT isolated)" : ""}.`,
    "1. get_task for the prompt and interface contract; get_skill for the infra workflow (or the infra_skill prompt).",
    "2. pytest_collect is the gate: no collection error before and after every edit.",
    "3. Edit with run_shell; before changing a function run find_callers on it and check every caller and shared state.",
    "4. pytest_run with ranks: 1, then with the task's ranks, under every mode; compare new math with a naive reference.",
    "5. measure with compare_with_base to prove the promised saving (collective calls/bytes, peak memory, time).",
    "6. get_diff to review, then submit. The patch is also saved when the session ends.",
  ].join("\n");
}
