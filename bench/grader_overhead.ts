/**
 * The grader's overhead: total time to grade one submission (gold's calibration already cached)
 * against the task's plain suites (post-PR tests + probes, no canaries, one session) launched
 * directly with the rank launcher on an already prepared workspace. Target: ratio ≤ 1.2.
 *
 *   npx tsx bench/grader_overhead.ts [--task grad-bucketing] [--patch FILE] [--sandbox local|none] [--repeat 3] [--separate-suites (no effect: the suites always run apart)]
 *
 * The two are interleaved `repeat` times (the machine is shared; interleaving spreads the noise over
 * both) and the medians are compared.
 */
import { execa } from "execa";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { graderSandboxFactory } from "../src/grader/grade/sandbox-factory.js";
import { calibrate } from "../src/grader/grade/calibrate.js";
import { taskContentHash } from "../src/lib/files.js";
import { hardwareFingerprint } from "../src/grader/workspace/fingerprint.js";
import { gradeSubmission } from "../src/grader/grade/grade.js";
import { applyPatch } from "../src/grader/workspace/apply.js";
import { planSessions } from "../src/grader/grade/sessions.js";
import { freshWorkspace, installGradingTests, removeWorkspace } from "../src/grader/workspace/workspace.js";
import { sandboxPythonDir } from "../src/lib/paths.js";
import type { SandboxKind } from "../src/sandbox/types.js";
import { loadGraderTask } from "../src/task/hidden/grader-task.js";
import type { SessionResult } from "../src/grader/grade/types.js";

const { values } = parseArgs({
  options: {
    task: { type: "string", default: "grad-bucketing" },
    patch: { type: "string" },
    sandbox: { type: "string", default: "local" },
    repeat: { type: "string", default: "3" },
    "separate-suites": { type: "boolean", default: false },
  },
});
const task = loadGraderTask(values.task!);
const patch = values.patch ?? task.hidden.goldenPatch;
const repeat = Math.max(1, Number(values.repeat));
const scratch = mkdtempSync(join(tmpdir(), "infradev-bench-grader-"));
const calDir = join(scratch, "calibration");
const factory = graderSandboxFactory(values.sandbox as SandboxKind, [scratch]);
const spec = task.fullSpec;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const log = (m: string) => process.stderr.write(`${m}\n`);

try {
  log(`calibrating ${task.id} (not timed)...`);
  const fingerprint = await hardwareFingerprint(task, factory);
  await calibrate({ task, cacheDir: calDir, sandboxFactory: factory, fingerprint, taskHash: taskContentHash(task.taskDir) });

  const gradeTimes: number[] = [];
  const directTimes: number[] = [];
  const sameTimes: number[] = [];
  const outside: number[] = [];
  for (let i = 0; i < repeat; i++) {
    // 1. The grader, end to end, in a fresh results folder (nothing to reuse but the calibration).
    let t0 = performance.now();
    const out = await gradeSubmission({ task, patchFile: patch, outDir: join(scratch, `out${i}`), calibrationDir: calDir, sandboxFactory: factory });
    gradeTimes.push((performance.now() - t0) / 1000);
    // What the grader spent outside its launcher sessions (snapshot, apply, tests in, sandbox, scoring).
    const sessionsDir = join(out.artifactDir, "sessions");
    const inSessions = readdirSync(sessionsDir).reduce((sum, f) => sum + (JSON.parse(readFileSync(join(sessionsDir, f), "utf8")) as SessionResult).duration_s, 0);
    outside.push(gradeTimes.at(-1)! - inSessions);
    log(`grade #${i + 1}: ${gradeTimes.at(-1)!.toFixed(2)} s, of which ${outside.at(-1)!.toFixed(2)} s outside the launcher (${out.result.status}, ${out.result.passed}/${out.result.n_cases} passed)`);

    // 2. The task's own suites launched directly, as a task author would run them: the post-PR tests
    // and the probes copied in plainly (no renaming, no canaries or twins), one launcher session on
    // the host, no sandbox (preparation not timed). Everything the grader adds for trust is overhead.
    const ws = await freshWorkspace(task);
    const applied = await applyPatch(ws.repoDir, patch, ws.baseCommit);
    if (!applied.applied) throw new Error(`bench: patch does not apply: ${applied.reason}`);
    for (const d of spec.test_dirs) {
      rmSync(join(ws.repoDir, d), { recursive: true, force: true });
      cpSync(join(task.hidden.testsDir, d), join(ws.repoDir, d), { recursive: true });
    }
    cpSync(task.hidden.probesDir, join(ws.repoDir, "probes_direct"), { recursive: true });
    const plans = [{ pytestArgs: [...spec.test_dirs, "probes_direct", "--rootdir=.", "-p", "no:cacheprovider"], env: { ...spec.env.vars, ...Object.values(spec.modes)[0] } }];
    t0 = performance.now();
    for (const [j, plan] of plans.entries()) {
      await execa(
        spec.env.python,
        [
          "-I",
          "-S",
          join(sandboxPythonDir(), "infradev_launch.py"),
          "--nproc", String(spec.ranks),
          "--out-dir", join(ws.repoDir, ".infradev", "direct", String(j)),
          "--per-test-timeout", String(spec.timeout_sec),
          "--run-timeout", String(spec.run_timeout_sec),
          "--",
          ...plan.pytestArgs,
        ],
        { cwd: ws.repoDir, env: plan.env, reject: false, stdin: "ignore" },
      );
    }
    directTimes.push((performance.now() - t0) / 1000);
    // 3. What the grader itself runs (official and probe sessions, with their canaries and twins), launched
    // directly on the host on its staged tree: the overhead of the grader's checks alone.
    {
      const ws2 = await freshWorkspace(task);
      await applyPatch(ws2.repoDir, patch, ws2.baseCommit);
      const { staged } = await installGradingTests(task, ws2);
      const sessionPlans = planSessions(task, ws2.repoDir, staged);
      const t1 = performance.now();
      for (const [j, plan] of sessionPlans.entries()) {
        await execa(
          spec.env.python,
          ["-I", "-S", join(sandboxPythonDir(), "infradev_launch.py"), "--nproc", String(spec.ranks), "--out-dir", join(ws2.repoDir, ".infradev", "same", String(j)), "--per-test-timeout", String(spec.timeout_sec), "--run-timeout", String(spec.run_timeout_sec), "--", ...plan.pytestArgs],
          { cwd: ws2.repoDir, env: plan.env, reject: false, stdin: "ignore" },
        );
      }
      sameTimes.push((performance.now() - t1) / 1000);
      log(`same sessions direct #${i + 1}: ${sameTimes.at(-1)!.toFixed(2)} s (${sessionPlans.length} launcher session(s))`);
      removeWorkspace(ws2);
    }
    log(`direct #${i + 1}: ${directTimes.at(-1)!.toFixed(2)} s (${plans.length} launcher session(s))`);
    removeWorkspace(ws);
  }
  const g = median(gradeTimes);
  const d = median(directTimes);
  const same = median(sameTimes);
  process.stdout.write(`the grader's own sessions launched directly: ${same.toFixed(2)} s → grade / same sessions ${(g / same).toFixed(3)}× (the checks, sandbox and install alone)\n`);
  process.stdout.write(
    `${task.id}, ${values.sandbox} sandbox, ${repeat} interleaved run(s), medians: grade (separate official / probe sessions in fresh sandboxes, canaries, twins, read-only staged tests, tamper checks) ${g.toFixed(2)} s vs the plain suites in one direct launcher session ${d.toFixed(2)} s → overhead ratio ${(g / d).toFixed(3)}× (target ≤ 1.2×); ` +
      `grader time outside its launcher sessions ${median(outside).toFixed(2)} s (${((median(outside) / d) * 100).toFixed(1)}% of the direct run)\n`,
  );
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
