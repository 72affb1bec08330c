/**
 * task check's mutants, before and after the fail-fast of issue 23, in one run: each sampled mutant is
 * graded the way the check grades it (stopEarly) twice, once stopping only between sessions (before)
 * and once with each session stopping at its first failing case gold passes (after), the two arms in
 * alternating order, each in its own results folder. Prints the wall of each arm, their ratio, and
 * whether every mutant got the same verdict in both (it must). Gold's calibration is made first (not
 * timed; cached in --calibration-dir). --check also times the whole `task check` through the CLI.
 *
 *   npx tsx bench/task_check_wall.ts [--task grad-bucketing] [--mutants 12] [--seed 0] [--calibration-dir D] [--check] [--json F]
 *
 * Target (issue 23): the whole check of grad-bucketing with all mutants ≤ half of 1,321 s.
 */
import { execa } from "execa";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { calibrate } from "../src/grader/grade/calibrate.js";
import { gradeSubmission } from "../src/grader/grade/grade.js";
import { graderSandboxFactory } from "../src/grader/grade/sandbox-factory.js";
import { generateMutants } from "../src/grader/check/mutants.js";
import { seededSample } from "../src/grader/check/task-check.js";
import { withTaskTrees } from "../src/grader/check/task-analysis.js";
import { taskContentHash } from "../src/lib/files.js";
import { hardwareFingerprint } from "../src/grader/workspace/fingerprint.js";
import { loadGraderTask } from "../src/task/hidden/grader-task.js";
import type { GradeResult } from "../src/grader/grade/types.js";

const { values } = parseArgs({
  options: {
    task: { type: "string", default: "grad-bucketing" },
    mutants: { type: "string", default: "12" },
    seed: { type: "string", default: "0" },
    "calibration-dir": { type: "string" },
    check: { type: "boolean", default: false },
    json: { type: "string" },
  },
});
const task = loadGraderTask(values.task!);
const scratch = mkdtempSync(join(tmpdir(), "infradev-bench-check-"));
const calDir = values["calibration-dir"] ?? join(scratch, "cal");
const factory = graderSandboxFactory("local", [scratch, calDir]);
const log = (m: string) => process.stderr.write(`${m}\n`);

/** The check's verdict of a mutant (task-check.ts gradeMutants), from its grade. */
function verdict(r: GradeResult): string {
  if (r.status !== "graded") return `killed_official (${r.status})`;
  if (!r.official.resolved_strict) return "killed_official";
  if (!r.with_probes.resolved_strict) return "killed_probes";
  return "survived";
}

try {
  const fingerprint = await hardwareFingerprint(task, factory);
  const taskHash = taskContentHash(task.taskDir);
  log(`calibrating ${task.id} (not timed; cached in ${calDir})...`);
  const cal = (await calibrate({ task, cacheDir: calDir, sandboxFactory: factory, fingerprint, taskHash, onProgress: (m) => log(`  ${m}`) })).calibration;
  const equivalent = new Set(task.hidden.equivalentMutants.map((e) => e.id));
  const all = await withTaskTrees(task, { workDir: join(scratch, "trees") }, (trees) => generateMutants(task, { workDir: join(scratch, "trees"), trees, seed: Number(values.seed) }));
  const candidates = all.mutants.filter((m) => !equivalent.has(m.id));
  const n = Math.min(Number(values.mutants), candidates.length);
  const chosen = seededSample(candidates, n, Number(values.seed));
  const load0 = loadavg()[0]!;
  const times = { before: 0, after: 0 };
  const rows: Array<{ id: string; before_s: number; after_s: number; before: string; after: string }> = [];
  for (const [i, m] of chosen.entries()) {
    const file = join(scratch, `mutant-${i}.patch`);
    writeFileSync(file, m.patch);
    const arms = i % 2 === 0 ? (["before", "after"] as const) : (["after", "before"] as const);
    const row = { id: m.id, before_s: 0, after_s: 0, before: "", after: "" };
    for (const arm of arms) {
      const t0 = performance.now();
      const out = await gradeSubmission({ task, patchFile: file, outDir: join(scratch, arm), calibration: cal, fingerprint, taskHash, sandboxFactory: factory, stopEarly: true, failFast: arm === "after" });
      const s = (performance.now() - t0) / 1000;
      times[arm] += s;
      row[`${arm}_s`] = s;
      row[arm] = verdict(out.result);
    }
    rows.push(row);
    log(`mutant ${i + 1}/${n} ${m.id}: before ${row.before_s.toFixed(1)} s (${row.before}), after ${row.after_s.toFixed(1)} s (${row.after})`);
  }
  const same = rows.every((r) => r.before === r.after);
  const summary = {
    task: task.id,
    mutants: n,
    of: candidates.length,
    seed: Number(values.seed),
    before_s: times.before,
    after_s: times.after,
    ratio: times.after / times.before,
    same_verdicts: same,
    load: { start: load0, end: loadavg()[0]! },
    rows,
  };
  process.stdout.write(
    `${task.id}: ${n} of ${candidates.length} mutants (seed ${values.seed}), graded as the check grades them, the arms interleaved: ` +
      `stop between sessions ${times.before.toFixed(1)} s, fail fast ${times.after.toFixed(1)} s → after / before ${summary.ratio.toFixed(3)}; ` +
      `verdicts ${same ? "the same for every mutant" : "DIFFER"} (load average ${summary.load.start.toFixed(1)} → ${summary.load.end.toFixed(1)})\n`,
  );
  if (values.check) {
    const cli = join(import.meta.dirname, "..", "dist", "cli", "main.js");
    const t0 = performance.now();
    const r = await execa("node", [cli, "task", "check", task.id, "--json", "--out", join(scratch, "check"), "--calibration-dir", calDir], { reject: false, timeout: 4 * 3600_000 });
    const wall = (performance.now() - t0) / 1000;
    const report = JSON.parse(r.stdout) as { passed: boolean; mutants: { score: number; graded: number } | null };
    process.stdout.write(`task check ${task.id}, every mutant, calibration cached: ${wall.toFixed(0)} s (exit ${r.exitCode}, passed ${report.passed}, mutation score ${report.mutants?.score?.toFixed(3)} of ${report.mutants?.graded}); target ≤ ${(1321 / 2).toFixed(0)} s on a quiet machine\n`);
    Object.assign(summary, { check_wall_s: wall, check_passed: report.passed });
  }
  if (values.json) writeFileSync(values.json, `${JSON.stringify(summary, null, 2)}\n`);
  if (!same) process.exitCode = 1;
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
