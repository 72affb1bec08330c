import { resolve } from "node:path";
import type { Command } from "commander";
import { bundledTasksDir } from "../lib/paths.js";
import { CALIBRATION_RUNS, calibrate } from "../grader/calibrate.js";
import { goldView } from "../grader/score.js";
import { loadGraderTask } from "../tasks/loader.js";
import { addGraderOptions, graderSandboxFactoryFromFlags, progressToStderr, type GraderCliOptions } from "./grade.js";

export function registerCalibrateCommands(program: Command): void {
  const cmd = program
    .command("calibrate")
    .description(`run the golden patch ${CALIBRATION_RUNS}× on this machine and cache the collected cases and which pass (by task content hash + hardware fingerprint); flaky cases are reported`)
    .requiredOption("--task <id>", "task id (or a path to a task folder)")
    .option("--force", "run gold again even when a cached calibration exists")
    .option("--json", "print the calibration as JSON on stdout");
  addGraderOptions(cmd).action(async (opts: GraderCliOptions & { task: string; force?: boolean }) => {
    const task = loadGraderTask(opts.task, opts.tasksDir);
    const handle = await calibrate({
      task,
      cacheDir: resolve(opts.calibrationDir),
      sandboxFactory: graderSandboxFactoryFromFlags(opts, [opts.tasksDir ?? bundledTasksDir(), opts.calibrationDir]),
      force: opts.force,
      onProgress: progressToStderr(""),
    });
    const cal = handle.calibration;
    if (opts.json) {
      process.stdout.write(`${JSON.stringify({ file: handle.file, cached: handle.cached, ...cal }, null, 2)}\n`);
      return;
    }
    const gold = goldView(cal);
    const count = (suite: string) => gold.filter((g) => g.suite === suite).length;
    const required = (suite: string) => gold.filter((g) => g.suite === suite && g.required).length;
    const lines = [
      `${task.id}: gold calibration ${handle.cached ? "(cached)" : `(${cal.runs} runs, ${cal.duration_s.toFixed(1)} s)`}`,
      `  official: ${count("official")} cases, gold passes ${required("official")} in every run`,
      `  probes:   ${count("probe")} cases, gold passes ${required("probe")} in every run`,
      `  hardware: ${cal.fingerprint.cpu_model} ×${cal.fingerprint.cpu_count}${cal.fingerprint.gpus.length ? `, ${cal.fingerprint.gpus.join(", ")}` : ", no GPU"}, torch ${cal.fingerprint.torch}`,
    ];
    const notPassing = cal.cases.filter((c) => !c.outcomes.every((o) => o === "passed") && new Set(c.outcomes).size === 1);
    for (const c of notPassing) lines.push(`  gold ${c.outcomes[0]}: ${c.id} (counts in N_p)`);
    if (cal.flaky.length) {
      lines.push(`  FLAKY (outcome differs between runs; kept in N_p, not required for strict):`);
      for (const c of cal.cases.filter((x) => cal.flaky.includes(x.id))) lines.push(`    ${c.id}: ${c.outcomes.join(" / ")}`);
    } else lines.push("  flaky: none");
    lines.push(`  cached at ${handle.file}`);
    process.stdout.write(`${lines.join("\n")}\n`);
  });
}
