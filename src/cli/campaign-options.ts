import { InvalidArgumentError, Option, type Command } from "commander";
import { addSlurmOptions } from "./slurm-options.js";

/**
 * Options `eval` and `grade-many` share, declared once, and the way both end on SIGINT / SIGTERM:
 * the campaign's running jobs are cancelled, finished ones kept, and the same command resumes.
 */

export interface CampaignCliOptions {
  out: string;
  concurrency?: number;
  engine: string;
  tasksDir?: string;
  sandbox: string;
  calibrationDir?: string;
  python?: string;
  extend?: boolean;
  partition?: string;
  account?: string;
  qos?: string;
  sbatchArg: string[];
}

export function parseConcurrency(v: string): number {
  const n = Number(v);
  if (!/^\d+$/.test(v.trim()) || !Number.isSafeInteger(n) || n < 1 || n > 4096) throw new InvalidArgumentError(`expected a whole number of jobs ≥ 1, got "${v}"`);
  return n;
}

function nonEmpty(what: string) {
  return (v: string) => {
    if (!v.trim()) throw new InvalidArgumentError(`expected ${what}`);
    return v;
  };
}

/** `engines`: the names engineFor knows (campaign/engines/registry.ts ENGINES). */
export function addCampaignOptions(cmd: Command, engines: string[], opts: { outRequiredByCommander?: boolean } = { outRequiredByCommander: true }): Command {
  const out = "--out <campaign>";
  const outHelp = "the campaign folder (campaign.json, runs/, jobs/, logs/); the same command on it again resumes (required)";
  // A command with sub-commands (`eval status`) checks --out itself: commander would ask its sub-commands for it too.
  const withOut = (opts.outRequiredByCommander ? cmd.requiredOption(out, outHelp, nonEmpty("a folder")) : cmd.option(out, outHelp, nonEmpty("a folder")))
    .option("--concurrency <n>", "jobs at once (default: what the machine allows: local = its cores; a GPU task's job also holds its GPUs)", parseConcurrency)
    .addOption(new Option("--engine <name>", "where the jobs run").choices(engines).default("local"))
    .option("--tasks-dir <dir>", "tasks folder (default: the bundled tasks)", nonEmpty("a folder"))
    .addOption(new Option("--sandbox <kind>", "sandbox of the runs and of grading").choices(["local", "docker", "none"]).default("local"))
    .option("--calibration-dir <dir>", "cache of gold calibrations (default: the one `grade` uses: $INFRADEV_CALIBRATION_DIR, else ~/.cache/infradev/calibration)", nonEmpty("a folder"))
    .option("--python <path>", "Python interpreter of the tests, inside the sandbox (default $INFRADEV_PYTHON, else the task's env.python)", nonEmpty("a path"))
    .option("--extend", "add tasks, agents, repeats or predictions to an existing campaign (without it a different matrix is refused)");
  return addSlurmOptions(withOut);
}

/**
 * A wrapper that ends a command by signal often delivers it twice at once: GNU `timeout` signals the
 * process and then its whole process group, so the CLI gets SIGTERM twice within microseconds. A
 * repeat inside this window is the same request, not a second one.
 */
export const REPEAT_SIGNAL_WINDOW_MS = 2_000;

/**
 * An AbortSignal that fires on the first SIGINT or SIGTERM, and the exit code that signal means
 * (130 / 143). A second signal later than REPEAT_SIGNAL_WINDOW_MS exits at once (the cancellation
 * may be unfinished: `cancelHint` says how to finish it); one inside the window is ignored.
 */
export function campaignSignal(say: (s: string) => void, cancelHint = "infradev eval --cancel --out <campaign>"): { signal: AbortSignal; exitCode: () => number | null; dispose: () => void } {
  const ac = new AbortController();
  let code: number | null = null;
  let firstAt = 0;
  const handlers = (["SIGINT", "SIGTERM"] as const).map((sig) => {
    const h = () => {
      if (code !== null) {
        if (Date.now() - firstAt < REPEAT_SIGNAL_WINDOW_MS) return;
        say(`${sig} again: exiting without waiting for the cancellation to finish; to end any job left queued or running: ${cancelHint}`);
        process.exit(code);
      }
      code = sig === "SIGINT" ? 130 : 143;
      firstAt = Date.now();
      say(`${sig}: cancelling the running jobs (finished runs are kept; run the same command again to resume)`);
      ac.abort(new Error(sig));
    };
    process.on(sig, h);
    return [sig, h] as const;
  });
  return { signal: ac.signal, exitCode: () => code, dispose: () => handlers.forEach(([s, h]) => process.off(s, h)) };
}
