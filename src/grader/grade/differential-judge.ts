import { createHash } from "node:crypto";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { execa } from "execa";
import type { RankAttachment } from "../../runner/ranks.js";
import { runRanks } from "../../runner/ranks.js";
import type { Sandbox } from "../../sandbox/types.js";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { DIFFERENTIAL_MODULE, differentialCaseName } from "../../task/hidden/differential.js";
import { gitCacheDir, hostPythonDir } from "../../lib/paths.js";
import { readJsonFile, writeJsonAtomic } from "../../lib/json.js";
import type { Progress } from "../../lib/progress.js";
import { applyPatch } from "../workspace/apply.js";
import { PROBES_DIR } from "../workspace/harness-files.js";
import { freshWorkspace, installGradingTests, pytestPinFor, removeWorkspace, revertTestConfig } from "../workspace/workspace.js";
import { mapCaseId, type InstallMap } from "../workspace/test-renaming.js";
import { GradingInterrupted, type JudgeContext, type SandboxFactory, type SessionPlan } from "./sessions.js";
import type { CaseRecord } from "./types.js";

/**
 * The host's half of the golden-differential probes (hidden/differential.yaml; the recording half is
 * python/host/infradev_differential.py, staged with the probes).
 *
 * The submission's probe session records what the package did on every workload (its own code only:
 * nothing of golden is staged there). Golden's records come from a session of their own — a fresh
 * base workspace with the golden patch applied, the differential module alone — made once per task
 * content, hardware, mode and world size and kept under the git cache's derived/ folder, which no
 * sandbox shows. The rules are applied here, on the host, by `python3 -I -S infradev_differential.py
 * compare` (stdlib only, JSON in and out: nothing of a sandbox is imported or unpickled), and the
 * answer becomes the outcome of each rule's probe case. So a submission can neither call golden's
 * code nor read golden's answers during grading: it must compute them.
 *
 * A failing workload is shrunk in rounds while the task's shrink budget lasts: golden's session
 * proposes smaller candidates of the current failing workloads (the driver's shrink(), then generic
 * cuts) and records golden on them; the submission's workspace runs the same candidates; the first
 * candidate of each rule's workload that still fails becomes that rule's workload.
 */

/** Bumped when golden's records would differ for the same inputs (the recorder's format or behaviour). */
const REFERENCE_FORMAT = 1;
const WORKLOADS_ENV = "INFRADEV_DIFFERENTIAL_WORKLOADS";
const CANDIDATES_ENV = "INFRADEV_DIFFERENTIAL_SHRINK";
const RECORD_NAME = "differential.json";
const MAX_SHRINK_ROUNDS = 6;

/** One rank's records as the recorder writes them (parsed JSON; only the fields the host reads). */
interface RankRecords {
  format: number;
  rank: number;
  world: number;
  workloads: Array<{ index: number | string; workload: unknown; error: string | null; parent?: number | string }>;
  unreached: Array<number | string>;
}

type Records = Record<string, RankRecords>;

interface Failure {
  index: number | string;
  rank: number;
  message: string;
  workload: unknown;
}

interface JudgeAnswer {
  failures: Record<string, Failure>;
  compared: number;
  all?: Record<string, Array<number | string>>;
}

export interface DifferentialJudgeOptions {
  task: GraderTask;
  /** Task content + hardware (`<task hash>:<fingerprint hash>[:…]`): golden's records are kept per its first two fields. */
  runKey: string;
  sandboxFactory: SandboxFactory;
  /** The submission's install (to find the differential module's installed name). */
  map: InstallMap;
  /** The probe plan's test modules (dropped from a rerun's arguments). */
  probeFiles: readonly string[];
  /** Shrink failing workloads (off for the check's mutants: only the verdict counts there). */
  shrink: boolean;
  /** Where the judge writes what it found per session (`differential.<session>.json`). */
  artifactDir: string;
  onProgress?: Progress;
  signal?: AbortSignal;
}

/** The judge for a grade's probe sessions (sessions.ts RunSessionsOptions.judge), or undefined when the task has no differential. */
export function differentialJudge(opts: DifferentialJudgeOptions): ((ctx: JudgeContext) => Promise<CaseRecord[]>) | undefined {
  const diff = opts.task.hidden.differential;
  if (!diff) return undefined;
  const installed = installedDifferential(opts.map);
  return async (ctx) => {
    const { plan } = ctx;
    const prefix = `${plan.idPrefix}${PROBES_DIR}/${DIFFERENTIAL_MODULE}::`;
    const ruleCase = new Map(diff.spec.rules.map((r) => [r.id, `${prefix}${differentialCaseName(r.id)}`]));
    const mine = ctx.cases.filter((c) => c.id.startsWith(prefix));
    // Skipped here (world sizes the rules do not apply at), or the module failed on its own: nothing to judge.
    if (!installed || !mine.some((c) => c.outcome === "passed")) return ctx.cases;
    const say = (m: string) => opts.onProgress?.(`${plan.fileName}: differential: ${m}`);
    const gold = await goldenRecords(opts, plan, {});
    const sub = parseRecords(ctx.attachments, plan.ranks);
    const rules = diff.spec.rules;
    let answer: JudgeAnswer;
    if (ctx.attachmentsDropped > 0 && Object.keys(sub).length < plan.ranks) {
      answer = { failures: Object.fromEntries(rules.map((r) => [r.id, { index: "-", rank: 0, message: "the session's differential records were over the result bundle's cap", workload: null }])), compared: 0 };
    } else {
      answer = await compare(rules, gold, sub, false);
    }
    const failed = Object.keys(answer.failures);
    say(`${answer.compared} workload(s) compared with golden's, ${failed.length ? `rules failed: ${failed.join(", ")}` : "every rule holds"}`);
    const shrunk = failed.length && opts.shrink ? await shrinkFailures(opts, ctx, answer.failures, installed, say) : new Map<string, { failure: Failure; steps: number }>();
    const details: Record<string, unknown> = {};
    const out = ctx.cases.map((c) => {
      const rule = rules.find((r) => ruleCase.get(r.id) === c.id);
      const f = rule ? answer.failures[rule.id] : undefined;
      if (!rule || !f || c.outcome !== "passed") return c;
      const small = shrunk.get(rule.id);
      const minimal = small?.failure ?? f;
      const shown = JSON.stringify(minimal.workload);
      const first = `differential rule ${rule.id} (promise ${rule.promise}): ${clip(minimal.message, 200)}; minimal failing workload: ${clip(shown, 600)}`;
      details[rule.id] = {
        message: minimal.message,
        minimal_workload: minimal.workload,
        shrink_steps: small?.steps ?? 0,
        original: { index: f.index, rank: f.rank, message: f.message, workload: f.workload },
        seed: diff.spec.seed,
        world_size: plan.ranks,
      };
      return { ...c, outcome: "failed" as const, error_type: "AssertionError", message: `AssertionError: ${first}` };
    });
    writeJsonAtomic(join(opts.artifactDir, `differential.${plan.fileName}.json`), { compared: answer.compared, failures: details });
    return out;
  };
}

/** The differential module's installed (random) name in an install, if the install has it. */
function installedDifferential(map: InstallMap): string | undefined {
  return Object.entries(map.files).find(([, f]) => f.real === `${PROBES_DIR}/${DIFFERENTIAL_MODULE}`)?.[0];
}

function clip(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n - 3)}...`;
}

/** rank → records from a session's attachments; ranks whose file is absent or unreadable are left out. */
function parseRecords(attachments: readonly RankAttachment[], ranks: number): Records {
  const out: Records = {};
  for (const a of attachments) {
    if (a.name !== RECORD_NAME || a.rank < 0 || a.rank >= ranks) continue;
    try {
      const r = JSON.parse(a.text) as RankRecords;
      if (r && typeof r === "object" && Array.isArray(r.workloads)) out[String(a.rank)] = r;
    } catch {
      // the submission's records do not parse: as absent (every rule fails for that rank)
    }
  }
  return out;
}

/** Runs the host comparator (stdlib Python, JSON over stdin/stdout). `all`: every failing index per rule too. */
async function compare(rules: unknown[], golden: Records, submission: Records, all: boolean): Promise<JudgeAnswer> {
  const script = join(hostPythonDir(), "infradev_differential.py");
  const r = await execa("python3", ["-I", "-S", script, all ? "compare-all" : "compare"], {
    input: JSON.stringify({ rules, golden, submission }),
    reject: false,
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
    extendEnv: false,
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.exitCode !== 0) throw new Error(`the differential comparator failed (exit ${r.exitCode ?? r.signal}): ${String(r.stderr).trim().split("\n").slice(-3).join(" | ")}`);
  const out = JSON.parse(String(r.stdout)) as JudgeAnswer & { spec_error?: string };
  if (out.spec_error) throw new Error(`hidden/differential.yaml: ${out.spec_error}`);
  return out;
}

/**
 * Golden's records for a plan's mode and world size: the seed's workloads (env {}), cached; or a
 * shrink round's candidates (env names their parents), not cached.
 */
async function goldenRecords(opts: DifferentialJudgeOptions, plan: SessionPlan, env: Record<string, string>): Promise<Records> {
  const cached = Object.keys(env).length === 0;
  const runner = readFileSync(join(hostPythonDir(), "infradev_differential.py"));
  const key = createHash("sha256")
    .update(JSON.stringify({ REFERENCE_FORMAT, base: opts.runKey.split(":").slice(0, 2).join(":"), mode: plan.mode, env: plan.env, ranks: plan.ranks }))
    .update(runner)
    .digest("hex")
    .slice(0, 24);
  const file = join(gitCacheDir(), "derived", "differential-golden", `${opts.task.id}-${key}.json`);
  if (cached) {
    const hit = readJsonFile<Records>(file);
    if (hit) return hit;
    opts.onProgress?.(`${plan.fileName}: differential: recording golden's side (its own session over a fresh base workspace with the golden patch)`);
  }
  const records = await runGolden(opts, plan, env);
  const bad = Object.values(records).flatMap((r) => r.workloads.filter((w) => w.error).map((w) => `workload ${JSON.stringify(w.index)}: ${w.error}`));
  if (cached) {
    if (Object.keys(records).length !== plan.ranks) throw new Error(`${opts.task.id}: golden's differential session recorded ${Object.keys(records).length} of ${plan.ranks} ranks`);
    if (bad.length) throw new Error(`${opts.task.id}: golden fails the differential's own workloads (a driver or task bug): ${bad.slice(0, 3).join("; ")}`);
    mkdirSync(join(gitCacheDir(), "derived", "differential-golden"), { recursive: true });
    writeJsonAtomic(file, records);
  }
  return records;
}

/** One session of the differential module alone over a fresh base workspace with the golden patch applied. */
async function runGolden(opts: DifferentialJudgeOptions, plan: SessionPlan, env: Record<string, string>): Promise<Records> {
  const { task } = opts;
  const ws = await freshWorkspace(task);
  try {
    const applied = await applyPatch(ws.repoDir, task.hidden.goldenPatch, ws.baseCommit);
    if (!applied.applied) throw new Error(`${task.id}: the golden patch does not apply: ${applied.reason}`);
    await revertTestConfig(task, ws, applied.paths);
    const install = await installGradingTests(task, ws, applied.paths);
    const installed = installedDifferential(install.staged.map);
    if (!installed) throw new Error(`${task.id}: the differential module was not installed for golden's session`);
    const pin = pytestPinFor(ws.repoDir);
    let sandbox: Sandbox;
    try {
      sandbox = await opts.sandboxFactory({ task, hostRepoDir: ws.repoDir, readOnlyOverlays: install.staged.overlays });
    } catch (e) {
      throw new Error(`golden's differential session: the sandbox could not start: ${(e as Error).message}`);
    }
    try {
      const r = await runRanks(sandbox, {
        ranks: plan.ranks,
        pytestArgs: [installed, "--continue-on-collection-errors", ...pin.args],
        ...(install.staged.probePlugin ? { plugins: [`path:${install.staged.probePlugin}`] } : {}),
        outDir: `.infradev/grade/${plan.mode}`,
        perTestTimeoutSec: task.fullSpec.timeout_sec,
        runTimeoutSec: task.fullSpec.run_timeout_sec,
        env: { ...plan.env, ...env },
        signal: opts.signal,
      });
      if (opts.signal?.aborted) throw new GradingInterrupted("golden's differential session interrupted");
      const problem = r.harnessError ?? r.lostRecords;
      if (problem) throw new Error(`${task.id}: golden's differential session failed: ${problem}`);
      // Its own rule cases only (the twins staged into the module fail by design).
      const broken = r.cases.filter((c) => mapCaseId(install.staged.map, c.id)?.suite === "probe" && c.outcome !== "passed" && c.outcome !== "skipped");
      if (broken.length && Object.keys(env).length === 0) {
        const why = broken[0]!.ranks.find((x) => x.outcome !== "passed")?.message ?? broken[0]!.outcome;
        throw new Error(`${task.id}: golden's differential session did not record cleanly (${broken[0]!.id}: ${clip(why, 300)})`);
      }
      return parseRecords(r.attachments, plan.ranks);
    } finally {
      await sandbox.close();
    }
  } finally {
    removeWorkspace(ws);
  }
}

/** Failing workloads made smaller in rounds (golden proposes and records the candidates, the submission records them too). */
async function shrinkFailures(
  opts: DifferentialJudgeOptions,
  ctx: JudgeContext,
  failures: Record<string, Failure>,
  installed: string,
  say: (m: string) => void,
): Promise<Map<string, { failure: Failure; steps: number }>> {
  const diff = opts.task.hidden.differential!;
  const budget = diff.spec.budget;
  const deadline = Date.now() + (budget.shrink_seconds ?? Math.max(10, (budget.seconds ?? 60) / 2)) * 1000;
  const maxRuns = budget.shrink_runs ?? 40;
  const size = (w: unknown) => workloadSize(w);
  const state = new Map(Object.entries(failures).map(([id, f]) => [id, { failure: f, steps: 0 }]));
  const args = [installed, ...ctx.plan.pytestArgs.filter((a) => !opts.probeFiles.includes(a))];
  let runs = 0;
  for (let round = 0; round < MAX_SHRINK_ROUNDS && Date.now() < deadline && runs < maxRuns; round++) {
    const parents: Array<{ index: string; workload: unknown }> = [];
    const parentOf = new Map<string, string>();
    for (const [id, s] of state) {
      const key = JSON.stringify(s.failure.workload);
      let p = parents.find((x) => JSON.stringify(x.workload) === key);
      if (!p) parents.push((p = { index: `p${parents.length}`, workload: s.failure.workload }));
      parentOf.set(id, p.index);
    }
    const gold = await goldenRecords(opts, ctx.plan, { [CANDIDATES_ENV]: JSON.stringify(parents) });
    const first = gold[Object.keys(gold).sort()[0] ?? "0"];
    const items = (first?.workloads ?? []).filter((w) => !Object.values(gold).some((r) => r.workloads.find((x) => x.index === w.index)?.error)).slice(0, Math.max(0, maxRuns - runs));
    if (!items.length) break;
    runs += items.length;
    const sub = await ctx.rerun(args, { [WORKLOADS_ENV]: JSON.stringify(items.map((w) => ({ index: w.index, workload: w.workload }))) });
    if (sub.problem) {
      say(`shrinking stopped: the submission's rerun failed (${clip(sub.problem, 200)})`);
      break;
    }
    const answer = await compare(diff.spec.rules, gold, parseRecords(sub.attachments, ctx.plan.ranks), true);
    let improved = false;
    for (const [id, s] of state) {
      const failing = new Set((answer.all?.[id] ?? []).map((i) => JSON.stringify(i)));
      const pick = items.find((w) => w.parent === parentOf.get(id) && failing.has(JSON.stringify(w.index)) && size(w.workload) < size(s.failure.workload));
      if (!pick) continue;
      const msg = answer.all && answer.failures[id] && JSON.stringify(answer.failures[id]!.index) === JSON.stringify(pick.index) ? answer.failures[id]!.message : undefined;
      state.set(id, { failure: { index: pick.index, rank: answer.failures[id]?.rank ?? 0, message: msg ?? (await messageFor(diff.spec.rules, id, gold, sub.attachments, ctx.plan.ranks, pick.index)) ?? s.failure.message, workload: pick.workload }, steps: s.steps + 1 });
      improved = true;
    }
    say(`shrink round ${round + 1}: ${items.length} candidate(s), ${improved ? "smaller failing workloads found" : "none smaller fails"}`);
    if (!improved) break;
  }
  return state;
}

/** The message of one rule on one workload (the comparator over that workload alone). */
async function messageFor(rules: Array<{ id: string }>, id: string, gold: Records, attachments: readonly RankAttachment[], ranks: number, index: number | string): Promise<string | undefined> {
  const only = (r: Records): Records => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, { ...v, workloads: v.workloads.filter((w) => JSON.stringify(w.index) === JSON.stringify(index)) }]));
  const a = await compare(rules.filter((r) => r.id === id), only(gold), only(parseRecords(attachments, ranks)), false);
  return a.failures[id]?.message;
}

/** A size to compare workloads by (total list lengths and integers; the seed left out), as the recorder's workload_size. */
export function workloadSize(w: unknown, key?: string): number {
  if (key === "seed") return 0;
  if (Array.isArray(w)) return w.length + w.reduce((n: number, v) => n + workloadSize(v), 0);
  if (w && typeof w === "object") return Object.entries(w as Record<string, unknown>).reduce((n, [k, v]) => n + workloadSize(v, k), 0);
  if (typeof w === "number" && Number.isInteger(w)) return Math.abs(w);
  return 0;
}
