import { execFile, spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RUN_DEFAULTS, parseAgentFlag, readAgentsFile } from "../../../src/campaign/matrix/agents.js";
import type { CampaignJobRecord } from "../../../src/campaign/matrix/jobs.js";
import type { RunStatusRow } from "../../../src/campaign/matrix/status.js";
import type { CampaignManifest, RunRecord } from "../../../src/campaign/types.js";
import type { GradeResult } from "../../../src/grader/grade/types.js";
import { packageRoot } from "../../../src/lib/paths.js";
import { TEST_FIXTURES } from "../../helpers/paths.js";

/**
 * `infradev eval` end to end: 2 tasks (tiny-mean, check-mean) × 2 agents driven by the scripted
 * stand-in model (a stand-in for a language model: it plays fixed tool calls) through the REAL
 * Codex CLI and the REAL OpenCode binary, graded by real 2-rank gloo sessions under bwrap, at
 * concurrency 2. The campaign process is SIGKILLed once the first run is complete and the same
 * command resumes it: the finished run is not run again, the rest complete, nothing outlives the kill.
 */

const CLI = join(packageRoot(), "dist", "cli", "main.js");
const run = promisify(execFile);
let root: string;
let tasksDir: string;
const out = () => join(root, "campaign");
/** The shared gold cache `grade` uses; a campaign without --calibration-dir must use it too. */
const cache = () => join(root, "calibration-cache");
const env = () => ({ ...process.env, INFRADEV_CALIBRATION_DIR: cache() });
const RUNS = ["tiny-mean--gold--r1", "tiny-mean--adv--r1", "check-mean--gold--r1", "check-mean--adv--r1"];

function evalArgs(extra: string[] = []): string[] {
  return [CLI, "eval", "--tasks", "tiny-mean,check-mean", "--tasks-dir", tasksDir, "--agent", "gold=codex:standin:golden", "--agent", "adv=opencode:standin:adversarial", "--concurrency", "2", "--time-limit-min", "4", "--out", out(), ...extra];
}
const readJson = <T>(f: string) => JSON.parse(readFileSync(f, "utf8")) as T;
const complete = (id: string) => existsSync(join(out(), "runs", id, "grade.json")) && existsSync(join(out(), "runs", id, "run.json"));

/** Processes started by this campaign's jobs: they carry INFRADEV_CAMPAIGN_JOB=<campaign>/jobs/… (campaign/jobs.ts). */
function campaignProcesses(): number[] {
  const marker = `INFRADEV_CAMPAIGN_JOB=${join(out(), "jobs")}`;
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/environ`, "latin1").split("\0").some((e) => e.startsWith(marker));
      } catch {
        return false;
      }
    })
    .map(Number);
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-eval-"));
  tasksDir = join(root, "tasks");
  mkdirSync(tasksDir);
  cpSync(join(TEST_FIXTURES, "grader", "tasks", "tiny-mean"), join(tasksDir, "tiny-mean"), { recursive: true });
  cpSync(join(TEST_FIXTURES, "check", "tasks", "check-mean"), join(tasksDir, "check-mean"), { recursive: true });
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("eval", () => {
  it("2 tasks × 2 stand-in agents on real Codex and OpenCode, concurrency 2, SIGKILLed and resumed: all 4 complete, none re-run", async () => {
    const first = spawn(process.execPath, evalArgs(), { stdio: ["ignore", "ignore", "pipe"], env: env() });
    let log1 = "";
    first.stderr!.on("data", (d) => (log1 += String(d)));
    const exited = new Promise<void>((r) => first.on("exit", () => r()));
    const deadline = Date.now() + 240_000;
    while (!RUNS.some(complete) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(RUNS.some(complete), log1).toBe(true);
    first.kill("SIGKILL");
    await exited;
    // The killed campaign's jobs end by themselves (the engine's watchdog), harness processes included.
    const gone = Date.now() + 20_000;
    while (campaignProcesses().length && Date.now() < gone) await new Promise((r) => setTimeout(r, 200));
    expect(campaignProcesses(), "processes of the killed campaign are still running").toEqual([]);

    // What finished is counted once its jobs are gone: a run may complete between the kill and the watchdog.
    const done1 = RUNS.filter(complete);
    expect(done1.length, "killed too late to test a resume").toBeLessThan(4);
    const snap = (id: string) => ({
      run: statSync(join(out(), "runs", id, "run.json")).mtimeMs,
      grade: statSync(join(out(), "runs", id, "grade.json")).mtimeMs,
      job: readJson<CampaignJobRecord>(join(out(), "jobs", `${id}.json`)).engine_id,
    });
    const before = new Map(done1.map((id) => [id, snap(id)]));
    // Finished calibrations (file -> mtime). The kill may land while one task's gold is still being
    // calibrated (its folder there, no calibration.json yet): that one is redone on resume.
    const calibrations = () =>
      new Map(
        readdirSync(cache())
          .flatMap((t) => readdirSync(join(cache(), t)).map((h) => join(cache(), t, h, "calibration.json")))
          .filter((f) => existsSync(f))
          .map((f) => [f, statSync(f).mtimeMs] as const),
      );
    const cal1 = calibrations();
    expect(cal1.size, "a graded run's task has its calibration").toBeGreaterThanOrEqual(1);

    // While nothing runs, `eval status` reads the folder: finished runs done, the others not.
    const st = JSON.parse((await run(process.execPath, [CLI, "eval", "status", out(), "--json"])).stdout) as RunStatusRow[];
    expect(st.map((r) => r.run_id)).toEqual(RUNS);
    for (const r of st) {
      if (done1.includes(r.run_id)) expect(r.state, r.run_id).toBe("done");
      else expect(["interrupted", "pending"], r.run_id).toContain(r.state);
    }

    const second = await run(process.execPath, evalArgs(), { maxBuffer: 1 << 24, env: env() });
    expect(second.stderr).toContain(`${done1.length} of 4 run(s) already complete: reused`);
    for (const [id, b] of before) expect(snap(id), id).toEqual(b);
    expect(RUNS.every(complete)).toBe(true);
    // Gold was calibrated once per task: what the first command finished, the resumed one found cached.
    const cal2 = calibrations();
    expect(cal2.size).toBe(2);
    for (const [f, mtime] of cal1) expect(cal2.get(f), f).toBe(mtime);
    // Nothing calibrated into the campaign folder: the shared cache serves the next campaign and `grade` alike.
    expect(existsSync(join(out(), "calibration"))).toBe(false);

    for (const id of RUNS) {
      const rec = readJson<RunRecord>(join(out(), "runs", id, "run.json"));
      const grade = readJson<GradeResult>(join(out(), "runs", id, "grade.json"));
      const gold = id.includes("--gold--");
      expect([rec.run_id, rec.harness, rec.exit_reason, rec.submitted], id).toEqual([id, gold ? "codex" : "opencode", "submitted", true]);
      expect([grade.status, grade.official.resolved, grade.with_probes.resolved], id).toEqual(["graded", true, gold]);
      expect(rec.grade, id).toEqual({ status: "graded", file: "grade.json" });
    }
    const m = readJson<CampaignManifest>(join(out(), "campaign.json"));
    expect([m.kind, m.tasks, m.agents.map((a) => `${a.name}=${a.harness}:${a.model}`), m.repeats]).toEqual(["eval", ["tiny-mean", "check-mean"], ["gold=codex:standin:golden", "adv=opencode:standin:adversarial"], 1]);

    const table = (await run(process.execPath, [CLI, "eval", "status", out()])).stdout;
    expect(table).toContain("4 run(s): 4 done");
    expect(table).toMatch(/check-mean--adv--r1\s+done\s+submitted\s+graded\s+yes\/no/);
  }, 600_000);

  it("a different matrix on the same folder is refused (exit 2) unless --extend; an agent's settings never change under its name", async () => {
    const other = [CLI, "eval", "--tasks", "tiny-mean", "--tasks-dir", tasksDir, "--agent", "gold=codex:standin:golden", "--time-limit-min", "4", "--out", out()];
    const e1 = (await run(process.execPath, other).catch((e) => e)) as { code: number; stderr: string };
    expect(e1.code).toBe(2);
    expect(e1.stderr).toMatch(/campaign\.json: this campaign was made with a different set of tasks/);
    const changed = evalArgs(["--extend"]).map((a) => (a === "adv=opencode:standin:adversarial" ? "adv=opencode:standin:early-exit" : a));
    const e2 = (await run(process.execPath, changed).catch((e) => e)) as { code: number; stderr: string };
    expect(e2.code).toBe(2);
    expect(e2.stderr).toMatch(/agent "adv" was run with other settings \(model "standin:adversarial" → "standin:early-exit"\)/);
  });

  it("agents from flags and a YAML file, with the command line's defaults; bad ones are one-line errors", () => {
    const a = parseAgentFlag("gold=codex:standin:golden", RUN_DEFAULTS);
    expect(a).toEqual({ name: "gold", harness: "codex", model: "standin:golden", provider_url: null, provider_key_env: null, skill: true, recoveries: 3, time_limit_min: 150 });
    expect(parseAgentFlag("opencode:standin:slow", { ...RUN_DEFAULTS, skill: false }).name).toBe("opencode");
    expect(() => parseAgentFlag("x=claude:m", RUN_DEFAULTS)).toThrow(/harness "claude" is not one of codex, opencode/);
    expect(() => parseAgentFlag("bad--name=codex:standin:golden", RUN_DEFAULTS)).toThrow(/cannot name a run folder/);
    expect(() => parseAgentFlag("real=codex:gpt-5", RUN_DEFAULTS)).toThrow(/needs an endpoint: --provider-url/);
    process.env.INFRADEV_TEST_KEY = "k";
    const real = parseAgentFlag("real=codex:gpt-5", { ...RUN_DEFAULTS, provider_url: "http://127.0.0.1:9/v1", provider_key_env: "INFRADEV_TEST_KEY" });
    expect([real.provider_url, real.provider_key_env]).toEqual(["http://127.0.0.1:9/v1", "INFRADEV_TEST_KEY"]);
    const file = join(root, "agents.yaml");
    writeFileSync(file, "- {name: g, harness: codex, model: 'standin:golden', recoveries: 0}\n- {harness: opencode, model: 'standin:early-exit', skill: false}\n");
    expect(readAgentsFile(file, RUN_DEFAULTS).map((x) => [x.name, x.recoveries, x.skill])).toEqual([["g", 0, true], ["opencode", 3, false]]);
    writeFileSync(file, "- {harness: codex, model: 'standin:golden', colour: red}\n");
    expect(() => readAgentsFile(file, RUN_DEFAULTS)).toThrow(/agents\.yaml: \[0\]: .*colour/);
  });
});
