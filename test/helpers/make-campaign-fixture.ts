/**
 * Builds test/fixtures/campaign: a small campaign folder whose grade.json files are REAL grades
 * (`infradev grade` on the tiny-mean and check-mean fixture tasks) and whose run.json / trace.jsonl
 * records are written here by hand to stand in for the harness part (no model runs in CI). The
 * patches hold agent-written test files (one added, one changed) for the report's Figure 6.
 *
 *   npm run build && npx tsx test/helpers/make-campaign-fixture.ts [--out DIR]
 *
 * Grades go to a temporary results/calibration folder; only result.json is copied in (as grade.json).
 * test/campaign-report.test.ts asserts numbers derived by hand from the facts listed in RUNS below.
 */
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { CampaignManifest, RunRecord } from "../../src/campaign/types.js";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const TASKS: Record<string, { tasksDir: string; category: string; type: string }> = {
  "tiny-mean": { tasksDir: join(ROOT, "test/fixtures/grader/tasks"), category: "training", type: "feature" },
  "check-mean": { tasksDir: join(ROOT, "test/fixtures/check/tasks"), category: "training", type: "feature" },
};

/** The test file agent alpha adds next to the golden change (every assertion class appears). */
const ALPHA_TEST = `import time
import unittest

import pytest
import torch
import torch.distributed as dist

from tinyinfra import ops
from tinyinfra.ops import all_mean


def test_mean_value():
    x = torch.full((3,), float(dist.get_rank()))
    out = all_mean(x)
    expected = sum(range(dist.get_world_size())) / dist.get_world_size()
    torch.testing.assert_close(out, torch.full((3,), expected))
    assert torch.allclose(out, torch.full((3,), expected), atol=1e-6)


def test_mean_shape_and_type():
    out = all_mean(torch.ones(2, 5))
    assert out.shape == (2, 5)
    assert isinstance(out, torch.Tensor)
    assert hasattr(ops, "all_mean")


def test_rejects_a_list():
    with pytest.raises(AttributeError):
        all_mean([1.0, 2.0])


def test_mean_is_quick():
    start = time.perf_counter()
    all_mean(torch.ones(1000))
    elapsed = time.perf_counter() - start
    assert elapsed < 5.0


class TestMean(unittest.TestCase):
    def test_copy(self):
        t = torch.ones(2)
        assert all_mean(t) is not t
        self.assertEqual(all_mean(torch.ones(1)).item(), 1.0)
        self.assertRaises(TypeError, all_mean, None)
        self.assertAlmostEqual(all_mean(torch.full((1,), 2.0)).item(), 2.0)
`;

/** What agent beta appends to the existing tests/test_ops.py (a changed file: only these lines are its own). */
const BETA_TEST_TAIL = `

def test_all_mean_value():
    from tinyinfra.ops import all_mean

    out = all_mean(torch.ones(3) * (dist.get_rank() + 1))
    assert out.sum() > 0
    assert torch.isclose(out[0], out[1])
`;

interface RunSpec {
  task: string;
  agent: "alpha" | "beta";
  repeat: number;
  /** Patch of the task's hidden folder the submission's source change is, or none. */
  source: string | null;
  /** Test files the agent writes: added file contents, or text appended to an existing file. */
  tests?: { add?: Record<string, string>; append?: Record<string, string> };
  /** false: no grade.json (the run counts as not graded); "missing": graded without a patch. */
  grade: true | false | "missing";
  exit_reason: RunRecord["exit_reason"];
  wall_s: number;
  turns: number;
  tokens: RunRecord["tokens"];
  tools: string[];
  pytest_paths?: string[];
}

const ALPHA_TOKENS = (k: number): RunRecord["tokens"] => ({ input: 180_000 + 10_000 * k, cached_input: 120_000 + 5_000 * k, output: 9_000 + 1_000 * k, reasoning: 4_000 + 500 * k });
const BETA_TOKENS = (k: number): RunRecord["tokens"] => ({ input: 90_000 + 10_000 * k, cached_input: 40_000, output: 6_000 + 1_000 * k, reasoning: null });

const RUNS: RunSpec[] = [
  // alpha: golden + its own test file; an adversarial patch (two all-reduces: Set A yes, Set B no); nothing (time limit).
  { task: "tiny-mean", agent: "alpha", repeat: 1, source: "golden.patch", tests: { add: { "tests/test_mean_agent.py": ALPHA_TEST } }, grade: true, exit_reason: "submitted", wall_s: 600, turns: 14, tokens: ALPHA_TOKENS(1), tools: ["get_task", "run_shell", "run_shell", "pytest_collect", "pytest_run", "pytest_run", "submit"], pytest_paths: ["tests/test_mean_agent.py"] },
  { task: "tiny-mean", agent: "alpha", repeat: 2, source: "adversarial/two-all-reduces.patch", grade: true, exit_reason: "submitted", wall_s: 900, turns: 20, tokens: ALPHA_TOKENS(2), tools: ["get_task", "run_shell", "pytest_run", "submit"], pytest_paths: ["tests"] },
  { task: "tiny-mean", agent: "alpha", repeat: 3, source: null, grade: "missing", exit_reason: "time_limit", wall_s: 9000, turns: 40, tokens: ALPHA_TOKENS(3), tools: ["get_task", "run_shell", "run_shell", "run_shell"] },
  { task: "check-mean", agent: "alpha", repeat: 1, source: "alternatives/divide-first.patch", grade: true, exit_reason: "submitted", wall_s: 300, turns: 10, tokens: ALPHA_TOKENS(0), tools: ["get_task", "run_shell", "pytest_run", "submit"], pytest_paths: ["tests/test_ops.py"] },
  // beta: an adversarial patch (sum, not mean) + a test appended to tests/test_ops.py; an empty patch; golden; hollow; one run not graded.
  { task: "tiny-mean", agent: "beta", repeat: 1, source: "adversarial/sum-not-mean.patch", tests: { append: { "tests/test_ops.py": BETA_TEST_TAIL } }, grade: true, exit_reason: "submitted", wall_s: 400, turns: 8, tokens: BETA_TOKENS(1), tools: ["get_task", "run_shell", "pytest_run", "submit"], pytest_paths: ["tests/test_ops.py"] },
  { task: "tiny-mean", agent: "beta", repeat: 2, source: "EMPTY", grade: true, exit_reason: "harness_exited", wall_s: 200, turns: 4, tokens: BETA_TOKENS(2), tools: ["get_task"] },
  { task: "tiny-mean", agent: "beta", repeat: 3, source: "golden.patch", grade: true, exit_reason: "submitted", wall_s: 500, turns: 12, tokens: BETA_TOKENS(3), tools: ["get_task", "run_shell", "pytest_collect", "pytest_run", "submit"], pytest_paths: ["tests"] },
  { task: "check-mean", agent: "beta", repeat: 1, source: "hollow.patch", grade: true, exit_reason: "submitted", wall_s: 700, turns: 9, tokens: BETA_TOKENS(4), tools: ["get_task", "run_shell", "submit"] },
  { task: "check-mean", agent: "beta", repeat: 2, source: "golden.patch", grade: false, exit_reason: "submitted", wall_s: 800, turns: 11, tokens: BETA_TOKENS(5), tools: ["get_task", "run_shell", "submit"] },
];

function sh(cmd: string, args: string[], cwd: string): string {
  return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
}

/** The submission as a diff against the task's base: the hidden patch applied, then the agent's test files. */
function buildPatch(spec: RunSpec, scratch: string): string {
  if (spec.source === null) return "";
  if (spec.source === "EMPTY") return "";
  const taskDir = join(TASKS[spec.task]!.tasksDir, spec.task);
  const repo = join(scratch, `${spec.task}-${spec.agent}-${spec.repeat}`);
  cpSync(join(taskDir, "repo"), repo, { recursive: true });
  const git = (...a: string[]) => sh("git", ["-c", "user.name=fixture", "-c", "user.email=fixture@invalid", ...a], repo);
  git("init", "-q");
  git("add", "-A");
  git("commit", "-qm", "base");
  git("apply", join(taskDir, "hidden", spec.source));
  for (const [path, text] of Object.entries(spec.tests?.add ?? {})) writeFileSync(join(repo, path), text);
  for (const [path, text] of Object.entries(spec.tests?.append ?? {})) writeFileSync(join(repo, path), readFileSync(join(repo, path), "utf8") + text);
  git("add", "-A");
  return git("diff", "--cached", "HEAD");
}

function main(): void {
  const outArg = process.argv.indexOf("--out");
  const out = resolve(outArg > 0 ? process.argv[outArg + 1]! : join(ROOT, "test/fixtures/campaign"));
  const scratch = mkdtempSync(join(tmpdir(), "infradev-campaign-fixture-"));
  const cli = join(ROOT, "dist/cli/main.js");
  if (!existsSync(cli)) throw new Error(`${cli} is missing: run npm run build first`);
  rmSync(join(out, "runs"), { recursive: true, force: true });
  const t0 = Date.parse("2026-12-01T10:00:00Z");
  try {
    for (const [i, spec] of RUNS.entries()) {
      const id = `${spec.task}--${spec.agent}--r${spec.repeat}`;
      const dir = join(out, "runs", id);
      mkdirSync(dir, { recursive: true });
      const patch = buildPatch(spec, scratch);
      if (spec.source !== null) writeFileSync(join(dir, "patch.diff"), patch);
      let status: string | null = null;
      if (spec.grade !== false) {
        const args = [cli, "grade", "--task", spec.task, "--tasks-dir", TASKS[spec.task]!.tasksDir, "--json", "--out", join(scratch, "results"), "--calibration-dir", join(scratch, "cal")];
        if (spec.grade !== "missing") args.push("--patch", join(dir, "patch.diff"));
        process.stderr.write(`grading ${id} ...\n`);
        const result = execFileSync(process.execPath, args, { cwd: ROOT, encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
        writeFileSync(join(dir, "grade.json"), result);
        status = (JSON.parse(result) as { status: string }).status;
      }
      const started = new Date(t0 + i * 3_600_000);
      const trace = spec.tools.map((tool, k) => ({
        ts: new Date(started.getTime() + (k + 1) * 10_000).toISOString(),
        tool,
        args: tool === "pytest_run" ? { paths: spec.pytest_paths ?? [] } : tool === "run_shell" ? { command: "ls" } : {},
        duration_ms: 1000,
        is_error: false,
        result_text_bytes: 100,
      }));
      writeFileSync(join(dir, "trace.jsonl"), trace.map((t) => `${JSON.stringify(t)}\n`).join(""));
      const toolsUsed: Record<string, number> = {};
      for (const t of spec.tools) toolsUsed[t] = (toolsUsed[t] ?? 0) + 1;
      const record: RunRecord = {
        schema_version: 1,
        run_id: id,
        task_id: spec.task,
        category: TASKS[spec.task]!.category,
        type: TASKS[spec.task]!.type,
        agent: spec.agent,
        harness: spec.agent === "alpha" ? "codex" : "opencode",
        harness_version: spec.agent === "alpha" ? "0.169.0" : "1.18.33",
        model: spec.agent === "alpha" ? "model-a" : "model-b",
        skill: spec.agent === "alpha",
        repeat: spec.repeat,
        started_at: started.toISOString(),
        ended_at: new Date(started.getTime() + spec.wall_s * 1000).toISOString(),
        wall_s: spec.wall_s,
        time_limit_min: 150,
        exit_reason: spec.exit_reason,
        error: null,
        attempts: 1,
        recoveries_used: 0,
        turns: spec.turns,
        tool_calls: spec.tools.length,
        tools_used: toolsUsed,
        tokens: spec.tokens,
        patch_bytes: Buffer.byteLength(patch),
        submitted: spec.exit_reason === "submitted",
        grade: status === null ? null : { status, file: "grade.json" },
      };
      writeFileSync(join(dir, "run.json"), `${JSON.stringify(record, null, 2)}\n`);
    }
    const manifest: CampaignManifest = {
      schema_version: 1,
      kind: "eval",
      created_at: new Date(t0).toISOString(),
      updated_at: new Date(t0 + RUNS.length * 3_600_000).toISOString(),
      tasks_dir: null,
      tasks: Object.keys(TASKS),
      agents: (["alpha", "beta"] as const).map((name) => ({
        name,
        harness: name === "alpha" ? "codex" : "opencode",
        model: name === "alpha" ? "model-a" : "model-b",
        provider_url: null,
        provider_key_env: null,
        skill: name === "alpha",
        recoveries: 0,
        time_limit_min: 150,
      })),
      repeats: 3,
      engine: "local",
      concurrency: 1,
      argv: ["infradev", "eval", "(fixture built by test/helpers/make-campaign-fixture.ts)"],
    };
    writeFileSync(join(out, "campaign.json"), `${JSON.stringify(manifest, null, 2)}\n`);
    writeFileSync(
      join(out, "prices.yaml"),
      "# USD per million tokens (fixture prices, not any provider's)\nmodels:\n  model-a: { input: 2.0, cached_input: 0.5, output: 10.0 }\n  model-b: { input: 1.0, output: 4.0, reasoning: 8.0 }\n",
    );
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

main();
