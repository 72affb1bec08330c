import { execFile, spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CampaignJobRecord } from "../../../src/campaign/matrix/jobs.js";
import { readPredictions } from "../../../src/campaign/matrix/predictions.js";
import type { CampaignManifest, RunRecord } from "../../../src/campaign/types.js";
import type { GradeResult } from "../../../src/grader/grade/types.js";
import { packageRoot } from "../../../src/lib/paths.js";
import { TEST_FIXTURES } from "../../helpers/paths.js";

/**
 * `infradev grade-many` through the real CLI on tiny-mean (real `infradev grade` jobs, real gloo
 * ranks under bwrap): four predictions — golden, empty, one that does not apply, and an adversarial
 * one — at concurrency 2; the campaign process is SIGKILLed once the first grade is in, then the
 * same command resumes: finished grades are reused untouched and all four end with their statuses.
 */

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const HIDDEN = join(FIXTURES, "tiny-mean", "hidden");
const CLI = join(packageRoot(), "dist", "cli", "main.js");
const run = promisify(execFile);
let root: string;
let preds: string;
const out = () => join(root, "campaign");

const NOT_APPLYING = "diff --git a/tinyinfra/ops.py b/tinyinfra/ops.py\n--- a/tinyinfra/ops.py\n+++ b/tinyinfra/ops.py\n@@ -1,3 +1,3 @@\n-this line is not in the base\n+nor is this one\n context that is not there\n";

const IDS = {
  gold: "tiny-mean--gold--r1",
  empty: "tiny-mean--org_empty-model--r1",
  broken: "tiny-mean--broken--r1",
  adv: "tiny-mean--adv--r1",
};

function args(extra: string[] = [], file = preds): string[] {
  return [CLI, "grade-many", "--predictions", file, "--out", out(), "--tasks-dir", FIXTURES, "--concurrency", "2", ...extra];
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Processes whose command line names this test's folder (the campaign's jobs and their ranks). */
function processesUnder(dir: string): number[] {
  return readdirSync("/proc")
    .filter((p) => /^\d+$/.test(p) && Number(p) !== process.pid)
    .filter((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, "utf8").includes(dir);
      } catch {
        return false;
      }
    })
    .map(Number);
}

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "infradev-grade-many-"));
  preds = join(root, "preds.jsonl");
  const lines = [
    { task_id: "tiny-mean", model: "gold", patch: readFileSync(join(HIDDEN, "golden.patch"), "utf8") },
    // SWE-bench's field names; a model name a folder cannot carry as it is.
    { instance_id: "tiny-mean", model_name_or_path: "org/empty--model", model_patch: "" },
    { task_id: "tiny-mean", model: "broken", patch: NOT_APPLYING },
    { task_id: "tiny-mean", model: "adv", patch: readFileSync(join(HIDDEN, "adversarial", "sum-not-mean.patch"), "utf8") },
  ];
  writeFileSync(preds, lines.map((l) => JSON.stringify(l)).join("\n") + "\n");
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe("grade-many", () => {
  it("a bad line stops everything before any grade: file:line and exit 2", async () => {
    const bad = join(root, "bad.jsonl");
    writeFileSync(bad, `${readFileSync(preds, "utf8").split("\n")[0]}\n\n{"task_id": "tiny-mean", "model": "x"}\n`);
    const err = (await run(process.execPath, args([], bad)).catch((e) => e)) as { code: number; stderr: string };
    expect(err.code).toBe(2);
    expect(err.stderr).toContain(`${bad}:3: no patch`);
    expect(existsSync(out())).toBe(false);
    writeFileSync(bad, `{"task_id": "no-such-task", "model": "x", "patch": ""}\n`);
    const err2 = (await run(process.execPath, args([], bad)).catch((e) => e)) as { code: number; stderr: string };
    expect(err2.code).toBe(2);
    expect(err2.stderr).toMatch(new RegExp(`${bad}:1: .*unknown task "no-such-task"`));
  });

  it("killed (SIGKILL) midway and resumed: finished grades reused untouched, all four graded with their statuses", async () => {
    const first = spawn(process.execPath, args(), { stdio: ["ignore", "ignore", "pipe"] });
    let log1 = "";
    first.stderr!.on("data", (d) => (log1 += String(d)));
    const exited = new Promise<void>((r) => first.on("exit", () => r()));
    const graded = () => Object.values(IDS).filter((id) => existsSync(join(out(), "runs", id, "grade.json")));
    const deadline = Date.now() + 120_000;
    while (graded().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    expect(graded().length, log1).toBeGreaterThan(0);
    // Only the campaign process: its jobs must end by themselves (the local engine's watchdog).
    first.kill("SIGKILL");
    await exited;
    const deadline2 = Date.now() + 15_000;
    while (processesUnder(out()).length && Date.now() < deadline2) await new Promise((r) => setTimeout(r, 200));
    expect(processesUnder(out()).filter(alive), "the killed campaign's jobs outlived it").toEqual([]);
    // What finished is counted once its jobs are gone: a grade may land between the kill and the watchdog.
    const done1 = graded();
    expect(done1.length, "killed too late to test a resume").toBeLessThan(4);
    const before = new Map(done1.map((id) => [id, { grade: statSync(join(out(), "runs", id, "grade.json")).mtimeMs, job: readJson<CampaignJobRecord>(join(out(), "jobs", `${id}.json`)).engine_id }]));

    const second = await run(process.execPath, args(), { maxBuffer: 1 << 24 });
    expect(second.stderr).toContain(`${done1.length} of 4 prediction(s) already graded: reused`);
    for (const [id, b] of before) {
      expect(statSync(join(out(), "runs", id, "grade.json")).mtimeMs, id).toBe(b.grade);
      expect(readJson<CampaignJobRecord>(join(out(), "jobs", `${id}.json`)).engine_id, id).toBe(b.job);
    }

    const grade = (id: string) => readJson<GradeResult>(join(out(), "runs", id, "grade.json"));
    expect([grade(IDS.gold).status, grade(IDS.gold).official.resolved, grade(IDS.gold).with_probes.resolved]).toEqual(["graded", true, true]);
    expect(grade(IDS.empty).status).toBe("empty_patch");
    expect(grade(IDS.broken).status).toBe("inapplicable");
    expect([grade(IDS.adv).status, grade(IDS.adv).official.resolved, grade(IDS.adv).with_probes.resolved]).toEqual(["graded", true, false]);
    for (const id of Object.values(IDS)) {
      const r = readJson<RunRecord>(join(out(), "runs", id, "run.json"));
      expect([r.run_id, r.harness, r.exit_reason, r.grade]).toEqual([id, "predictions", "prediction", { status: grade(id).status, file: "grade.json" }]);
      expect(r.patch_bytes).toBe(statSync(join(out(), "runs", id, "patch.diff")).size);
    }
    expect(readJson<RunRecord>(join(out(), "runs", IDS.empty, "run.json")).model).toBe("org/empty--model");
    const m = readJson<CampaignManifest & { models: string[] }>(join(out(), "campaign.json"));
    expect([m.kind, m.tasks, m.models.length]).toEqual(["grade-many", ["tiny-mean"], 4]);

    // A third time: nothing to do, nothing touched.
    const mtimes = () => Object.values(IDS).map((id) => statSync(join(out(), "runs", id, "grade.json")).mtimeMs);
    const all = mtimes();
    const third = await run(process.execPath, args());
    expect(third.stderr).toContain("4 of 4 prediction(s) already graded: reused");
    expect(mtimes()).toEqual(all);
  }, 240_000);

  it("SIGTERM cancels the running grades (exit 143), keeps what finished, and leaves no process behind", async () => {
    const dir = join(root, "sigterm");
    const p = spawn(process.execPath, [CLI, "grade-many", "--predictions", preds, "--out", dir, "--tasks-dir", FIXTURES, "--concurrency", "2", "--calibration-dir", join(out(), "calibration")], { stdio: ["ignore", "ignore", "pipe"] });
    let log = "";
    p.stderr!.on("data", (d) => (log += String(d)));
    const code = new Promise<number | null>((r) => p.on("exit", (c) => r(c)));
    // Job records only: writeJsonAtomic's `<id>.json.tmp<pid>` files beside them are half-written by design.
    const records = () => readdirSync(join(dir, "jobs")).filter((f) => f.endsWith(".json") && !f.startsWith("calibrate--"));
    const running = () => (existsSync(join(dir, "jobs")) ? records().filter((f) => readJson<CampaignJobRecord>(join(dir, "jobs", f)).state === "running") : []);
    // Gold's calibration (three runs, a cold cache of its own) comes first: minutes on a loaded machine.
    const deadline = Date.now() + 240_000;
    while (running().length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(running().length, log).toBeGreaterThan(0);
    p.kill("SIGTERM");
    expect(await code).toBe(143);
    expect(log).toContain("SIGTERM: cancelling the running jobs");
    const states = records().map((f) => [f.replace(/\.json$/, ""), readJson<CampaignJobRecord>(join(dir, "jobs", f)).state] as const);
    for (const [id, state] of states) expect(state === "done" ? existsSync(join(dir, "runs", id, "grade.json")) : state === "cancelled", `${id}: ${state}`).toBe(true);
    expect(states.some(([, s]) => s === "cancelled")).toBe(true);
    expect(processesUnder(dir)).toEqual([]);
  }, 400_000);

  it("a different set of predictions on the same folder is refused unless --extend", async () => {
    const fewer = join(root, "fewer.jsonl");
    writeFileSync(fewer, readFileSync(preds, "utf8").split("\n").slice(0, 2).join("\n") + "\n");
    const err = (await run(process.execPath, args([], fewer)).catch((e) => e)) as { code: number; stderr: string };
    expect(err.code).toBe(2);
    expect(err.stderr).toMatch(/campaign\.json: this campaign was made with a different set of models/);
    const ok = await run(process.execPath, args(["--extend"], fewer));
    expect(ok.stderr).toContain("2 of 2 prediction(s) already graded: reused");
  });

  it("two identical predictions (same task, model and patch) are refused, naming both lines, unless --repeat-identical", async () => {
    const twice = join(root, "twice.jsonl");
    const line = readFileSync(preds, "utf8").split("\n")[0]!;
    writeFileSync(twice, `${line}\n${line}\n`);
    expect(() => readPredictions(twice)).toThrow(/twice\.jsonl:2: the same task, model and patch as .*twice\.jsonl:1/);
    expect(readPredictions(twice, twice, { repeatIdentical: true }).map((p) => p.run_id)).toEqual(["tiny-mean--gold--r1", "tiny-mean--gold--r2"]);
    const err = (await run(process.execPath, [CLI, "grade-many", "--predictions", twice, "--out", join(root, "twice-campaign"), "--tasks-dir", FIXTURES]).catch((e) => e)) as { code: number; stderr: string };
    expect(err.code).toBe(2);
    expect(err.stderr.trim().split("\n")).toHaveLength(1);
    expect(err.stderr).toMatch(/--repeat-identical/);
    expect(existsSync(join(root, "twice-campaign"))).toBe(false);
  });

  it("a folder of predictions: <task>--<model>.patch and *.jsonl files; anything else is named and refused", () => {
    const dir = join(root, "pred-dir");
    mkdirSync(dir);
    writeFileSync(join(dir, "tiny-mean--gold.patch"), "x");
    writeFileSync(join(dir, "more.jsonl"), `{"task_id":"tiny-mean","model":"gold","patch":null}\n`);
    const got = readPredictions(dir);
    expect(got.map((p) => [p.run_id, p.patch])).toEqual([
      ["tiny-mean--gold--r1", null],
      ["tiny-mean--gold--r2", "x"],
    ]);
    writeFileSync(join(dir, "notes.txt"), "");
    expect(() => readPredictions(dir)).toThrow(/pred-dir\/notes\.txt: not a prediction file/);
  });
});

function readJson<T>(file: string): T {
  return JSON.parse(readFileSync(file, "utf8")) as T;
}
