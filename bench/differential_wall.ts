/**
 * Grade wall time with the golden-differential probes vs without (issue 22), per bundled CPU task,
 * in one run. Two copies of the task: as it is, and without hidden/differential.yaml. Gold is
 * calibrated once per copy (one run, not timed); then the golden patch is graded against each copy,
 * fresh results folder, the arms alternating order every round (the machine is shared). Target:
 * with / without ≤ 1.5.
 *
 *   npx tsx bench/differential_wall.ts [--task ID]... [--rounds 1] [--ranks N] [--json F]
 *
 * --ranks N grades at N only (default: every world size the task is graded at).
 */
import { cpSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { calibrate } from "../src/grader/grade/calibrate.js";
import { gradeSubmission } from "../src/grader/grade/grade.js";
import { graderSandboxFactory } from "../src/grader/grade/sandbox-factory.js";
import { gradedWorldSizes } from "../src/grader/grade/sessions.js";
import { bundledTasksDir } from "../src/lib/paths.js";
import { loadGraderTask } from "../src/task/hidden/grader-task.js";

const { values } = parseArgs({
  options: {
    task: { type: "string", multiple: true },
    rounds: { type: "string", default: "1" },
    ranks: { type: "string" },
    json: { type: "string" },
  },
});
const taskIds = values.task?.length ? values.task : ["weight-sync-delta", "grad-bucketing"];
const rounds = Math.max(1, Number(values.rounds));
const scratch = mkdtempSync(join(tmpdir(), "infradev-bench-diff-"));
const factory = graderSandboxFactory("local", [scratch]);
const log = (m: string) => process.stderr.write(`${m}\n`);

const rows: Array<Record<string, unknown>> = [];
try {
  for (const id of taskIds) {
    const arms: Record<string, { task: ReturnType<typeof loadGraderTask>; cal: Awaited<ReturnType<typeof calibrate>>["calibration"]; walls: number[]; probes: number }> = {};
    for (const arm of ["with", "without"] as const) {
      const dir = join(scratch, arm);
      cpSync(join(bundledTasksDir(), id), join(dir, id), { recursive: true });
      if (arm === "without") rmSync(join(dir, id, "hidden", "differential.yaml"));
      const task = loadGraderTask(id, dir);
      const worldSizes = values.ranks ? [Number(values.ranks)] : gradedWorldSizes(task.fullSpec);
      log(`${id} ${arm}: calibrating gold (1 run) at ${worldSizes.join(", ")}`);
      const cal = (await calibrate({ task, cacheDir: join(scratch, `cal-${arm}`), sandboxFactory: factory, runs: 1, worldSizes })).calibration;
      arms[arm] = { task, cal, walls: [], probes: cal.cases.filter((c) => c.suite === "probe").length };
    }
    for (let r = 0; r < rounds; r++) {
      for (const arm of (r % 2 === 0 ? ["with", "without"] : ["without", "with"]) as const) {
        const a = arms[arm]!;
        const worldSizes = values.ranks ? [Number(values.ranks)] : gradedWorldSizes(a.task.fullSpec);
        const t0 = Date.now();
        const { result: res } = await gradeSubmission({ task: a.task, patchFile: a.task.hidden.goldenPatch, outDir: join(scratch, `out-${arm}-${r}`), sandboxFactory: factory, calibration: a.cal, worldSizes });
        const wall = (Date.now() - t0) / 1000;
        a.walls.push(wall);
        log(`${id} ${arm} round ${r + 1}: ${wall.toFixed(1)} s, Set B ${res.with_probes?.passed}/${res.with_probes?.n_cases}, load ${loadavg()[0]!.toFixed(2)}`);
      }
    }
    const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)]!;
    const withS = med(arms.with!.walls);
    const withoutS = med(arms.without!.walls);
    const row = { task: id, world_sizes: values.ranks ? [Number(values.ranks)] : gradedWorldSizes(arms.with!.task.fullSpec), probe_cases_with: arms.with!.probes, probe_cases_without: arms.without!.probes, grade_wall_with_s: withS, grade_wall_without_s: withoutS, ratio: Number((withS / withoutS).toFixed(3)), rounds };
    rows.push(row);
    console.log(`${id}: with ${withS.toFixed(1)} s, without ${withoutS.toFixed(1)} s, ratio ${row.ratio} (target ≤ 1.5)`);
  }
  if (values.json) writeFileSync(values.json, `${JSON.stringify({ machine_load: loadavg(), rows }, null, 2)}\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
