import { resolve } from "node:path";
import type { Command } from "commander";
import { bundledTasksDir } from "../lib/paths.js";
import { RANKS_HELP, addGraderOptions, checkGraderRun, graderSandboxFactoryFromFlags, parseRanks, progressOnStderr, type GraderCliOptions } from "./grade.js";

/** Gold's runs per calibration (grader/calibrate.ts CALIBRATION_RUNS; said here so `--help` loads no grader). */
const RUNS = 3;

export function registerCalibrateCommands(program: Command): void {
  const cmd = program
    .command("calibrate")
    .description(`run the golden patch ${RUNS}× on this machine and cache the collected cases and which pass (by task content hash + the fingerprint of the sandbox the tests run in); flaky cases are reported`)
    .requiredOption("--task <id>", "task id (or a path to a task folder)")
    .option("--force", "run gold again from scratch even when a cached calibration (or a killed one's session files) exists")
    .option("--ranks <n>", RANKS_HELP.replace(/^grade/, "calibrate"), parseRanks)
    .option("--json", "print the calibration as JSON on stdout");
  addGraderOptions(cmd).action(async (opts: GraderCliOptions & { task: string; force?: boolean; ranks?: number }) => {
    const [{ loadGraderTask }, { CALIBRATION_RUNS, calibrate }, { goldView }] = await Promise.all([
      import("../task/hidden/grader-task.js"),
      import("../grader/grade/calibrate.js"),
      import("../grader/grade/score.js"),
    ]);
    if (CALIBRATION_RUNS !== RUNS) throw new Error(`cli/calibrate.ts says ${RUNS} runs, the grader ${CALIBRATION_RUNS}`);
    const task = loadGraderTask(opts.task, opts.tasksDir);
    checkGraderRun("calibrate", task, opts);
    const progress = progressOnStderr(`calibrate ${task.id}`);
    const handle = await calibrate({
      task,
      cacheDir: resolve(opts.calibrationDir),
      sandboxFactory: graderSandboxFactoryFromFlags(opts, [opts.tasksDir ?? bundledTasksDir(), opts.calibrationDir]),
      force: opts.force,
      ...(opts.ranks !== undefined ? { worldSizes: [opts.ranks] } : {}),
      onProgress: progress.progress,
    }).finally(() => progress.done());
    const cal = handle.calibration;
    if (opts.json) {
      process.stdout.write(`${JSON.stringify({ file: handle.file, cached: handle.cached, ...cal }, null, 2)}\n`);
      return;
    }
    const gold = goldView(cal);
    const count = (suite: string) => gold.filter((g) => g.suite === suite).length;
    const required = (suite: string) => gold.filter((g) => g.suite === suite && g.required).length;
    const lines = [
      `${task.id}: gold calibration ${handle.cached ? "(cached)" : `(${cal.runs} runs, ${cal.duration_s.toFixed(1)} s)`} at world size(s) ${cal.world_sizes.join(", ")}`,
      `  official: ${count("official")} cases, gold passes ${required("official")} in every run`,
      ...(count("pass_to_pass") ? [`  pass-to-pass: ${count("pass_to_pass")} cases, gold passes ${required("pass_to_pass")} in every run`] : []),
      `  probes:   ${count("probe")} cases, gold passes ${required("probe")} in every run`,
      `  hardware: ${cal.fingerprint.cpu_model} ×${cal.fingerprint.cpu_count}${cal.fingerprint.gpus.length ? `, ${cal.fingerprint.gpus.join(", ")}` : ", no GPU"}, torch ${cal.fingerprint.torch}`,
      `  measured in: the ${cal.fingerprint.sandbox} sandbox, ${cal.fingerprint.python}`,
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
