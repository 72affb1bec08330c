/**
 * `infradev run` end to end with the REAL harness binaries (Codex 0.169, OpenCode 1.18.33, pinned
 * devDependencies), the real server in the real local sandbox (bubblewrap) and the real grader, on
 * the tiny-mean fixture (2 gloo ranks). The one stand-in is the model: the scripted stand-in
 * (campaign/standin/), because no model is reachable here. Checked: the calls reach our server
 * (trace), the patch is the scripted one (as files), the grade exists, run.json's counts agree with
 * what the stand-in served, re-prompts continue the same session, the time limit ends the harness's
 * whole process group and the patch so far is graded, the out folder resumes, and nothing the
 * harness can reach holds golden or probe bytes.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { codexEntry } from "../../../src/campaign/harness/codex.js";
import { opencodeBinary } from "../../../src/campaign/harness/opencode.js";
import type { StandinRequest } from "../../../src/campaign/standin/server.js";
import type { RunRecord } from "../../../src/campaign/types.js";
import { packageRoot } from "../../../src/lib/paths.js";
import { ensureBuilt } from "../../helpers/backends.js";
import { TEST_FIXTURES } from "../../helpers/paths.js";

const FIXTURES = join(TEST_FIXTURES, "grader", "tasks");
const TASK_DIR = join(FIXTURES, "tiny-mean");
const GOLDEN = join(TASK_DIR, "hidden", "golden.patch");
const tmp = mkdtempSync(join(tmpdir(), "infradev-run-test-"));
const CAL = join(tmp, "cal");
let cli: string;

/** ensureBuilt does not look at campaign/: rebuild when it is newer than dist. */
function newest(dir: string): number {
  let t = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, e.name);
    t = Math.max(t, e.isDirectory() ? newest(p) : statSync(p).mtimeMs);
  }
  return t;
}

beforeAll(() => {
  cli = ensureBuilt();
  if (newest(join(packageRoot(), "src")) > statSync(cli).mtimeMs) execFileSync("npm", ["run", "--silent", "build"], { cwd: packageRoot(), stdio: "inherit" });
}, 300_000);
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

function run(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(process.execPath, [cli, "run", "--task", "tiny-mean", "--tasks-dir", FIXTURES, "--calibration-dir", CAL, ...args], {
    encoding: "utf8",
    env: { ...process.env, ...env },
    timeout: 240_000,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const readJson = <T>(file: string): T => JSON.parse(readFileSync(file, "utf8")) as T;
const record = (d: string) => readJson<RunRecord>(join(d, "run.json"));
const standinRequests = (d: string) =>
  readFileSync(join(d, "standin-requests.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as StandinRequest)
    .filter((r) => r.step !== null); // OpenCode's title request: not a step of the run
const traceTools = (d: string) =>
  readFileSync(join(d, "trace.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as { tool?: string })
    .flatMap((l) => (l.tool ? [l.tool] : []));

/** The repo's files after applying `patch` (a file; null: none) to a fresh copy of the base snapshot. */
function treeAfter(patch: string | null): Record<string, string> {
  const dir = mkdtempSync(join(tmp, "tree-"));
  cpSync(join(TASK_DIR, "repo"), dir, { recursive: true });
  if (patch !== null && readFileSync(patch, "utf8").trim()) execFileSync("git", ["apply", patch], { cwd: dir });
  const files: Record<string, string> = {};
  const walk = (rel: string) => {
    for (const e of readdirSync(join(dir, rel), { withFileTypes: true })) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(r);
      else files[r] = readFileSync(join(dir, r), "utf8");
    }
  };
  walk("");
  return files;
}

/** Processes (not zombies) still in process group `pgid`. */
function liveInGroup(pgid: number): number[] {
  const live: number[] = [];
  for (const pid of readdirSync("/proc").filter((n) => /^\d+$/.test(n))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const [state, , pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(pgrp) === pgid && state !== "Z") live.push(Number(pid));
    } catch {
      // gone meanwhile
    }
  }
  return live;
}

const sum = (rs: StandinRequest[], k: keyof StandinRequest["usage"]) => rs.reduce((a, r) => a + r.usage[k], 0);

/** The checks every submitted golden run must pass, whatever the harness. */
function expectGoldenRun(d: string, harness: "codex" | "opencode", version: string): void {
  const r = record(d);
  const served = standinRequests(d);
  expect(traceTools(d)).toEqual(["get_task", "run_shell", "pytest_collect", "pytest_run", "submit"]);
  expect(treeAfter(join(d, "patch.diff"))).toEqual(treeAfter(GOLDEN));
  const grade = readJson<{ status: string; official: { resolved: boolean }; with_probes: { resolved: boolean } }>(join(d, "grade.json"));
  expect(grade.status).toBe("graded");
  expect(grade.official.resolved).toBe(true);
  expect(grade.with_probes.resolved).toBe(true);
  expect(r).toMatchObject({
    schema_version: 1,
    run_id: `tiny-mean--${harness}--r1`,
    task_id: "tiny-mean",
    category: "training",
    type: "feature",
    agent: harness,
    harness,
    harness_version: version,
    model: "standin:golden",
    skill: true,
    repeat: 1,
    time_limit_min: 150,
    exit_reason: "submitted",
    error: null,
    attempts: 1,
    recoveries_used: 0,
    tool_calls: 5,
    tools_used: { get_task: 1, run_shell: 1, pytest_collect: 1, pytest_run: 1, submit: 1 },
    submitted: true,
    grade: { status: "graded", file: "grade.json" },
  });
  expect(r.patch_bytes).toBe(statSync(join(d, "patch.diff")).size);
  expect(r.wall_s).toBeGreaterThan(0);
  // What the harness reported equals what the stand-in served (non-zero by construction).
  expect(r.turns).toBe(served.length);
  expect(r.tokens).toEqual({ input: sum(served, "input"), cached_input: sum(served, "cached_input"), output: sum(served, "output"), reasoning: sum(served, "reasoning") });
  expect(r.tokens.input).toBeGreaterThan(0);
  // Only our server's tools reach the model: the harness's own shell is off.
  const offered = new Set(served.flatMap((s) => s.tools_offered));
  for (const own of ["exec_command", "shell", "bash", "write", "edit", "read"]) expect(offered.has(own), own).toBe(false);
  expect(existsSync(join(d, "harness-events.jsonl"))).toBe(true);
  // docs/agents.md lists both; OpenCode writes nothing to stderr, the file is there all the same.
  expect(existsSync(join(d, "harness-stderr.log"))).toBe(true);
  // The trace keeps each call's result (capped), not only its size: run_shell's shows the command's output.
  const calls = readFileSync(join(d, "trace.jsonl"), "utf8").trim().split("\n").map((l) => JSON.parse(l) as { tool?: string; result?: string; exit_code?: number });
  for (const c of calls.filter((x) => x.tool)) expect(typeof c.result, c.tool).toBe("string");
  expect(calls.find((c) => c.tool === "get_task")!.result).toContain("all_mean");
  expect(calls.find((c) => c.tool === "run_shell")!.exit_code).toBe(0);
}

describe.skipIf(codexEntry() === null || opencodeBinary() === null)("infradev run with the real Codex and OpenCode (skipped only when @openai/codex or opencode-ai is not installed: npm install)", () => {
  it("codex + standin:golden: trace, golden patch, resolved grade, run.json counts; running it again does nothing", () => {
    const d = join(tmp, "codex-golden");
    const r = run(["--agent", "codex", "--model", "standin:golden", "--out", d]);
    expect(r.status, r.stderr).toBe(0);
    expectGoldenRun(d, "codex", "0.169.0");
    const before = readFileSync(join(d, "run.json"), "utf8");
    const again = run(["--agent", "codex", "--model", "standin:golden", "--out", d]);
    expect(again.status, again.stderr).toBe(0);
    expect(again.stdout).toMatch(/already complete, nothing to do/);
    expect(readFileSync(join(d, "run.json"), "utf8")).toBe(before);
  }, 180_000);

  it("opencode + standin:golden: the same, and offline (no plugin install into its config dir)", () => {
    const d = join(tmp, "opencode-golden");
    const keep = join(tmp, "kept-opencode");
    mkdirSync(keep);
    const r = run(["--agent", "opencode", "--model", "standin:golden", "--out", d], { TMPDIR: keep, INFRADEV_KEEP_RUN_TMP: "1" });
    expect(r.status, r.stderr).toBe(0);
    expectGoldenRun(d, "opencode", "1.18.33");
    const [runTmp] = readdirSync(keep).filter((n) => n.startsWith("infradev-run-"));
    const configDir = join(keep, runTmp!, "harness", "home", ".config", "opencode");
    expect(readdirSync(configDir)).toContain("opencode.json");
    expect(readdirSync(configDir)).not.toContain("node_modules");
    expect(existsSync(join(configDir, "skills", "infra-dev", "SKILL.md"))).toBe(true);
  }, 180_000);

  it("early-exit: --recoveries 2 re-prompts the same Codex session to submit; --recoveries 0 ends harness_exited, and grades later", () => {
    const d = join(tmp, "codex-early");
    const r = run(["--agent", "codex", "--model", "standin:early-exit", "--recoveries", "2", "--out", d, "--no-grade"]);
    expect(r.status, r.stderr).toBe(0);
    const rec = record(d);
    expect(rec).toMatchObject({ exit_reason: "submitted", attempts: 2, recoveries_used: 1, submitted: true, grade: null });
    const attempts = readJson<Array<{ session_id: string }>>(join(d, "attempts.json"));
    expect(attempts[1]!.session_id).toBe(attempts[0]!.session_id);
    expect(traceTools(d)).toEqual(["get_task", "run_shell", "pytest_collect", "pytest_run", "submit"]);
    // A resumed Codex thread repeats earlier turns' usage; counted once.
    const served = standinRequests(d);
    expect(rec.tokens.input).toBe(sum(served, "input"));

    const d0 = join(tmp, "opencode-early0");
    const r0 = run(["--agent", "opencode", "--model", "standin:early-exit", "--recoveries", "0", "--out", d0, "--no-grade"]);
    expect(r0.status, r0.stderr).toBe(0);
    const rec0 = record(d0);
    expect(rec0).toMatchObject({ exit_reason: "harness_exited", attempts: 1, recoveries_used: 0, submitted: false, grade: null });
    expect(traceTools(d0)).toEqual(["get_task", "run_shell"]);
    expect(treeAfter(join(d0, "patch.diff"))).toEqual(treeAfter(GOLDEN)); // the edit was saved without submit
    // The same command without --no-grade grades only: the run is not repeated.
    const g = run(["--agent", "opencode", "--model", "standin:early-exit", "--recoveries", "0", "--out", d0]);
    expect(g.status, g.stderr).toBe(0);
    expect(g.stdout).toMatch(/graded now/);
    expect(record(d0)).toMatchObject({ started_at: rec0.started_at, grade: { status: "graded" } });
    expect(readJson<{ official: { resolved: boolean } }>(join(d0, "grade.json")).official.resolved).toBe(true);
  }, 180_000);

  it("time limit: the harness's whole process group is ended, the patch so far is graded", () => {
    const script = join(tmp, "edit-then-sleep.yaml");
    const golden = readFileSync(GOLDEN, "utf8");
    writeFileSync(script, JSON.stringify([{ call: "get_task" }, { call: "run_shell", args: { command: `git apply --whitespace=nowarn - <<'EOF'\n${golden}EOF` } }, { sleep_s: 3600 }, { say: "never" }]));
    const d = join(tmp, "codex-slow");
    const started = Date.now();
    const r = run(["--agent", "codex", "--model", `standin:file:${script}`, "--time-limit-min", "0.2", "--out", d]);
    expect(r.status, r.stderr).toBe(0);
    const rec = record(d);
    expect(rec).toMatchObject({ exit_reason: "time_limit", submitted: false, attempts: 1, grade: { status: "graded" } });
    expect(rec.wall_s).toBeGreaterThanOrEqual(12);
    expect(Date.now() - started).toBeLessThan(120_000);
    const [attempt] = readJson<Array<{ pid: number; timedOut: boolean }>>(join(d, "attempts.json"));
    expect(attempt!.timedOut).toBe(true);
    expect(liveInGroup(attempt!.pid)).toEqual([]);
    expect(treeAfter(join(d, "patch.diff"))).toEqual(treeAfter(GOLDEN));
    expect(readJson<{ official: { resolved: boolean } }>(join(d, "grade.json")).official.resolved).toBe(true);

    const s = join(tmp, "opencode-slow");
    const r2 = run(["--agent", "opencode", "--model", "standin:slow", "--time-limit-min", "0.25", "--out", s, "--no-grade"]);
    expect(r2.status, r2.stderr).toBe(0);
    // get_task, then the held response; on a loaded machine OpenCode may not even get that far in 15 s.
    expect(record(s)).toMatchObject({ exit_reason: "time_limit", submitted: false, patch_bytes: 0 });
    expect(record(s).tool_calls).toBeLessThanOrEqual(1);
    const [a2] = readJson<Array<{ pid: number }>>(join(s, "attempts.json"));
    expect(liveInGroup(a2!.pid)).toEqual([]);
  }, 180_000);

  it("the harness reaches only the public export: no golden or probe bytes anywhere it can read, nor in what the tools return", () => {
    const keep = join(tmp, "kept-tmp");
    mkdirSync(keep);
    const script = join(tmp, "look-around.yaml");
    writeFileSync(
      script,
      JSON.stringify([
        { call: "get_task" },
        { call: "run_shell", args: { command: "find / -xdev \\( -name '*.patch' -o -name 'test_probe*' -o -name hidden -o -name adversarial \\) -print 2>/dev/null; ls -laR /workspace /base | head -200" } },
        { call: "submit" },
      ]),
    );
    const d = join(tmp, "codex-export");
    const r = run(["--agent", "codex", "--model", `standin:file:${script}`, "--out", d, "--no-grade", "--no-skill"], { TMPDIR: keep, INFRADEV_KEEP_RUN_TMP: "1" });
    expect(r.status, r.stderr).toBe(0);
    expect(record(d)).toMatchObject({ exit_reason: "submitted", skill: false });
    const [runTmp] = readdirSync(keep).filter((n) => n.startsWith("infradev-run-"));
    const root = join(keep, runTmp!);
    expect(existsSync(join(root, "harness", "home", ".agents", "skills"))).toBe(false); // --no-skill
    expect(readFileSync(join(root, "harness", "codex-home", "config.toml"), "utf8")).toMatch(/shell_tool = false/);
    const exported = join(root, "export", "tiny-mean");
    expect(readdirSync(exported).sort()).toEqual(["prompt.md", "repo", "task.yaml"]);
    expect(readFileSync(join(exported, "task.yaml"), "utf8")).not.toMatch(/^(hidden|world_sizes):/m);
    // Added lines of golden that appear nowhere in the public snapshot, and the probes' file names.
    const publicText = Object.values(treeAfter(null)).join("\n");
    const secrets = readFileSync(GOLDEN, "utf8")
      .split("\n")
      .filter((l) => l.startsWith("+") && !l.startsWith("+++"))
      .map((l) => l.slice(1).trim())
      .filter((l) => l.length >= 12 && !publicText.includes(l));
    const publicNames = new Set(Object.keys(treeAfter(null)).map((f) => f.split("/").pop()));
    secrets.push(...readdirSync(join(TASK_DIR, "hidden", "probes")).filter((n) => !publicNames.has(n)), "golden.patch", "sum-not-mean", TASK_DIR);
    expect(secrets.length).toBeGreaterThan(5);
    // Everything of the run the harness or the server could read: export, runs (workspace, base, trace), the harness's home/config/scratch; and the events it got.
    const grep = spawnSync("grep", ["-rlF", ...secrets.flatMap((s) => ["-e", s]), root, join(d, "trace.jsonl"), join(d, "harness-events.jsonl")], { encoding: "utf8" });
    const found = grep.stdout.trim() ? grep.stdout.trim().split("\n").map((f) => `${f}: ${secrets.filter((x) => readFileSync(f).includes(x)).join(" | ")}`) : [];
    expect(found).toEqual([]);
    expect(grep.status).toBe(1);
  }, 180_000);
});

describe("infradev run: usage errors are one line, exit 2, before anything runs", () => {
  const cases: Array<[string, string[], RegExp]> = [
    ["docker flag without docker", ["--agent", "codex", "--model", "standin:golden", "--image", "x:y"], /--image applies only to --sandbox docker/],
    ["real model without URL", ["--agent", "codex", "--model", "gpt-x"], /--provider-url <url> is required/],
    ["key variable unset", ["--agent", "opencode", "--model", "m", "--provider-url", "http://127.0.0.1:9/v1", "--provider-key-env", "INFRADEV_TEST_UNSET_KEY"], /INFRADEV_TEST_UNSET_KEY: that variable is not set/],
    ["bad name", ["--agent", "codex", "--model", "standin:golden", "--name", "a--b"], /--name: agent name "a--b" cannot name a run folder/],
    ["bad time limit", ["--agent", "codex", "--model", "standin:golden", "--time-limit-min", "0"], /--time-limit-min.*expected minutes > 0/],
    ["unknown script", ["--agent", "codex", "--model", "standin:clever"], /unknown stand-in script/],
  ];
  for (const [what, args, message] of cases) {
    it(what, () => {
      const d = join(tmp, `usage-${what.replace(/\W+/g, "-")}`);
      const r = run([...args, "--out", d]);
      expect(r.status, r.stderr).toBe(2);
      expect(r.stderr.trim().split("\n")).toHaveLength(1);
      expect(r.stderr).toMatch(message);
      expect(existsSync(join(d, "run.json"))).toBe(false);
    }, 60_000);
  }
});
