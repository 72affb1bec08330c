import { InvalidArgumentError, Option, type Command } from "commander";
import { UsageError } from "../lib/errors.js";
import { defaultCalibrationDir } from "../lib/paths.js";
import { addDockerOptions, dockerOptionsFromFlags, type DockerFlags } from "./sandbox-options.js";

// campaign/run.ts (the harness adapters, the stand-in, the server's run folder) is imported in the
// action handler: `infradev --help` does not load it.

interface RunCliOptions extends DockerFlags {
  task: string;
  agent: string;
  model: string;
  providerUrl?: string;
  providerKeyEnv?: string;
  name?: string;
  repeat: number;
  timeLimitMin: number;
  skill: boolean;
  recoveries: number;
  out: string;
  sandbox?: string;
  grade: boolean;
  tasksDir?: string;
  python?: string;
  calibrationDir: string;
  gradeOut?: string;
  json?: boolean;
}

const wholeNumber = (min: number) => (v: string) => {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < min) throw new InvalidArgumentError(`expected a whole number ≥ ${min}, got "${v}"`);
  return n;
};

function minutes(v: string): number {
  const n = Number(v);
  if (!v.trim() || !Number.isFinite(n) || n <= 0 || n > 7 * 24 * 60) throw new InvalidArgumentError(`expected minutes > 0 (e.g. 150 or 0.5), got "${v}"`);
  return n;
}

export function registerRunCommands(program: Command): void {
  const cmd = program
    .command("run")
    .description("run an agent harness (Codex or OpenCode) on one task through the MCP server on a public export of the task, then grade its patch; D holds run.json, patch.diff, trace.jsonl, the harness's events and grade.json (resumable)")
    .requiredOption("--task <id>", "task id (or a path to a task folder)")
    .addOption(new Option("--agent <harness>", "the harness: codex (Responses API) or opencode (chat completions)").choices(["codex", "opencode"]).makeOptionMandatory())
    .requiredOption("--model <model>", "model name at the endpoint; standin:<script> = the scripted stand-in model (golden, adversarial[:name], early-exit, slow, file:<path>), no endpoint needed")
    .option("--provider-url <url>", "OpenAI-compatible base URL (…/v1) of the model endpoint (required unless --model standin:…)")
    .option("--provider-key-env <var>", "environment variable holding the endpoint's API key (required unless --model standin:…)")
    .option("--name <name>", "agent display name in run.json and the run id (default: the harness's name)")
    .option("--repeat <k>", "repeat number (recorded only; part of the run id)", wholeNumber(1), 1)
    .option("--time-limit-min <x>", "wall-clock budget of the harness, all attempts together; at the limit its whole process group is ended and the patch so far graded", minutes, 150)
    .option("--skill", "install the infra-dev skill into the harness's private config (default)", true)
    .option("--no-skill", "do not install the skill")
    .option("--recoveries <k>", "re-prompts when the harness exits without submit (same session)", wholeNumber(0), 3)
    .requiredOption("--out <dir>", "the run folder D (resumable: a finished run is not run again)")
    .addOption(new Option("--sandbox <kind>", "where the agent works, and the grader's sandbox: local (harness on this host, tools in bubblewrap) | docker (harness, server and workspace in one container of the task's image; no network but the model endpoint) | none (nothing isolated)").choices(["local", "docker", "none"]).default("local"))
    .option("--no-grade", "stop after the run (run.json, patch.diff); grade later by running the same command without --no-grade")
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)")
    .option("--python <path>", "Python interpreter of the tests, inside the sandbox (default $INFRADEV_PYTHON, else the task's env.python)")
    .option("--calibration-dir <dir>", "cache of gold calibrations for grading (default $INFRADEV_CALIBRATION_DIR, else ~/.cache/infradev/calibration)", defaultCalibrationDir())
    .option("--grade-out <dir>", "the grader's results folder (default: D/grade)")
    .option("--json", "print run.json (with the grade's status) as JSON on stdout");
  addDockerOptions(cmd)
    .action(async (opts: RunCliOptions) => {
      if (opts.network !== undefined) throw new UsageError("run: --network does not apply to `infradev run`: the run's container has no network but the model endpoint (through the egress proxy); the grader's container has none");
      const standin = opts.model.startsWith("standin:");
      if (!standin) {
        if (!opts.providerUrl) throw new UsageError("run: --provider-url <url> is required for a real model (or use --model standin:<script>)");
        if (!/^https?:\/\//.test(opts.providerUrl)) throw new UsageError(`run: --provider-url must be an http(s) URL, got "${opts.providerUrl}"`);
        if (!opts.providerKeyEnv) throw new UsageError("run: --provider-key-env <var> is required for a real model (the variable that holds the API key)");
        if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(opts.providerKeyEnv)) throw new UsageError(`run: --provider-key-env must be a variable name, got "${opts.providerKeyEnv}"`);
        if (!process.env[opts.providerKeyEnv]) throw new UsageError(`run: --provider-key-env ${opts.providerKeyEnv}: that variable is not set`);
      } else if (opts.providerUrl || opts.providerKeyEnv) {
        throw new UsageError("run: --provider-url / --provider-key-env do not apply to --model standin:… (the stand-in serves itself)");
      }
      const name = opts.name ?? opts.agent;
      const { runId } = await import("../campaign/types.js");
      try {
        runId("x", name, opts.repeat);
      } catch (e) {
        throw new UsageError(`run: --name: ${(e as Error).message}`);
      }
      const { runAgentOnTask } = await import("../campaign/run/run.js");
      const abort = new AbortController();
      // The attempt in flight ends its harness's process group; whatever else runs then (grading) is not waited for.
      const onSignal = () => {
        abort.abort();
        setTimeout(() => process.exit(143), 5_000).unref();
      };
      for (const s of ["SIGTERM", "SIGINT", "SIGHUP"] as const) process.once(s, onSignal);
      const outcome = await runAgentOnTask({
        task: opts.task,
        tasksDir: opts.tasksDir,
        agent: opts.agent as "codex" | "opencode",
        model: opts.model,
        providerUrl: opts.providerUrl,
        providerKeyEnv: opts.providerKeyEnv,
        name,
        repeat: opts.repeat,
        timeLimitMin: opts.timeLimitMin,
        skill: opts.skill,
        recoveries: opts.recoveries,
        out: opts.out,
        sandbox: (opts.sandbox ?? "local") as "local" | "none" | "docker",
        docker: opts.sandbox === "docker" ? dockerOptionsFromFlags(opts) : undefined,
        grade: opts.grade,
        python: opts.python,
        calibrationDir: opts.calibrationDir,
        gradeOut: opts.gradeOut,
        signal: abort.signal,
        onProgress: (msg) => process.stderr.write(`[run ${opts.task}] ${msg}\n`),
      });
      const r = outcome.record;
      if (opts.json) process.stdout.write(`${JSON.stringify(r, null, 2)}\n`);
      else {
        process.stdout.write(
          [
            `${r.run_id}: ${r.exit_reason}${r.error ? ` (${r.error})` : ""}${outcome.did === "nothing" ? " — already complete, nothing to do" : outcome.did === "graded" ? " — graded now" : ""}`,
            `${r.harness} ${r.harness_version ?? "?"}, model ${r.model}: ${r.attempts} attempt(s), ${r.turns ?? "?"} model request(s), ${r.tool_calls} tool call(s), ${r.wall_s} s`,
            `tokens: input ${r.tokens.input ?? "-"} (cached ${r.tokens.cached_input ?? "-"}), output ${r.tokens.output ?? "-"} (reasoning ${r.tokens.reasoning ?? "-"})`,
            `patch: ${r.patch_bytes} bytes, submitted ${r.submitted ? "yes" : "no"}; grade: ${r.grade?.status ?? (opts.grade ? "none" : "skipped (--no-grade)")}`,
            "",
          ].join("\n"),
        );
      }
      if (outcome.gradeError) {
        process.stderr.write(`infradev run: grading failed: ${outcome.gradeError}\n`);
        process.exitCode = 1;
      }
    });
}
