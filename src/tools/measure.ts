import type { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { runRanks } from "../runner/ranks.js";
import type { ToolDeps } from "./support/deps.js";
import {
  MeasurementSchema,
  RatioSchema,
  formatMeasurement,
  formatRatios,
  measurementFromCases,
  measurementFromCommand,
  ratios,
  type Measurement,
} from "./support/measure-aggregate.js";
import { measureCommand } from "./support/measure-command.js";
import { registerTool, type ToolContext } from "./support/register.js";
import { errorResult, okResult } from "./support/result.js";
import { newResultsDir } from "./support/results-dir.js";
import { firstBadTestPath } from "./support/sandbox-paths.js";
import { modeEnv, modeSchema, randomPort } from "./support/task-env.js";

const DEFAULT_COMMAND_TIMEOUT_SEC = 600;

/** The input schema for one task: `mode` is an enum of the task's modes. */
export const measureInput = (task: ToolDeps["task"]) => z.object({
  tests: z
    .array(z.string())
    .max(100)
    .optional()
    .describe("pytest node ids / files to measure (run on N ranks under the probe plugin; per rank, summed over the tests). Give tests or command."),
  command: z
    .string()
    .max(20_000)
    .optional()
    .describe(
      "a shell command started on every rank (RANK, WORLD_SIZE, MASTER_ADDR/PORT set), cwd = the checkout measured; every Python process " +
        "it runs is measured from start to exit. The checkout's code comes first on PYTHONPATH; $INFRADEV_WORKSPACE names the workspace " +
        "(e.g. `python $INFRADEV_WORKSPACE/bench.py`). Give tests or command.",
    ),
  ranks: z.number().int().min(1).max(64).optional().describe("number of ranks (default: the task's ranks)"),
  mode: modeSchema(task, "execution mode, one of the task's modes (default: the task's default mode)"),
  compare_with_base: z.boolean().optional().describe("also measure the pristine base checkout the same way and report after / before ratios"),
  timeout_sec: z.number().int().min(1).max(86_400).optional().describe("tests: per-test limit (default: the task's); command: whole-command limit (default 600)"),
});

export const MeasureOutput = z.object({
  target: z.enum(["tests", "command"]),
  ranks: z.number().int(),
  mode: z.string(),
  after: MeasurementSchema.describe("the workspace (your change)"),
  before: MeasurementSchema.nullable().describe("the pristine base checkout, with compare_with_base"),
  ratios: z.array(RatioSchema).describe("after / before per metric (max over ranks), with compare_with_base"),
  verdict: z.string(),
});

interface Target {
  kind: "tests" | "command";
  tests: string[];
  command: string;
}

async function measureCheckout(
  deps: ToolDeps,
  target: Target,
  checkout: Measurement["checkout"],
  dir: string,
  ranks: number,
  env: Record<string, string>,
  timeoutSec: number | undefined,
  ctx: ToolContext,
): Promise<Measurement> {
  const { sandbox, task } = deps;
  if (target.kind === "command") {
    const m = await measureCommand(sandbox, {
      command: target.command,
      ranks,
      checkoutDir: dir,
      timeoutSec: timeoutSec ?? DEFAULT_COMMAND_TIMEOUT_SEC,
      env,
      port: randomPort(),
      signal: ctx.signal,
    });
    if ("error" in m) return { checkout, ok: false, failure: m.error, per_rank: [], max_over_ranks: { wall_time_s: null, peak_memory_bytes: null, calls: {}, bytes: {} }, tests: [] };
    return measurementFromCommand(checkout, m);
  }
  const run = await runRanks(sandbox, {
    ranks,
    pytestArgs: [...target.tests, "-p", "no:cacheprovider"],
    outDir: newResultsDir(`measure-${checkout}`),
    cwd: dir,
    perTestTimeoutSec: timeoutSec ?? task.spec.timeout_sec,
    runTimeoutSec: task.spec.run_timeout_sec,
    env: { ...env, PYTHONDONTWRITEBYTECODE: "1" },
    signal: ctx.signal,
    onProgress: (done, total) => ctx.progress(done, total, `${checkout}: ${done}/${total} tests measured`),
  });
  return measurementFromCases(checkout, ranks, run.cases, run.harnessError ? `the launcher failed: ${run.harnessError}` : run.lostRecords ? `the run's results were lost (a test or the code under test killed or disturbed the launcher): ${run.lostRecords}` : null);
}

export function registerMeasureTool(server: McpServer, deps: ToolDeps): void {
  registerTool(
    server,
    deps,
    {
      name: "measure",
      title: "Measure resources (before vs after)",
      description:
        "Measures what code costs on each rank: wall time, peak memory (CUDA allocator peak, else host RSS), and calls + payload bytes of " +
        "every torch.distributed collective and point-to-point op. Give `tests` (pytest ids run on N ranks under the probe plugin) or " +
        "`command` (a shell command run on N ranks, every Python process measured). With compare_with_base the same measurement runs on " +
        "the pristine base checkout and the after / before ratios are returned: this is how to show that an optimisation really saves " +
        "the resource it promises.",
      input: measureInput(deps.task),
      output: MeasureOutput,
      // Runs the workspace's code (tests, conftest, whatever they import): it can change anything the
      // sandbox can, so neither read-only nor idempotent for a client that auto-approves those.
      annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    },
    async (args, ctx) => {
      const { sandbox, task, base } = deps;
      const hasTests = args.tests !== undefined && args.tests.length > 0;
      const hasCommand = args.command !== undefined && args.command.trim() !== "";
      if (hasTests === hasCommand) {
        return errorResult("measure: give exactly one of `tests` (pytest ids, e.g. [\"tests/test_trainer.py\"]) or `command` (e.g. \"python bench.py\")");
      }
      const badPath = firstBadTestPath("measure", args.tests ?? [], sandbox.repoDir);
      if (badPath) return errorResult(badPath);
      if (args.compare_with_base && !base) {
        return errorResult("measure: compare_with_base needs the pristine base checkout, which this session does not have (the sandbox backend does not mount it)");
      }
      const env = modeEnv(task, args.mode);
      if (!env.ok) return errorResult(`measure: ${env.error}`);
      const ranks = args.ranks ?? task.spec.ranks;
      const target: Target = { kind: hasTests ? "tests" : "command", tests: args.tests ?? [], command: args.command ?? "" };
      const after = await measureCheckout(deps, target, "workspace", sandbox.repoDir, ranks, env.env, args.timeout_sec, ctx);
      const before = args.compare_with_base && base ? await measureCheckout(deps, target, "base", base.sandboxDir, ranks, env.env, args.timeout_sec, ctx) : null;
      const rows = before ? ratios(after, before) : [];
      const changed = rows.filter((r) => r.ratio !== null && Math.abs(r.ratio - 1) > 0.02 && r.metric !== "wall_time_s");
      const verdict = !after.ok
        ? `workspace measurement is not clean: ${after.failure?.split("\n")[0]}`
        : before && !before.ok
          ? `base measurement is not clean (does the target exist on base?): ${before.failure?.split("\n")[0]}`
          : before
            ? changed.length > 0
              ? `after/before: ${changed.map((r) => `${r.metric} x${r.ratio!.toFixed(3)}`).join(", ")}`
              : "no collective or memory figure differs from base by more than 2%"
            : formatMeasurement(after);
      const out: z.infer<typeof MeasureOutput> = { target: target.kind, ranks, mode: env.mode, after, before, ratios: rows, verdict };
      const text = [verdict, formatMeasurement(after), ...(before ? [formatMeasurement(before), "after/before:", formatRatios(rows)] : [])].join("\n");
      const trace = { target: target.kind, ranks, compare_with_base: Boolean(before), after_ok: after.ok, before_ok: before?.ok ?? null };
      if (!after.ok && after.per_rank.length === 0) return { ...errorResult(`measure: ${after.failure}`, out), trace };
      return { ...okResult(out, text), trace };
    },
  );
}
