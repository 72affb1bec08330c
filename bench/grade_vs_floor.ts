/**
 * A grade against its floor (issue 23), per bundled CPU task, in one run. The floor is the task's own
 * suites run directly: at each world size the task is graded at, N plain `python -m pytest` processes
 * over the post-PR tests and the probes together (RANK / WORLD_SIZE / MASTER_* set by hand, OMP_NUM_THREADS=1
 * as torchrun sets it), no sandbox, no launcher, no renaming, no canaries, no separate sessions. The
 * grade is `gradeSubmission` of the golden patch, gold's calibration cached, a fresh results folder:
 * everything a grade does. The arms alternate order every round (the machine is shared: load hits both
 * alike); the preparation of the floor's workspaces is not timed. Target: grade / floor ≤ 1.3.
 *
 *   npx tsx bench/grade_vs_floor.ts [--task ID]... [--rounds 2] [--sandbox local|none] [--calibration-dir D] [--json F]
 *
 * Also printed: the grade's time inside its launcher sessions and outside them (workspace, apply,
 * install, sandboxes, scoring), and the floor per world size.
 */
import { spawn } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createServer } from "node:net";
import { calibrate } from "../src/grader/grade/calibrate.js";
import { gradeSubmission } from "../src/grader/grade/grade.js";
import { graderSandboxFactory } from "../src/grader/grade/sandbox-factory.js";
import { gradedWorldSizes } from "../src/grader/grade/sessions.js";
import type { SessionResult } from "../src/grader/grade/types.js";
import { applyPatch } from "../src/grader/workspace/apply.js";
import { hardwareFingerprint } from "../src/grader/workspace/fingerprint.js";
import { freshWorkspace, removeWorkspace, type GradingWorkspace } from "../src/grader/workspace/workspace.js";
import { taskContentHash } from "../src/lib/files.js";
import { sandboxPythonDir } from "../src/lib/paths.js";
import type { SandboxKind } from "../src/sandbox/types.js";
import { loadGraderTask, type GraderTask } from "../src/task/hidden/grader-task.js";

const { values } = parseArgs({
  options: {
    task: { type: "string", multiple: true },
    rounds: { type: "string", default: "2" },
    sandbox: { type: "string", default: "local" },
    "calibration-dir": { type: "string" },
    json: { type: "string" },
  },
});
const taskIds = values.task?.length ? values.task : ["weight-sync-delta", "grad-bucketing"];
const rounds = Math.max(1, Number(values.rounds));
const scratch = mkdtempSync(join(tmpdir(), "infradev-bench-floor-"));
const calDir = values["calibration-dir"] ?? join(scratch, "cal");
const factory = graderSandboxFactory(values.sandbox as SandboxKind, [scratch, calDir]);
const log = (m: string) => process.stderr.write(`${m}\n`);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.on("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** The golden patch on a fresh base, the post-PR tests in the test dirs and the probes beside them, as an author would lay them out. */
async function floorWorkspace(task: GraderTask): Promise<GradingWorkspace> {
  const ws = await freshWorkspace(task);
  const applied = await applyPatch(ws.repoDir, task.hidden.goldenPatch, ws.baseCommit);
  if (!applied.applied) throw new Error(`bench: the golden patch does not apply: ${applied.reason}`);
  for (const d of task.fullSpec.test_dirs) {
    rmSync(join(ws.repoDir, d), { recursive: true, force: true });
    cpSync(join(task.hidden.testsDir, d), join(ws.repoDir, d), { recursive: true });
  }
  cpSync(task.hidden.probesDir, join(ws.repoDir, "probes_direct"), { recursive: true });
  return ws;
}

/** N plain pytest processes over the tests and the probes; resolves with their exit codes. */
async function plainPytest(task: GraderTask, repoDir: string, n: number): Promise<number[]> {
  const spec = task.fullSpec;
  const port = await freePort();
  const mode = Object.values(spec.modes)[0] ?? {};
  const procs = Array.from({ length: n }, (_, rank) => {
    const env = {
      ...process.env,
      ...spec.env.vars,
      ...mode,
      RANK: String(rank),
      LOCAL_RANK: String(rank),
      WORLD_SIZE: String(n),
      LOCAL_WORLD_SIZE: String(n),
      MASTER_ADDR: "127.0.0.1",
      MASTER_PORT: String(port),
      // The probes import infradev_probe (markers, measure()): the one thing of ours they need.
      PYTHONPATH: sandboxPythonDir(),
      ...(n > 1 ? { OMP_NUM_THREADS: "1" } : {}),
    };
    const child = spawn(spec.env.python, ["-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir=.", ...spec.test_dirs, "probes_direct"], { cwd: repoDir, env, stdio: "ignore" });
    return new Promise<number>((resolve) => child.on("exit", (code) => resolve(code ?? -1)));
  });
  return Promise.all(procs);
}

interface TaskFigures {
  task: string;
  world_sizes: number[];
  grade_s: number[];
  floor_s: number[];
  floor_by_ws: Record<string, number[]>;
  inside_sessions_s: number[];
}

const results: TaskFigures[] = [];
const load0 = loadavg()[0]!;
try {
  for (const id of taskIds) {
    const task = loadGraderTask(id);
    const worldSizes = gradedWorldSizes(task.fullSpec);
    const fingerprint = await hardwareFingerprint(task, factory);
    const taskHash = taskContentHash(task.taskDir);
    log(`${id}: calibrating gold at world sizes ${worldSizes.join(", ")} (not timed; cached in ${calDir})...`);
    const cal = (await calibrate({ task, cacheDir: calDir, sandboxFactory: factory, fingerprint, taskHash })).calibration;
    const fig: TaskFigures = { task: id, world_sizes: worldSizes, grade_s: [], floor_s: [], floor_by_ws: {}, inside_sessions_s: [] };
    for (let r = 0; r < rounds; r++) {
      const arms = r % 2 === 0 ? ["grade", "floor"] : ["floor", "grade"];
      for (const arm of arms) {
        if (arm === "grade") {
          const t0 = performance.now();
          const out = await gradeSubmission({ task, patchFile: task.hidden.goldenPatch, outDir: join(scratch, `grade-${id}-${r}`), calibration: cal, fingerprint, taskHash, sandboxFactory: factory });
          const s = (performance.now() - t0) / 1000;
          if (out.result.status !== "graded" || !out.result.with_probes.resolved_strict) throw new Error(`bench: gold's grade is ${out.result.status}, resolved ${out.result.with_probes.resolved_strict}`);
          const dir = join(out.artifactDir, "sessions");
          const inside = readdirSync(dir).reduce((sum, f) => sum + (JSON.parse(readFileSync(join(dir, f), "utf8")) as SessionResult).duration_s, 0);
          fig.grade_s.push(s);
          fig.inside_sessions_s.push(inside);
          log(`  round ${r + 1}: grade ${s.toFixed(1)} s (${inside.toFixed(1)} s inside launcher sessions)`);
        } else {
          let total = 0;
          for (const n of worldSizes) {
            const ws = await floorWorkspace(task);
            try {
              const t0 = performance.now();
              const codes = await plainPytest(task, ws.repoDir, n);
              const s = (performance.now() - t0) / 1000;
              if (codes.some((c) => c !== 0)) throw new Error(`bench: the floor's pytest at world size ${n} exited ${codes.join(", ")} (gold passes every required case)`);
              (fig.floor_by_ws[n] ??= []).push(s);
              total += s;
            } finally {
              removeWorkspace(ws);
            }
          }
          fig.floor_s.push(total);
          log(`  round ${r + 1}: floor ${total.toFixed(1)} s (${worldSizes.map((n) => `ws${n} ${fig.floor_by_ws[n]!.at(-1)!.toFixed(1)} s`).join(", ")})`);
        }
      }
    }
    results.push(fig);
  }
  const load1 = loadavg()[0]!;
  for (const f of results) {
    const g = median(f.grade_s);
    const fl = median(f.floor_s);
    const inside = median(f.inside_sessions_s);
    process.stdout.write(
      `${f.task} (world sizes ${f.world_sizes.join(", ")}; ${values.sandbox} sandbox; ${rounds} round(s), medians): grade ${g.toFixed(1)} s vs floor ${fl.toFixed(1)} s → ratio ${(g / fl).toFixed(2)} (target ≤ 1.3); ` +
        `grade inside launcher sessions ${inside.toFixed(1)} s, outside ${(g - inside).toFixed(1)} s; floor by world size ${f.world_sizes.map((n) => `${n}: ${median(f.floor_by_ws[n]!).toFixed(1)} s`).join(", ")}\n`,
    );
  }
  process.stdout.write(`load average ${load0.toFixed(1)} at the start, ${load1.toFixed(1)} at the end (${load1 > 2.5 || load0 > 2.5 ? "NOT a quiet machine: compare the ratios, not the seconds" : "quiet"})\n`);
  if (values.json) writeFileSync(values.json, `${JSON.stringify({ load: { start: load0, end: load1 }, rounds, sandbox: values.sandbox, tasks: results }, null, 2)}\n`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
