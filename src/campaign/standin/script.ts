/**
 * The scripted STAND-IN model's scripts: fixed lists of steps, not a language model. They exist
 * because no model is reachable here; they drive the real Codex and OpenCode binaries through
 * `infradev run --model standin:<script>` so that the run, the server and the grader are exercised
 * end to end. A step is one model response: a call of one of our MCP tools (bare name, mapped onto
 * the harness's own tool name by the server), a final text (ends the harness's turn), or a delay
 * that holds the next response back.
 */
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { UsageError } from "../../lib/errors.js";
import type { GraderTask } from "../../task/hidden/grader-task.js";

export type StandinStep = { call: string; args?: Record<string, unknown> } | { say: string } | { sleep_s: number };

export const STANDIN_PREFIX = "standin:";
export const STANDIN_SCRIPTS = ["golden", "adversarial[:name]", "early-exit", "slow", "file:<path>"] as const;

/** Applies `patch` in the workspace: a quoted heredoc (no expansion) and git apply, in one run_shell. */
export function applyPatchStep(patch: string): StandinStep {
  let tag = "INFRADEV_STANDIN_PATCH";
  while (patch.split("\n").includes(tag)) tag += "_";
  const body = patch.endsWith("\n") ? patch : `${patch}\n`;
  return { call: "run_shell", args: { command: `cat > /tmp/standin.patch <<'${tag}'\n${body}${tag}\ngit apply --whitespace=nowarn /tmp/standin.patch && git status --short` } };
}

function submitting(patch: string, note: string): StandinStep[] {
  return [{ call: "get_task", args: {} }, applyPatchStep(patch), { call: "pytest_collect", args: {} }, { call: "pytest_run", args: {} }, { call: "submit", args: { note } }];
}

function parseFileSteps(file: string): StandinStep[] {
  let raw: unknown;
  try {
    raw = parseYaml(readFileSync(file, "utf8")); // YAML is a superset of JSON
  } catch (e) {
    throw new UsageError(`--model standin:file:${file}: cannot read the script (${(e as Error).message.split("\n")[0]})`);
  }
  if (!Array.isArray(raw) || raw.length === 0) throw new UsageError(`--model standin:file:${file}: expected a non-empty list of steps ({call, args} | {say} | {sleep_s})`);
  return raw.map((s, i): StandinStep => {
    const where = `--model standin:file:${file}: step ${i + 1}`;
    if (s && typeof s === "object" && !Array.isArray(s)) {
      const o = s as Record<string, unknown>;
      if (typeof o.call === "string" && (o.args === undefined || (o.args && typeof o.args === "object" && !Array.isArray(o.args)))) return { call: o.call, args: (o.args as Record<string, unknown>) ?? {} };
      if (typeof o.say === "string") return { say: o.say };
      if (typeof o.sleep_s === "number" && o.sleep_s >= 0) return { sleep_s: o.sleep_s };
    }
    throw new UsageError(`${where}: expected {call: <tool>, args: {...}}, {say: <text>} or {sleep_s: <seconds ≥ 0>}`);
  });
}

/**
 * The steps of `standin:<script>` for `task`. The scripts that submit a known patch read it from the
 * task's hidden part on the host (the stand-in runs in the `run` process); the harness sees only
 * the tool-call arguments, exactly as it would see a real model's.
 */
export function standinSteps(script: string, task: GraderTask): StandinStep[] {
  const golden = () => readFileSync(task.hidden.goldenPatch, "utf8");
  if (script === "golden") return submitting(golden(), "stand-in model: the task's golden patch");
  if (script === "adversarial" || script.startsWith("adversarial:")) {
    const name = script.slice("adversarial:".length);
    const all = task.hidden.adversarial;
    const pick = name ? all.find((a) => a.name === name) : all[0];
    if (!pick) throw new UsageError(`--model standin:${script}: task ${task.id} has ${all.length ? `no adversarial patch "${name}" (has: ${all.map((a) => a.name).join(", ")})` : "no adversarial patches"}`);
    return submitting(readFileSync(pick.patchPath, "utf8"), `stand-in model: adversarial patch ${pick.name}`);
  }
  if (script === "early-exit") {
    // Ends its first turn after an edit without submit; a re-prompt finds it at pytest_collect.
    const [getTask, edit, ...rest] = submitting(golden(), "stand-in model: golden patch, after a re-prompt");
    return [getTask!, edit!, { say: "Stopping here for now (stand-in model: early-exit script)." }, ...rest];
  }
  if (script === "slow") return [{ call: "get_task", args: {} }, { sleep_s: 24 * 3600 }, { say: "stand-in model: slow script woke up" }];
  if (script.startsWith("file:")) return parseFileSteps(script.slice("file:".length));
  throw new UsageError(`--model standin:${script}: unknown stand-in script (expected one of ${STANDIN_SCRIPTS.join(", ")})`);
}
