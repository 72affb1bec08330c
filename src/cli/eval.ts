import { resolve } from "node:path";
import { InvalidArgumentError, type Command } from "commander";
import { engineNames } from "../campaign/engines/registry.js";
import { UsageError } from "../lib/errors.js";
import { addCampaignOptions, campaignSignal, type CampaignCliOptions } from "./campaign-options.js";
import { slurmEngineOptions } from "./slurm-options.js";

// The campaign modules (tasks loader, engines) are imported in the action handlers.

interface EvalCliOptions extends Omit<CampaignCliOptions, "out"> {
  out?: string;
  tasks?: string;
  agent: string[];
  agents?: string;
  repeats: number;
  timeLimitMin?: number;
  recoveries?: number;
  skill?: boolean;
  providerUrl?: string;
  providerKeyEnv?: string;
  cancel?: boolean;
}

function wholeNumber(min: number) {
  return (v: string) => {
    const n = Number(v);
    if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`expected a whole number ≥ ${min}, got "${v}"`);
    return n;
  };
}

function minutes(v: string): number {
  const n = Number(v);
  if (!v.trim() || !Number.isFinite(n) || n <= 0 || n > 7 * 24 * 60) throw new InvalidArgumentError(`expected minutes > 0 (e.g. 150 or 0.5), got "${v}"`);
  return n;
}

export function registerEvalCommands(program: Command): void {
  const cmd = program
    .command("eval")
    .description(
      "run a matrix of agents on tasks (× repeats) as `infradev run` jobs on an engine, in parallel, into one campaign folder; resumable (finished runs are reused, " +
        "a killed campaign continues when the same command runs again). `eval status CAMPAIGN` shows where each run stands",
    )
    .option("--tasks <ids>", "task ids, comma-separated, or all (every task of --tasks-dir, default the bundled ones) (required)")
    .option("--agent <NAME=HARNESS:MODEL>", "an agent (repeatable): e.g. gold=codex:standin:golden, or sota=opencode:gpt-5 with --provider-url/--provider-key-env", (v: string, prev: string[]) => [...prev, v], [] as string[])
    .option("--agents <file>", "a YAML list of agents: {name, harness, model, provider_url, provider_key_env, skill, recoveries, time_limit_min} (unset fields from the flags)")
    .option("--repeats <n>", "runs of every task × agent", wholeNumber(1), 1)
    .option("--time-limit-min <x>", "each run's harness budget in minutes (default 150, as `infradev run`)", minutes)
    .option("--recoveries <k>", "re-prompts when a harness exits without submit (default 3, as `infradev run`)", wholeNumber(0))
    .option("--skill", "install the infra-dev skill for every agent (default)")
    .option("--no-skill", "run every agent without the skill (an agents file may still set skill per agent)")
    .option("--provider-url <url>", "default OpenAI-compatible endpoint (…/v1) of the agents' models (not for standin:…)")
    .option("--provider-key-env <var>", "default variable holding the endpoint's API key")
    .option("--cancel", "cancel the campaign's queued and running jobs (Slurm: scancel; local: SIGTERM to its eval process); finished runs are kept, the same eval command resumes");
  addCampaignOptions(cmd, engineNames(), { outRequiredByCommander: false }).action(async (opts: EvalCliOptions) => {
    if (opts.cancel) {
      if (opts.out === undefined) throw new UsageError("eval --cancel: required option '--out <campaign>' not specified");
      const { cancelCampaign } = await import("../campaign/matrix/cancel.js");
      await cancelCampaign(opts.out, (line) => process.stderr.write(`[eval] ${line}\n`));
      return;
    }
    // Checked here, not by commander, which would also ask `eval status` for them.
    if (opts.tasks === undefined) throw new UsageError("eval: required option '--tasks <ids>' not specified (see: infradev eval --help)");
    if (opts.out === undefined) throw new UsageError("eval: required option '--out <campaign>' not specified (see: infradev eval --help)");
    const [{ RUN_DEFAULTS, checkAgentNames, parseAgentFlag, readAgentsFile }, { runEval }] = await Promise.all([import("../campaign/matrix/agents.js"), import("../campaign/matrix/eval.js")]);
    const defaults = {
      skill: opts.skill ?? RUN_DEFAULTS.skill,
      recoveries: opts.recoveries ?? RUN_DEFAULTS.recoveries,
      time_limit_min: opts.timeLimitMin ?? RUN_DEFAULTS.time_limit_min,
      provider_url: opts.providerUrl ?? null,
      provider_key_env: opts.providerKeyEnv ?? null,
    };
    const agents = [...(opts.agents ? readAgentsFile(opts.agents, defaults) : []), ...opts.agent.map((a) => parseAgentFlag(a, defaults))];
    checkAgentNames(agents);
    const tasks = opts.tasks.trim() === "all" ? ("all" as const) : opts.tasks.split(",").map((s) => s.trim()).filter(Boolean);
    if (tasks !== "all" && !tasks.length) throw new UsageError("eval: --tasks: expected task ids (a,b) or all");
    const say = (line: string) => process.stderr.write(`[eval] ${line}\n`);
    const sig = campaignSignal(say, `infradev eval --cancel --out ${opts.out}`);
    try {
      const s = await runEval({
        campaignDir: opts.out,
        tasks,
        tasksDir: opts.tasksDir ? resolve(opts.tasksDir) : null,
        agents,
        repeats: opts.repeats,
        engine: opts.engine,
        concurrency: opts.concurrency,
        sandbox: opts.sandbox,
        calibrationDir: opts.calibrationDir,
        python: opts.python,
        extend: opts.extend,
        slurm: slurmEngineOptions(opts, "eval"),
        argv: process.argv.slice(2),
        signal: sig.signal,
        say,
      });
      say(`${s.reused + s.finished} of ${s.total} run(s) complete (${s.reused} reused)${s.errored.length ? `; errored: ${s.errored.join(", ")}` : ""}${s.interrupted ? "; interrupted" : ""} → ${resolve(opts.out)} (see: infradev eval status ${opts.out})`);
      process.exitCode = sig.exitCode() ?? (s.errored.length ? 1 : 0);
    } finally {
      sig.dispose();
    }
  });
  cmd
    .command("status")
    .description("where each run of a campaign stands: run id, state (queued, running, done, failed, interrupted, …), exit reason, grade")
    .argument("<campaign>", "the campaign folder")
    .option("--json", "the rows as JSON")
    .action(async (dir: string, o: { json?: boolean }) => {
      const { campaignStatus, formatStatus } = await import("../campaign/matrix/status.js");
      const { rows } = await campaignStatus(dir);
      process.stdout.write(o.json ? `${JSON.stringify(rows, null, 2)}\n` : `${formatStatus(rows)}\n`);
    });
}
