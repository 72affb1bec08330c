/**
 * Submit → results wall of one campaign on the one-node Slurm cluster (.ci/slurm-setup.sh) vs the
 * local engine, on this machine, in one run:
 *
 *   - the campaign: `infradev eval` of 2 tasks (tiny-mean, check-mean) × 2 stand-in agents (codex
 *     golden, opencode adversarial), gold calibrated once beforehand into a shared folder so both
 *     walls measure the runs alone; local = `--engine local --concurrency 2`, Slurm = `--engine slurm`
 *     (2 CPUs, one run per CPU). `--rounds N` alternates local / slurm N times (load hits both alike).
 *   - the engine's own overhead: N trivial jobs (`/bin/true`) submitted at once, submit → all ended.
 *
 *   npx tsx bench/campaign_slurm.ts [--rounds 1] [--trivial 10]
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Engine, JobSpec } from "../src/campaign/engines/types.js";
import { LocalEngine } from "../src/campaign/engines/local.js";
import { SlurmEngine } from "../src/campaign/engines/slurm.js";
import { packageRoot } from "../src/lib/paths.js";
import { ensureBuilt } from "../test/helpers/backends.js";

function flag(name: string, dflt: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
}

const rounds = flag("rounds", 1);
const trivial = flag("trivial", 10);
execFileSync("npm", ["run", "--silent", "build"], { cwd: packageRoot(), stdio: "inherit" });
const cli = ensureBuilt();
const root = mkdtempSync(join(tmpdir(), "infradev-bench-slurm-"));
const tasksDir = join(root, "tasks");
const TASKS = [["tiny-mean", "test/fixtures/grader/tasks"], ["check-mean", "test/fixtures/check/tasks"]] as const;
for (const [id, from] of TASKS) cpSync(join(packageRoot(), from, id), join(tasksDir, id), { recursive: true });
const cal = join(root, "calibration");
for (const [id] of TASKS) execFileSync(process.execPath, [cli, "calibrate", "--task", id, "--tasks-dir", tasksDir, "--calibration-dir", cal], { stdio: "pipe" });

function campaign(engine: "local" | "slurm", out: string): number {
  const args = [cli, "eval", "--tasks", TASKS.map(([id]) => id).join(","), "--tasks-dir", tasksDir, "--agent", "gold=codex:standin:golden", "--agent", "adv=opencode:standin:adversarial", "--time-limit-min", "5", "--calibration-dir", cal, "--out", out, "--engine", engine, ...(engine === "local" ? ["--concurrency", "2"] : [])];
  const t0 = Date.now();
  const r = spawnSync(process.execPath, args, { encoding: "utf8" });
  if (r.status !== 0) throw new Error(`eval --engine ${engine} exited ${r.status}: ${r.stderr}`);
  return (Date.now() - t0) / 1000;
}

async function trivialJobs(engine: Engine, n: number): Promise<number> {
  const dir = mkdtempSync(join(root, "trivial-"));
  const specs: JobSpec[] = Array.from({ length: n }, (_, i) => ({ id: `t${i}`, argv: ["/bin/true"], cwd: dir, gpus: 0, cpus: 1, timeLimitSec: 60, stdoutPath: join(dir, `t${i}.out`), stderrPath: join(dir, `t${i}.err`) }));
  const t0 = Date.now();
  const ids = [];
  for (const s of specs) ids.push((await engine.submit(s)).engineId);
  const states = await Promise.all(ids.map((id) => engine.wait(id)));
  if (states.some((s) => s.state !== "done")) throw new Error(`trivial jobs: ${states.map((s) => s.state).join(",")}`);
  await engine.close();
  return (Date.now() - t0) / 1000;
}

const walls: { local: number[]; slurm: number[] } = { local: [], slurm: [] };
for (let i = 0; i < rounds; i++) {
  walls.local.push(campaign("local", join(root, `local-${i}`)));
  walls.slurm.push(campaign("slurm", join(root, `slurm-${i}`)));
}
const trivialLocal = await trivialJobs(new LocalEngine({ concurrency: 2 }), trivial);
const trivialSlurm = await trivialJobs(new SlurmEngine({ pollIntervalMs: 500 }), trivial);
const sum = (a: number[]) => a.reduce((x, y) => x + y, 0);
console.log(
  JSON.stringify(
    {
      campaign: "2 tasks x 2 stand-in agents (4 runs)",
      local_concurrency_2_s: walls.local,
      slurm_2_cpus_s: walls.slurm,
      ratio_slurm_over_local: Number((sum(walls.slurm) / sum(walls.local)).toFixed(2)),
      trivial_jobs: trivial,
      trivial_local_s: trivialLocal,
      trivial_slurm_s: trivialSlurm,
      load_average: execFileSync("cat", ["/proc/loadavg"], { encoding: "utf8" }).trim(),
    },
    null,
    2,
  ),
);
rmSync(root, { recursive: true, force: true });
