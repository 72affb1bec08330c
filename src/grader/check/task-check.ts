import { availableParallelism } from "node:os";
import { mirrorListFiles } from "../../task/public/snapshot.js";
import { existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { displayPath } from "../../task/public/loader.js";
import { type GraderTask } from "../../task/hidden/grader-task.js";
import { calibrate } from "../grade/calibrate.js";
import { sha256, taskContentHash } from "../../lib/files.js";
import { writeJsonAtomic } from "../../lib/json.js";
import { hardwareFingerprint } from "../workspace/fingerprint.js";
import { gradedWorldSizes, type StopRule } from "../grade/sessions.js";
import { gradeSubmission } from "../grade/grade.js";
import { generateHollow, generateMutants, type Mutant, type MutantSkips } from "./mutants.js";
import { acceptanceProblems, failingCases, type FailingCases } from "./acceptance-rules.js";
import { scanProbeMarkers, type MarkerScan } from "./probe-markers.js";
import { classifyGoldSkips } from "./world-size-skips.js";
import { scoresByOperator } from "./mutant-operators.js";
import { authorPlaceholders } from "./placeholders.js";
import { collectiveTimeouts, interfaceContract, promptLeaks, withTaskTrees, type AnalysisOptions } from "./task-analysis.js";
import type { Calibration, GradeResult } from "../grade/types.js";
import { prefixed, type Progress } from "../../lib/progress.js";
import { DEFAULT_MIN_MUTATION_SCORE, type CheckOptions, type CheckReport, type CoverageRow, type Finding, type FindingLevel, type MutantRow, type MutantVerdict, type SubmissionRow } from "./types.js";

export type { CheckOptions, CheckReport, CoverageRow, Finding, FindingLevel, MutantRow, MutantVerdict, SubmissionRow };
export { DEFAULT_MIN_MUTATION_SCORE };

/**
 * `task check`: the task author's acceptance check, Algorithm 2 of the InfraDev paper extended.
 *
 * Static: promises as data (every probe marked with a known promise and kind, every adversarial
 * `breaks` known, every promise probed), the interface contract named in prompt.md, verbatim leaks of
 * the golden patch into the prompt, author traps (post-PR tests that drop base test files, a per-test
 * limit above the collective timeout, no hollow patch).
 * Runs (through the normal grading pipeline, gold calibrated 3×): gold with no skipped probe; base,
 * empty and hollow (hand-written and generated) rejected; every adversarial patch resolved in Set A,
 * rejected in Set B, and caught by a failing probe of every promise it declares to break; every
 * alternative-correct patch resolved (strict) in Set A and Set B (a probe failing one is over-strict);
 * mutants of the golden patch, generated with `ast`, killed (mutation score ≥ the threshold).
 */

export function defaultJobs(task: GraderTask): number {
  // A GPU task holds its GPUs; on CPU every grade runs `ranks` processes: leave room for them, since a
  // starved rank can time out and read as a kill that the mutant did not earn.
  if (task.fullSpec.requires_gpu) return 1;
  return Math.max(1, Math.floor(availableParallelism() / 2));
}

/** Runs `fn` over `items` with at most `jobs` at once, in order of start; results in input order. */
export async function pool<T, R>(items: readonly T[], jobs: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(jobs, items.length)) }, worker));
  return out;
}

/** A seeded shuffle (mulberry32): the same seed samples the same mutants. */
export function seededSample<T>(items: readonly T[], n: number, seed: number): T[] {
  let a = seed >>> 0;
  const rand = () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [copy[i], copy[j]] = [copy[j]!, copy[i]!];
  }
  return copy.slice(0, n);
}

function summary(r: GradeResult | null) {
  return {
    set_a: { resolved: r?.official.resolved ?? null, resolved_strict: r?.official.resolved_strict ?? null, score: r?.official.score ?? null },
    set_b: { resolved: r?.with_probes.resolved ?? null, resolved_strict: r?.with_probes.resolved_strict ?? null, score: r?.with_probes.score ?? null },
  };
}

/** Cases gold passes (every run) that the result did not pass (cases an early stop skipped are `not_run`, unlabelled). */
function failingVsGold(result: GradeResult, cal: Calibration): FailingCases {
  const promise = new Map(cal.cases.map((c) => [c.id, c.probe?.promise ?? null]));
  return failingCases(result, (id) => promise.get(id) ?? null);
}

/**
 * Base test files under test_dirs that the post-PR tests do not have. A git source's base is listed
 * from the cache's mirror (base's tree), a dir source's from its folder.
 */
export function droppedTestFiles(task: GraderTask): string[] {
  if (task.source.kind === "git") {
    const base = mirrorListFiles(task.source.url, task.source.base, task.fullSpec.test_dirs.map((d) => d.replace(/\/+$/, "")));
    return base.filter((f) => !existsSync(join(task.hidden.testsDir, f)));
  }
  const base = task.source.dir;
  const out: string[] = [];
  const walk = (root: string, rel: string) => {
    const here = join(root, rel);
    if (!existsSync(here)) return;
    for (const e of readdirSync(here, { withFileTypes: true })) {
      if (e.name === "__pycache__" || e.name.startsWith(".")) continue;
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) walk(root, r);
      else if (e.isFile()) out.push(r);
    }
  };
  for (const d of task.fullSpec.test_dirs) walk(base, d);
  return out.filter((f) => !existsSync(join(task.hidden.testsDir, f)));
}

function removedTestsListed(task: GraderTask): Set<string> {
  const f = join(task.taskDir, task.fullSpec.hidden.dir, "removed_tests.txt");
  if (!existsSync(f)) return new Set();
  return new Set(
    readFileSync(f, "utf8")
      .split("\n")
      .map((l) => l.replace(/#.*/, "").trim())
      .filter(Boolean),
  );
}

/** A definition of done that asks for one process (then world size 1 must be graded). */
const SINGLE_PROCESS = /\b(in a single process|single-process|one-rank process group|a single rank|on one rank|world size 1)\b/i;

/** Whether prompt.md names a symbol (its last dotted component, as a whole word). */
function namedIn(prompt: string, name: string): boolean {
  const word = name.split(".").pop()!.replace(/[$()*+.?[\\\]^{|}]/g, "\\$&");
  return new RegExp(`(^|[^A-Za-z0-9_])${word}([^A-Za-z0-9_]|$)`).test(prompt);
}

/** torch's default collective timeouts (torch.distributed.constants): gloo 30 min; NCCL 10 min in torch ≥ 2.2. */
const DEFAULT_COLLECTIVE_TIMEOUT_S = 600;

/** What every phase of a check shares: the task, the options, where findings go. */
interface CheckContext {
  task: GraderTask;
  spec: GraderTask["fullSpec"];
  opts: CheckOptions;
  worldSizes: number[];
  scratch: string;
  add: (level: FindingLevel, area: string, message: string) => void;
  say: Progress;
}

/**
 * `task check`: the static half (promises, probe markers, author traps, golden vs base analysis),
 * then gold calibrated, the controls graded (base, empty, hollow, adversarial, alternatives), the
 * mutants graded, and every promise's coverage. Each phase adds findings; the report says whether
 * any is an error.
 */
export async function checkTask(opts: CheckOptions): Promise<CheckReport> {
  const { task } = opts;
  const started = Date.now();
  const findings: Finding[] = [];
  const scratch = join(opts.outDir, "work");
  mkdirSync(scratch, { recursive: true });
  const spec = task.fullSpec;
  const ctx: CheckContext = {
    task,
    spec,
    opts,
    worldSizes: opts.worldSizes ? [...opts.worldSizes].sort((a, b) => a - b) : gradedWorldSizes(spec),
    scratch,
    add: (level, area, message) => findings.push({ level, area, message }),
    say: (m, kind) => opts.onProgress?.(m, kind),
  };
  const { promises, probesOf } = checkPromisesAndMarkers(ctx);
  checkAuthorTraps(ctx);
  const golden = await analyseGolden(opts.staticOnly ? { ...ctx, opts: { ...opts, runMutants: false } } : ctx);
  // What the static checks found is said now, not after gold's calibration (minutes): a marker typo
  // is fixed before anything runs.
  const staticErrors = findings.filter((f) => f.level === "error");
  for (const f of staticErrors) ctx.say(`${task.id}: static check: [${f.area}] ${f.message}`);
  if (opts.staticOnly) {
    ctx.say(`${task.id}: static checks done: ${staticErrors.length} error(s); nothing was run (--static)`);
    return writeReport(opts, {
      task: task.id,
      task_dir: task.taskDir,
      passed: staticErrors.length === 0,
      stage: "static",
      started_at: new Date(started).toISOString(),
      duration_s: (Date.now() - started) / 1000,
      world_sizes: ctx.worldSizes,
      findings,
      coverage: promiseCoverage(ctx, promises, probesOf, [], null),
      gold: null,
      submissions: [],
      mutants: null,
      contract: golden.contract,
      leaks: golden.leaks,
    });
  }
  if (staticErrors.length) ctx.say(`${task.id}: ${staticErrors.length} static error(s) above; the check goes on (--static stops here)`);
  const gold = await calibrateGold(ctx);
  const grade = serialGrader(ctx, gold);
  const submissions = await gradeControls(ctx, gold, grade, golden.hollow);
  const mutants = golden.mutants ? await gradeMutants(ctx, gold, grade, golden.mutants) : null;
  const coverage = promiseCoverage(ctx, promises, probesOf, submissions, mutants);
  const worldSizes = ctx.worldSizes;
  const { contract, leaks } = golden;
  const { cal, handle, goldProbes, skippedProbes } = gold;
  const report: CheckReport = {
    task: task.id,
    task_dir: task.taskDir,
    passed: !findings.some((f) => f.level === "error"),
    stage: "full",
    started_at: new Date(started).toISOString(),
    duration_s: (Date.now() - started) / 1000,
    world_sizes: worldSizes,
    findings,
    coverage,
    gold: { runs: cal.runs, cases: cal.cases.length, probes: goldProbes.length, flaky: cal.flaky, skipped_probes: skippedProbes, calibration_cached: handle.cached },
    submissions,
    mutants,
    contract,
    leaks,
  };
  return writeReport(opts, report);
}

function writeReport(opts: CheckOptions, report: CheckReport): CheckReport {
  writeJsonAtomic(join(opts.outDir, "report.json"), report);
  return report;
}

/**
 * The static half of `task check`: promises and probe markers, author traps (placeholders left by
 * `task new` among them), and the golden patch's analysis (interface contract, leaks into the prompt,
 * collective timeouts, the generated hollow) — nothing graded, no GPU needed. `passed` is whether
 * that half finds no error; the full check can still fail on what only running shows.
 */
export async function checkTaskStatic(opts: CheckOptions): Promise<CheckReport> {
  return checkTask({ ...opts, staticOnly: true });
}

/** Promises, probe markers and their links (static: nothing runs). */
function checkPromisesAndMarkers({ task, spec, opts, add }: CheckContext) {
  const promises = task.hidden.promises;
  if (!promises) add("error", "promises", `${displayPath(join(task.taskDir, spec.hidden.dir))}/promises.yaml: missing: list the task's promises (id, one line, the prompt.md fragment it comes from); every probe marker and adversarial \`breaks\` must name one`);
  let markers: MarkerScan = { probes: [], problems: [] };
  try {
    markers = scanProbeMarkers(task, { python: opts.hostPython });
  } catch (e) {
    add("error", "markers", (e as Error).message);
  }
  for (const p of markers.problems) add("error", "markers", p);
  const probesOf = (id: string) => markers.probes.filter((p) => p.marker?.promise === id).map((p) => `${p.file}::${p.name}`);
  if (promises) for (const p of promises) if (!probesOf(p.id).length) add("error", "promises", `${p.declaredAt}: promise "${p.id}" has no probe (no probe marker names it)`);
  if (!task.hidden.alternatives.length) add("warning", "alternatives", `no ${spec.hidden.dir}/alternatives/index.yaml: without alternative-correct patches nothing shows the probes accept a correct patch that differs from golden`);

  return { promises, probesOf };
}

/** Mistakes an author makes that no grade would show: a single-process prompt never graded at 1 rank, test files the post-PR tree drops. */
function checkAuthorTraps({ task, spec, worldSizes, add }: CheckContext): void {
  const singleProcess = SINGLE_PROCESS.exec(task.prompt);
  if (singleProcess && !worldSizes.includes(1)) {
    const line = task.prompt.slice(0, singleProcess.index).split("\n").length;
    add("error", "traps", `prompt.md:${line} asks for a single process ("${singleProcess[0]}"), but the graded world sizes (${worldSizes.join(", ")}) leave out 1: add 1 to world_sizes in task.yaml`);
  }
  const listedRemoved = removedTestsListed(task);
  const dropped = droppedTestFiles(task).filter((f) => !listedRemoved.has(f));
  if (dropped.length) {
    add(
      "error",
      "traps",
      `the post-PR tests (${displayPath(task.hidden.testsDir)}) replace the whole test folder and drop ${dropped.length} file(s) the base has: ${dropped.join(", ")} — copy them into ${displayPath(task.hidden.testsDir)}/ to keep them, or, if the PR deletes them, list them (one per line) in ${spec.hidden.dir}/removed_tests.txt`,
    );
  }
  for (const p of authorPlaceholders(task)) add("warning", "placeholders", p);
  if (!task.hidden.hollowPatch) add("warning", "hollow", `no ${spec.hidden.hollow_patch}: the check grades a hollow patch generated from the golden patch instead (keep it: infradev task hollow ${task.id} > ${displayPath(join(task.taskDir, spec.hidden.hollow_patch))})`);

}

interface GoldenAnalysis {
  contract: CheckReport["contract"];
  leaks: CheckReport["leaks"];
  hollow: { patch: string; stubbed: string[] } | null;
  mutants: { mutants: Mutant[]; skipped: MutantSkips } | null;
}

/** Static analysis of golden vs base, over one pair of trees: interface contract, prompt leaks, collective timeouts, the generated hollow and the mutants. */
async function analyseGolden({ task, spec, opts, worldSizes, scratch, add, say }: CheckContext): Promise<GoldenAnalysis> {
  let contract: CheckReport["contract"] = [];
  let leaks: CheckReport["leaks"] = [];
  let generatedHollow: { patch: string; stubbed: string[] } | null = null;
  let generated: { mutants: Mutant[]; skipped: MutantSkips } | null = null;
  const base: AnalysisOptions = { python: opts.hostPython, workDir: scratch };
  try {
    await withTaskTrees(task, base, async (trees) => {
      const analysis = { ...base, trees };
      const symbols = await interfaceContract(task, analysis);
      contract = symbols.map((s) => ({ name: s.name, kind: s.kind, defined_at: s.definedAt, referenced_at: s.referencedAt, in_prompt: namedIn(task.prompt, s.name) }));
      for (const s of contract.filter((c) => !c.in_prompt)) {
        add("error", "contract", `${s.name} (${s.kind}, added by the golden patch at ${s.defined_at}) is referenced by ${s.referenced_at.slice(0, 3).join(", ")} but prompt.md never names it: add it to the interface contract, or test only what the prompt promises`);
      }
      leaks = (await promptLeaks(task, analysis)).map((l) => ({ file: l.file, line: l.line, lines: l.lines, prompt_line: l.promptLine, text: l.text }));
      for (const l of leaks) add("warning", "prompt", `prompt.md:${l.prompt_line} copies ${l.lines} line(s) of the golden patch verbatim (${l.file}:${l.line}: ${JSON.stringify(l.text.length > 70 ? `${l.text.slice(0, 67)}...` : l.text)}): the prompt should say what, not how`);
      const timeouts = await collectiveTimeouts(task, analysis);
      const known = timeouts.filter((t) => t.seconds !== null);
      const limit = known.length ? Math.min(...known.map((t) => t.seconds!)) : null;
      if (limit !== null && spec.timeout_sec >= limit) {
        const at = known.find((t) => t.seconds === limit)!;
        add("error", "traps", `timeout_sec (${spec.timeout_sec} s per test) is not below the collective timeout (${limit} s, ${at.file}:${at.line}${at.assumes ? `, assuming ${at.assumes}` : ""}): a hung rank makes the other ranks' collectives time out first, so one hang reads as failures of that test and of every later one; lower timeout_sec below ${limit} s or raise that timeout`);
      } else if (limit === null && Math.max(...worldSizes) > 1 && spec.timeout_sec >= DEFAULT_COLLECTIVE_TIMEOUT_S) {
        add("warning", "traps", `timeout_sec (${spec.timeout_sec} s) is not below torch's default collective timeout (NCCL: ${DEFAULT_COLLECTIVE_TIMEOUT_S} s): a hang may read as collective errors`);
      }
      try {
        generatedHollow = await generateHollow(task, analysis);
      } catch (e) {
        add("error", "hollow", `cannot generate a hollow patch from the golden patch: ${(e as Error).message}`);
      }
      if (opts.runMutants !== false) {
        say(`${task.id}: generating mutants of the golden patch`);
        generated = await generateMutants(task, { ...analysis, seed: opts.seed ?? 0 });
      }
    });
  } catch (e) {
    add("error", "analysis", `static analysis of the golden patch failed: ${(e as Error).message}`);
  }

  // Assigned inside the trees' callback: TypeScript does not see it, so the types are restated here.
  return { contract, leaks, hollow: generatedHollow as GoldenAnalysis["hollow"], mutants: generated as GoldenAnalysis["mutants"] };
}

interface GoldRuns {
  cal: Calibration;
  handle: Awaited<ReturnType<typeof calibrate>>;
  fingerprint: Awaited<ReturnType<typeof hardwareFingerprint>>;
  taskHash: string;
  goldProbes: Calibration["cases"];
  skippedProbes: string[];
}

/** Gold calibrated (3 runs at every graded world size): a probe gold skips or fails checks nothing. */
async function calibrateGold({ task, opts, worldSizes, add, say }: CheckContext): Promise<GoldRuns> {
  say(`${task.id}: calibrating gold (3 runs) at world size(s) ${worldSizes.join(", ")}`);
  const fingerprint = await hardwareFingerprint(task, opts.sandboxFactory);
  const taskHash = taskContentHash(task.taskDir);
  const handle = await calibrate({ task, cacheDir: opts.calibrationDir, sandboxFactory: opts.sandboxFactory, fingerprint, taskHash, worldSizes, onProgress: say });
  const cal = handle.calibration;
  const goldProbes = cal.cases.filter((c) => c.suite === "probe");
  const skippedProbes = goldProbes.filter((c) => c.outcomes.some((o) => o === "skipped")).map((c) => c.id);
  // A probe that declares the world sizes it applies to may skip itself elsewhere (world-size-skips.ts).
  let scanned: MarkerScan["probes"] = [];
  try {
    scanned = scanProbeMarkers(task, { python: opts.hostPython }).probes;
  } catch {
    // reported by the static half
  }
  for (const s of classifyGoldSkips(skippedProbes, scanned, task.fullSpec.ranks)) {
    if (s.applies) add("error", "gold", `probe ${s.id} is skipped for gold${s.declared ? ` at world size ${s.worldSize}, where it applies (world_sizes=[${s.declared.join(", ")}])` : ""}: a skipped probe checks nothing (Algorithm 2: gold with no skipped probe)`);
    else add("info", "gold", `probe ${s.id} skips itself at world size ${s.worldSize}: it applies at ${s.declared!.join(", ")} only`);
  }
  for (const c of cal.cases.filter((c) => c.outcomes.some((o) => o !== "passed" && o !== "skipped"))) {
    const why = c.suite === "probe" ? ": a probe gold fails cannot tell right from wrong" : c.suite === "pass_to_pass" ? ": a pass-to-pass case must pass (deselect it in pass_to_pass.deselect with a reason)" : "";
    add(c.suite === "official" ? "warning" : "error", "gold", `gold does not pass ${c.id} in every run (${c.outcomes.join(", ")})${why}`);
  }
  if (!goldProbes.length) add("error", "gold", "gold ran no probe case");
  // The wire verdict's bound is off where gold's own traffic exceeds it (wire-judge.ts): said, since
  // there only gold's residual still catches collectives run past the counters.
  for (const name of cal.wire_unexplained ?? []) {
    add("warning", "gold", `session ${name}: gold's own loopback traffic exceeds what its counted collectives can carry (tests that reach the process group from C++, e.g. DDP's reducer?): the wire verdict is off there — collectives run past the counters in that session go unseen`);
  }

  return { cal, handle, fingerprint, taskHash, goldProbes, skippedProbes };
}

type GradeExtra = { baseAsIs?: boolean; stopEarly?: boolean; failFast?: boolean; stopWhen?: StopRule };
type Grade = (name: string, patchFile: string | null, outDir: string, extra?: GradeExtra) => ReturnType<typeof gradeSubmission>;

/**
 * An adversarial patch's verdict is decided once every official session has run (Set A complete: it
 * must pass them all) and, in the probe sessions so far, a probe of each promise it declares it breaks
 * has failed where gold passes (in every calibration run): the probe sessions after are not needed.
 * Stateful (one per grade): asked once per session, in plan order.
 */
export function adversaryDecided(cal: Pick<Calibration, "cases">, breaks: readonly string[]): StopRule {
  const promiseOf = new Map(
    cal.cases.filter((c) => c.suite === "probe" && c.outcomes.length > 0 && c.outcomes.every((o) => o === "passed")).map((c) => [c.id, c.probe?.promise ?? null]),
  );
  const caught = new Set<string>();
  return (session, plan, rest) => {
    if (plan.name === "probe") {
      for (const c of session.cases) {
        const promise = promiseOf.get(c.id);
        if (promise && c.outcome !== "passed") caught.add(promise);
      }
    }
    return breaks.length > 0 && !rest.some((r) => r.name === "official") && breaks.every((b) => caught.has(b));
  };
}

/**
 * One submission graded against gold. Two grades of the same bytes share one artifact folder (it is
 * named by the patch's hash): they run one after the other (the second reuses the first's result),
 * never at once.
 */
function serialGrader({ task, opts, worldSizes, say }: CheckContext, { cal, fingerprint, taskHash }: GoldRuns): Grade {
  const inFlight = new Map<string, Promise<unknown>>();
  const grade: Grade = async (name: string, patchFile: string | null, outDir: string, extra = {}) => {
    const key = `${outDir}\0${extra.baseAsIs ? "base" : patchFile === null ? "missing" : sha256(readFileSync(patchFile))}`;
    while (inFlight.has(key)) await inFlight.get(key)!.catch(() => {});
    const run = gradeOnce(name, patchFile, outDir, extra);
    inFlight.set(key, run);
    try {
      return await run;
    } finally {
      inFlight.delete(key);
    }
  };
  const gradeOnce = async (name: string, patchFile: string | null, outDir: string, extra: GradeExtra) => {
    const out = await gradeSubmission({ task, patchFile, outDir, sandboxFactory: opts.sandboxFactory, calibration: cal, fingerprint, taskHash, worldSizes, onProgress: prefixed(say, `${name}: `), ...extra });
    return out;
  };

  return grade;
}

/** The controls: base and empty must fail, hollow must fail, every adversarial patch must pass Set A and fail a probe of a promise it breaks, every alternative must pass. */
async function gradeControls({ task, opts, scratch, add, say }: CheckContext, { cal }: GoldRuns, grade: Grade, hollow: GoldenAnalysis["hollow"]): Promise<SubmissionRow[]> {
  const emptyPatch = join(scratch, "empty.patch");
  writeFileSync(emptyPatch, "");
  const generatedHollowFile = join(scratch, "hollow.generated.patch");
  if (hollow) writeFileSync(generatedHollowFile, hollow.patch);
  type Planned = { kind: SubmissionRow["kind"]; name: string; patch: string | null; baseAsIs?: boolean; note?: string; breaks?: string[] };
  const planned: Planned[] = [
    { kind: "base", name: "base", patch: null, baseAsIs: true },
    { kind: "empty", name: "empty", patch: emptyPatch },
    ...(task.hidden.hollowPatch ? [{ kind: "hollow" as const, name: "hollow", patch: task.hidden.hollowPatch }] : []),
    ...(hollow ? [{ kind: "hollow-generated" as const, name: "hollow (generated)", patch: generatedHollowFile, note: `${hollow.stubbed.length} function(s) raise NotImplementedError` }] : []),
    ...task.hidden.adversarial.map((a) => ({ kind: "adversarial" as const, name: a.name, patch: a.patchPath, breaks: a.breaks, note: a.description })),
    ...task.hidden.alternatives.map((a) => ({ kind: "alternative" as const, name: a.name, patch: a.patchPath, note: a.note })),
  ];
  const jobs = opts.jobs ?? defaultJobs(task);
  const gradesDir = join(opts.outDir, "grades");
  // Each control is graded until its verdict is decided (unless --full-grades): the base and a lone
  // hollow only need "not resolved"; with both hollows the warning below compares their full scores.
  const lone = planned.filter((p) => p.kind === "hollow" || p.kind === "hollow-generated").length === 1;
  const stopRule = (p: Planned): GradeExtra => {
    if (opts.fullGrades) return {};
    // The base's pass-to-pass cases must all run (a base that fails them is a task error): its
    // official session is not cut at the first failure, only the sessions after it are skipped.
    if (p.kind === "base" && task.fullSpec.pass_to_pass) return { stopEarly: true, failFast: false };
    if (p.kind === "base" || (lone && (p.kind === "hollow" || p.kind === "hollow-generated"))) return { stopEarly: true };
    if (p.kind === "adversarial" && p.breaks?.length) return { stopWhen: adversaryDecided(cal, p.breaks) };
    return {};
  };
  const submissions = await pool(planned, jobs, async (p, i): Promise<SubmissionRow> => {
    say(`[${i + 1}/${planned.length}] ${p.kind} ${p.name}`);
    const { result } = await grade(`${p.kind} ${p.name}`, p.patch, gradesDir, { baseAsIs: p.baseAsIs, ...stopRule(p) });
    const failing = failingVsGold(result, cal);
    const row: SubmissionRow = { kind: p.kind, name: p.name, status: result.status, ...summary(result), failing_probes: [...failing.probes], failing_official: [...failing.official], ok: true, ...(p.note ? { note: p.note } : {}), ...(p.breaks ? { breaks: p.breaks } : {}), ...(result.partial ? { skipped_sessions: [...result.partial.skipped] } : {}) };
    const problems = acceptanceProblems(p.kind, result, failing, p.breaks);
    if (problems.length) Object.assign(row, { ok: false, why: problems.join("; ") });
    return row;
  });
  for (const s of submissions) if (!s.ok) add("error", s.kind === "hollow-generated" ? "hollow" : s.kind, `${s.kind} ${s.name}: ${s.why}`);
  const hand = submissions.find((s) => s.kind === "hollow");
  const genHollow = submissions.find((s) => s.kind === "hollow-generated");
  if (hand && genHollow && (hand.set_b.score ?? 0) > (genHollow.set_b.score ?? 0) + 0.25) {
    add("warning", "hollow", `the hand-written hollow scores ${hand.set_b.score?.toFixed(3)} in Set B, the generated one ${genHollow.set_b.score?.toFixed(3)}: the hand-written one may implement part of the change`);
  }

  return submissions;
}

/** Every mutant of the golden patch not marked equivalent (or a seeded sample), graded until its first failing session; the score is killed / (killed + survived). */
async function gradeMutants({ task, spec, opts, add, say }: CheckContext, { cal }: GoldRuns, grade: Grade, gen: NonNullable<GoldenAnalysis["mutants"]>): Promise<NonNullable<CheckReport["mutants"]>> {
  const threshold = opts.minMutationScore ?? DEFAULT_MIN_MUTATION_SCORE;
  {
    const all = gen.mutants;
    const equivalent = new Map(task.hidden.equivalentMutants.map((e) => [e.id, e.reason]));
    for (const id of equivalent.keys()) if (!all.some((m) => m.id === id)) add("warning", "mutants", `hidden/mutants.yaml: equivalent mutant "${id}" is not generated any more (stale: remove it)`);
    const candidates = all.filter((m) => !equivalent.has(m.id));
    const chosen = opts.mutants != null && opts.mutants < candidates.length ? seededSample(candidates, opts.mutants, opts.seed ?? 0) : candidates;
    const chosenIds = new Set(chosen.map((m) => m.id));
    const patchesDir = join(opts.outDir, "mutant-patches");
    mkdirSync(patchesDir, { recursive: true });
    const deadline = opts.timeLimitSec ? Date.now() + opts.timeLimitSec * 1000 : Infinity;
    let reused = 0;
    const mutantsDir = join(opts.outDir, "mutants");
    const graded = await pool(chosen, opts.jobs ?? defaultJobs(task), async (m, i): Promise<MutantRow> => {
      const row = { id: m.id, file: m.file, line: m.line, operator: m.operator, description: m.description, diff: m.change };
      if (Date.now() > deadline) return { ...row, verdict: "not_run", detail: "time limit" };
      const file = join(patchesDir, `${m.id.replace(/[^A-Za-z0-9._-]+/g, "_")}.patch`);
      writeFileSync(file, m.patch);
      say(`mutant ${i + 1}/${chosen.length} ${m.id}: ${m.description}`);
      let out: Awaited<ReturnType<typeof grade>>;
      try {
        out = await grade(`mutant ${m.id}`, file, mutantsDir, { stopEarly: true });
      } catch (e) {
        return { ...row, verdict: "error", detail: (e as Error).message };
      }
      if (out.reused) reused++;
      const r = out.result;
      if (r.status === "harness_fault") return { ...row, verdict: "error", detail: `harness fault: ${r.reason}` };
      // A mutant that does not apply, or reads as tampered, is not the correct program: killed, but said.
      if (r.status !== "graded") return { ...row, verdict: "killed_official", detail: `${r.status}: ${r.reason ?? ""}`.trim() };
      const failing = failingVsGold(r, cal);
      if (!r.official.resolved_strict) return { ...row, verdict: "killed_official", killed_by: failing.official.slice(0, 5) };
      if (!r.with_probes.resolved_strict) {
        const by = [...new Set(failing.probes.map((f) => f.promise ?? f.id))];
        return { ...row, verdict: "killed_probes", killed_by: by, detail: by.join(", ") };
      }
      return { ...row, verdict: "survived" };
    });
    const rows: MutantRow[] = [
      ...graded,
      ...all.filter((m) => equivalent.has(m.id)).map((m): MutantRow => ({ id: m.id, file: m.file, line: m.line, operator: m.operator, description: m.description, verdict: "equivalent", detail: equivalent.get(m.id)!, diff: m.change })),
      ...candidates.filter((m) => !chosenIds.has(m.id)).map((m): MutantRow => ({ id: m.id, file: m.file, line: m.line, operator: m.operator, description: m.description, verdict: "not_run", detail: "not in the sample (--mutants)", diff: m.change })),
    ];
    const n = (v: MutantVerdict) => rows.filter((r) => r.verdict === v).length;
    const killed = n("killed_official") + n("killed_probes");
    const denominator = killed + n("survived");
    const score = denominator ? killed / denominator : null;
    const mutants = {
      generated: all.length,
      graded: denominator,
      skipped: { ...gen.skipped },
      killed_official: n("killed_official"),
      killed_probes: n("killed_probes"),
      survived: n("survived"),
      equivalent: n("equivalent"),
      not_run: n("not_run"),
      errors: n("error"),
      score,
      threshold,
      reused,
      by_operator: scoresByOperator(rows),
      rows,
    };
    if (!all.length) add("error", "mutants", "no mutant could be generated from the golden patch (does it change Python code?)");
    else if (score === null) add("error", "mutants", "no mutant was graded");
    else if (score < threshold) add("error", "mutants", `mutation score ${score.toFixed(3)} < ${threshold} (${killed} killed of ${denominator}; ${n("survived")} survived): kill the survivors with a probe of a promise the prompt states, or mark them equivalent with a reason in ${spec.hidden.dir}/mutants.yaml`);
    if (n("error")) add("error", "mutants", `${n("error")} mutant(s) could not be graded: ${rows.filter((r) => r.verdict === "error").slice(0, 2).map((r) => `${r.id}: ${r.detail}`).join("; ")}`);
    const timeLimited = rows.filter((r) => r.verdict === "not_run" && r.detail === "time limit").length;
    if (timeLimited) add("warning", "mutants", `${timeLimited} mutant(s) not run: the time limit was reached (run again: graded mutants are reused)`);
    return mutants;
  }

}

/** Per promise: its probes, and the adversarial patches and mutants only its probes caught. */
function promiseCoverage({ add }: CheckContext, promises: ReturnType<typeof checkPromisesAndMarkers>["promises"], probesOf: (id: string) => string[], submissions: SubmissionRow[], mutants: CheckReport["mutants"]): CoverageRow[] {
  const coverage: CoverageRow[] = (promises ?? []).map((p) => ({
    id: p.id,
    text: p.text,
    prompt_line: p.promptLine,
    probes: probesOf(p.id),
    adversarial: submissions.filter((s) => s.kind === "adversarial" && s.failing_probes.some((f) => f.promise === p.id)).map((s) => s.name),
    mutants: (mutants?.rows ?? []).filter((r) => r.verdict === "killed_probes" && r.killed_by?.includes(p.id)).map((r) => r.id),
  }));
  for (const c of coverage) if (c.probes.length && !c.adversarial.length && !c.mutants.length && mutants) add("info", "promises", `promise "${c.id}": no adversarial patch or mutant is caught by its probes only (a regression guard, or a promise the mutants cannot reach)`);

  return coverage;
}

export type { Mutant };
