import { resolve } from "node:path";
import type { Command } from "commander";
import { engineNames } from "../campaign/engines/registry.js";
import { addCampaignOptions, campaignSignal, type CampaignCliOptions } from "./campaign-options.js";
import { slurmEngineOptions } from "./slurm-options.js";

export function registerGradeManyCommands(program: Command): void {
  const cmd = program
    .command("grade-many")
    .description(
      "grade submissions made elsewhere, in parallel, into a campaign folder (resumable): --predictions F.jsonl with one {task_id, model, patch} per line " +
        "(or SWE-bench's {instance_id, model_name_or_path, model_patch}; patch null = none), or a folder of <task>--<model>.patch and/or *.jsonl files; " +
        "each becomes runs/<task>--<model>--r<k>/ with run.json, patch.diff and grade.json",
    )
    .requiredOption("--predictions <file|dir>", "the predictions: a .jsonl file, or a folder of <task>--<model>.patch / *.jsonl files")
    .option("--repeat-identical", "grade predictions with the same task, model and patch again as r2, r3… (refused without it: they would count twice)");
  addCampaignOptions(cmd, engineNames()).action(async (opts: CampaignCliOptions & { predictions: string; repeatIdentical?: boolean }) => {
    const { runGradeMany } = await import("../campaign/matrix/grade-many.js");
    const say = (line: string) => process.stderr.write(`[grade-many] ${line}\n`);
    const sig = campaignSignal(say, `infradev eval --cancel --out ${opts.out}`);
    try {
      const s = await runGradeMany({
        campaignDir: opts.out,
        predictions: opts.predictions,
        repeatIdentical: opts.repeatIdentical,
        tasksDir: opts.tasksDir ? resolve(opts.tasksDir) : null,
        engine: opts.engine,
        concurrency: opts.concurrency,
        sandbox: opts.sandbox,
        calibrationDir: opts.calibrationDir,
        python: opts.python,
        extend: opts.extend,
        slurm: slurmEngineOptions(opts, "grade-many"),
        argv: process.argv.slice(2),
        signal: sig.signal,
        say,
      });
      say(`${s.reused + s.finished} of ${s.total} graded (${s.reused} reused)${s.errored.length ? `; not graded: ${s.errored.join(", ")}` : ""}${s.interrupted ? "; interrupted" : ""} → ${resolve(opts.out)}`);
      process.exitCode = sig.exitCode() ?? (s.errored.length ? 1 : 0);
    } finally {
      sig.dispose();
    }
  });
}
