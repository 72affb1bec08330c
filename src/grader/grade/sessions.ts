import { officialSelection } from "./official-select.js";
import { createHash } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MergedCase } from "../../runner/merge.js";
import { runRanks, type LaunchSummary, type RankAttachment, type WireCheck } from "../../runner/ranks.js";
import type { Sandbox } from "../../sandbox/types.js";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import type { TaskSpec } from "../../task/public/schema.js";
import { readJsonFile, writeJsonAtomic } from "../../lib/json.js";
import { exceptionType } from "./labels.js";
import type { CaseRecord, CollectionError, PartialRun, SessionResult, Suite } from "./types.js";
import { installedCaseId, mapCaseId, unmapText, type Canary, type InstallMap } from "../workspace/test-renaming.js";
import { capEvidence, tamperEvidence } from "./tamper.js";
import { wireEvidence } from "./wire-judge.js";
import type { PytestPin } from "../workspace/harness-files.js";
import { PROBES_DIR, pytestPinFor, stagedHashesNow, type StagedTests } from "../workspace/workspace.js";
import type { Progress } from "../../lib/progress.js";

/**
 * The pytest sessions of one grading run, and running them with a file per finished session so
 * that a killed run resumes where it stopped.
 *
 * Per world size and mode, the official tests and the probes run in SEPARATE launcher sessions (the
 * probes' modules lie beside the official ones in the same folder, under random names), every
 * official session before any probe session, and every session starts from the same state: fresh processes, a fresh sandbox (the factory is called
 * once per session and the sandbox closed after it: on docker a new container, on local a new /tmp and
 * $HOME), and the grading workspace written back to its post-install state (fresh-state.ts). So code
 * under test cannot tell a probe from an official test by the order it is called in or by what an
 * earlier test left behind (a call counter, a marker file in /tmp, $HOME, /dev/shm or the workspace).
 * Which suite a case belongs to is decided by the install map, never by a path. Canaries run in every
 * session (beside the official tests and in the probe folder) and are never scored; with the staged
 * files' hashes and the ranks' independent records they make the session's tamper verdict.
 */

/**
 * 2: real ids mapped back from the random install, canaries, tamper evidence, lost records.
 * 3: official tests and probes always in separate sessions, each from the same fresh state.
 * 4: a session per world size (`ranks` in the key; `ws<N>/` ids and `<mode>.ws<N>.<name>` files when not just `[ranks]`).
 * 5: the probes beside the official tests (same folder and depth), their conftest loaded as a plugin.
 * 6: golden-differential cases judged on the host against golden's records from its own session.
 * 7: the wire verdict (wire-judge.ts: the bound and gold's residual) is tamper evidence (RunSessionsOptions.wireJudge).
 */
export const SESSION_FORMAT = 7;

/**
 * The world sizes a grade runs every suite at, ascending: `override` alone (`grade --ranks N`), else
 * the task's `world_sizes`, else its `ranks`.
 */
export function gradedWorldSizes(spec: Pick<TaskSpec, "ranks" | "world_sizes">, override?: number): number[] {
  if (override !== undefined) return [override];
  return [...(spec.world_sizes ?? [spec.ranks])].sort((a, b) => a - b);
}

/**
 * `""` for the task's own world sizes, else `-ws<N>[-<N>…]`: what keeps a calibration or a result at
 * other world sizes (`--ranks N`) apart from the default one (the task's own are in its content hash).
 */
export function worldSizesTag(spec: Pick<TaskSpec, "ranks" | "world_sizes">, worldSizes: readonly number[]): string {
  const ws = [...worldSizes].sort((a, b) => a - b);
  return ws.join(",") === gradedWorldSizes(spec).join(",") ? "" : `-ws${ws.join("-")}`;
}

/** Whether ids and file names must carry the world size: anything but exactly the task's `ranks`. */
export function namesCarryWorldSize(spec: Pick<TaskSpec, "ranks">, worldSizes: readonly number[]): boolean {
  return !(worldSizes.length === 1 && worldSizes[0] === spec.ranks);
}

/**
 * Asked after each session (run or reused, in plan order) with the plans not run yet: true skips them
 * all (an early stop: the result carries `partial`).
 */
export type StopRule = (session: SessionResult, plan: SessionPlan, rest: readonly SessionPlan[]) => boolean;

export interface SessionPlan {
  mode: string;
  /** The world size this session runs at. */
  ranks: number;
  /** "official" (the post-PR tests) or "probe" (the hidden probes). */
  name: "official" | "probe";
  pytestArgs: string[];
  /** The same arguments with this run's random names replaced by stable ones (for the session key). */
  keyArgs: string[];
  /** The test paths among them, with stable names (progress lines; never an option's value such as -c's file). */
  testPaths: string[];
  env: Record<string, string>;
  /**
   * Prefix of case ids: `<mode>/` when the task has more than one mode, then `ws<N>/` when the graded
   * world sizes are not exactly `[ranks]` (namesCarryWorldSize).
   */
  idPrefix: string;
  /** `<mode>.<name>`, or `<mode>.ws<N>.<name>` when ids carry the world size: the session file and log folder. */
  fileName: string;
  /** The canaries this session runs (installed under its paths). */
  canaries: Canary[];
  /** pytest plugins loaded from a file of the workspace (the probes' conftest, probe sessions only). */
  pluginFiles: string[];
}

/** Where the install put things, as planning needs it (StagedTests has more). */
export type SessionLayout = Pick<StagedTests, "officialDirs" | "probeFiles" | "probeOnly" | "probePlugin" | "canaries"> & { map?: StagedTests["map"] };

/**
 * Per world size × mode an official session (when there are official tests) and a probe session.
 * Every official session comes first (world sizes ascending, then modes), then every probe session
 * in the same order: a grade that stops early (grade.ts) can stop before any probe ran, and the order
 * says nothing to the code under test (each session starts from the same fresh state anyway).
 * `pin`: the arguments that pin pytest's config to the base's (test-config.ts); read from the
 * repo root when not given — after the restore of the submission's pytest-affecting files.
 * `worldSizes`: default gradedWorldSizes(task's spec).
 */
export function planSessions(task: GraderTask, repoDir: string, layout: SessionLayout, opts: { pin?: PytestPin; worldSizes?: readonly number[] } = {}): SessionPlan[] {
  const spec = task.fullSpec;
  const official = layout.officialDirs;
  const modes = Object.keys(spec.modes);
  const common = ["--continue-on-collection-errors", ...(opts.pin ?? pytestPinFor(repoDir)).args];
  // Installed (random) module and case names, which official_tests puts in the arguments, read back
  // as real ones: the session key must not change from one install to the next.
  const stable = (args: string[]) => args.map((a) => (layout.map ? unmapText(layout.map, a) : a));
  const only = (loc: string) => layout.canaries.filter((c) => c.location === loc);
  const worldSizes = [...(opts.worldSizes ?? gradedWorldSizes(spec))].sort((a, b) => a - b);
  const carry = namesCarryWorldSize(spec, worldSizes);
  const plan = (mode: string, ranks: number, name: SessionPlan["name"], paths: string[], options: string[], canaries: Canary[], pluginFiles: string[] = []): SessionPlan => ({
    mode,
    ranks,
    name,
    pytestArgs: [...paths, ...options, ...common],
    // Sorted where the order comes from this install's random names (the probe modules, the files the
    // official sessions leave out): the same task gives the same key from one install to the next.
    keyArgs: [...stable(paths).sort(), ...stable(options).sort(), ...common],
    testPaths: stable(paths).sort(),
    env: { ...spec.env.vars, ...spec.modes[mode] },
    idPrefix: `${modes.length > 1 ? `${mode}/` : ""}${carry ? `ws${ranks}/` : ""}`,
    fileName: carry ? `${mode}.ws${ranks}.${name}` : `${mode}.${name}`,
    canaries,
    pluginFiles,
  });
  const each = (make: (mode: string, ranks: number) => SessionPlan[]) => worldSizes.flatMap((ranks) => modes.flatMap((mode) => make(mode, ranks)));
  return [
    ...each((mode, ranks) => {
      if (!official.length) return [];
      // task.yaml official_tests: the selected modules and the left-out cases, in installed names.
      const sel = spec.official_tests ? officialSelection(spec, layout.map ?? { files: {}, markers: {} }) : null;
      const paths = sel && sel.paths.length ? sel.paths : official;
      // Collecting whole test dirs: the probes' files beside the official tests are left out one by one.
      const ignore = sel && sel.paths.length ? [] : layout.probeOnly.map((f) => `--ignore=${f}`);
      return [plan(mode, ranks, "official", paths, [...ignore, ...(sel?.options ?? [])], only("official").filter((c) => !sel || sel.canaries(c)))];
    }),
    ...each((mode, ranks) => [plan(mode, ranks, "probe", layout.probeFiles, [], only("probe"), layout.probePlugin ? [layout.probePlugin] : [])]),
  ];
}

export function sessionFileName(plan: SessionPlan): string {
  return plan.fileName;
}

/** The suite of a real case id (probes' real ids start with infradev_probes/). */
export function suiteOf(nodeid: string): Suite {
  return nodeid.startsWith(`${PROBES_DIR}/`) ? "probe" : "official";
}

/**
 * What identifies a session's result: a file written under another key is run again, never reused.
 * `failFast`: the real ids the session stops at (RunSessionsOptions.failFast): a session cut short
 * answers only another one cut at the same cases.
 */
export function sessionKey(taskHash: string, task: GraderTask, plan: SessionPlan, failFast: readonly string[] = []): string {
  const spec = task.fullSpec;
  const what = {
    SESSION_FORMAT,
    taskHash,
    plan: { mode: plan.mode, name: plan.name, args: plan.keyArgs, env: plan.env, idPrefix: plan.idPrefix },
    ranks: plan.ranks,
    timeout_sec: spec.timeout_sec,
    run_timeout_sec: spec.run_timeout_sec,
    ...(failFast.length ? { fail_fast: createHash("sha256").update([...failFast].sort().join("\n")).digest("hex") } : {}),
  };
  return createHash("sha256").update(JSON.stringify(what)).digest("hex").slice(0, 24);
}

function firstLine(s: string): string {
  const line = s.split("\n").find((l) => l.trim()) ?? "";
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}

/**
 * A merged case, slimmed to what scoring needs. `real`: the case's real id and suite from the install
 * map (default: the id as it is); `say`: maps installed names in messages back to real ones.
 */
export function caseRecord(c: MergedCase, idPrefix: string, launchStatus?: string | null, real?: { id: string; suite: Suite; probe?: MergedCase["probe"] }, say: (s: string) => string = (x) => x): CaseRecord {
  const failing = c.ranks.find((r) => r.outcome === "error" || r.outcome === "failed") ?? c.ranks.find((r) => r.outcome === "missing");
  const errorType = failing ? exceptionType(failing.message, failing.excerpt) : undefined;
  // The session ran out of time: the test it was on, and those it never reached, did not finish.
  const outOfTime =
    launchStatus === "run_timeout" && c.outcome !== "passed" && c.outcome !== "skipped" && (c.reason === "missing" || c.ranks.some((r) => r.message.startsWith("run_timeout")));
  const reason = outOfTime ? "run_timeout" : c.reason;
  // Ranks the launcher killed in this case: their record's excerpt holds the stacks it dumped first.
  const killed = c.ranks.filter((r) => r.killed && r.excerpt);
  const id = real?.id ?? c.id;
  const probe = real ? real.probe : c.probe;
  return {
    id: `${idPrefix}${id}`,
    suite: real?.suite ?? suiteOf(id),
    outcome: c.outcome,
    ...(reason ? { reason } : {}),
    ...(probe ? { probe } : {}),
    ...(errorType ? { error_type: errorType } : {}),
    ...(failing && c.outcome !== "passed" && c.outcome !== "skipped" ? { message: say(firstLine(failing.message || failing.excerpt)) } : {}),
    ...(killed.length ? { stacks: killed.map((r) => ({ rank: r.rank, text: say(r.excerpt) })) } : {}),
    time_s: c.timeSec,
  };
}

export function collectionErrors(launch: LaunchSummary | null, idPrefix: string, say: (s: string) => string = (x) => x): CollectionError[] {
  const raw = (launch?.collection_errors ?? []) as Array<{ file?: string; nodeid?: string; message?: string }>;
  return raw.map((e) => {
    const message = say(e.message ?? "");
    const type = exceptionType("", message);
    return { path: `${idPrefix}${say(e.file ?? e.nodeid ?? "")}`, ...(type ? { error_type: type } : {}), message: firstLine(message) };
  });
}

/**
 * What one session's ranks reported, in real ids: scored cases, canaries apart, strangers counted.
 * `passToPass`: the real modules of task.yaml's pass_to_pass; an official case of one of them is of
 * that suite (they share the official sessions; the install map knows only official and probe).
 */
export function mapSession(map: InstallMap, cases: readonly MergedCase[], idPrefix: string, launchStatus: string | null | undefined, say: (s: string) => string, passToPass: ReadonlySet<string> = new Set()): CaseRecord[] {
  const out: CaseRecord[] = [];
  for (const c of cases) {
    const real = mapCaseId(map, c.id);
    // Canaries are never scored; ids that were never installed are tamper evidence (tamper.ts).
    if (!real || real.suite === "canary") continue;
    const suite: Suite = real.suite === "official" && passToPass.has(real.id.split("::")[0]!) ? "pass_to_pass" : real.suite;
    out.push(caseRecord(c, idPrefix, launchStatus, { id: real.id, suite, ...(real.probe ? { probe: real.probe } : {}) }, say));
  }
  return out;
}

export interface RunSessionsOptions {
  /**
   * A fresh sandbox for one session (called once per session that runs, right after
   * `resetWorkspace`; the sandbox is closed when the session ends).
   */
  openSandbox: () => Promise<Sandbox>;
  /** Puts the workspace back to its post-install state; called before every session that runs. */
  resetWorkspace?: () => void | Promise<void>;
  task: GraderTask;
  taskHash: string;
  plans: SessionPlan[];
  /** Host folder for `<mode>.<name>.json` (one per finished session). */
  resultsDir: string;
  /** Host folder for the launcher's files of each session (`<mode>.<name>/`). */
  logsDir: string;
  /** The install: map back to real ids, canaries, staged files to hash after each session. */
  staged: StagedTests;
  onProgress?: Progress;
  signal?: AbortSignal;
  /**
   * Asked after each session (run or reused, without a harness fault): true skips every session
   * after it (grade.ts's early stop for the check's mutants).
   */
  stopWhen?: StopRule;
  /**
   * Task check's mutants only (grade.ts stopEarly): the real ids (without the plan's idPrefix) at
   * whose first failure, error or skip the session stops (runRanks stopOnFail, canaries never among
   * them). A session cut short keeps the cases that ran; those it never reached are not run.
   */
  failFast?: (plan: SessionPlan) => string[];
  /**
   * Asked after each probe session that ran cleanly (not one reused from an earlier run): the
   * session's cases with the verdicts only the host can give — the golden-differential rules
   * (differential-judge.ts), from the records the ranks attached. The session file keeps its answer.
   */
  judge?: (ctx: JudgeContext) => Promise<CaseRecord[]>;
  /**
   * The wire verdict's evidence lines for a session (wire-judge.ts): grade passes one built from gold's
   * calibration, calibration one that returns none (gold is never tampered). Absent: the bound alone.
   */
  wireJudge?: (plan: SessionPlan, wire: WireCheck | undefined) => string[];
}


/**
 * Makes the grader's sandbox over a fresh workspace (the CLI passes one built on createSandbox).
 * `readOnlyOverlays`: host folders (the staged tests) to bind read-only at `<repo>/<rel>` (Contract C).
 */
export type SandboxFactory = (args: { task: GraderTask; hostRepoDir: string; readOnlyOverlays?: Array<{ host: string; rel: string }> }) => Promise<Sandbox>;

/** What a session judge (RunSessionsOptions.judge) gets. */
export interface JudgeContext {
  plan: SessionPlan;
  /** The session's scored cases as the ranks reported them. */
  cases: CaseRecord[];
  attachments: RankAttachment[];
  attachmentsDropped: number;
  /**
   * The same session's workspace and sandbox set-up once more (fresh state, fresh sandbox) with
   * other pytest arguments and extra environment; its attachments, or why there are none.
   */
  rerun: (pytestArgs: string[], env: Record<string, string>) => Promise<{ attachments: RankAttachment[]; problem?: string }>;
}

export interface SessionsOutcome {
  sessions: SessionResult[];
  /** The first harness fault, if any session had one (later sessions are not run). */
  harnessError?: string;
  /** Sessions read back from an earlier (killed) run instead of being run again. */
  reused: string[];
  /** Tamper evidence over every session (empty: none). */
  tamperEvidence: string[];
  /** `<session>: why` for each session whose records were lost (the launcher killed, no bundle). */
  lostRecords: string[];
  /** Set when stopWhen stopped the run: the sessions after it did not run. */
  partial?: PartialRun;
}

/** The grader's own signal stopped the run: there is no result to record. */
export class GradingInterrupted extends Error {
  constructor(message = "grading interrupted") {
    super(message);
    this.name = "GradingInterrupted";
  }
}

/** Reads a finished session's file, or null when it is absent, from another plan, or a harness fault. */
export function readFinishedSession(file: string, key: string): SessionResult | null {
  const s = readJsonFile<SessionResult>(file);
  return s && s.key === key && !s.harness_error ? s : null;
}

/** Writes a session's logs (Contract A's `logs`, from the bundle) as regular files with plain names. */
function saveLogs(dir: string, logs: ReadonlyArray<{ name: string; text: string }>): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const log of logs) writeFileSync(join(dir, log.name.replace(/[^A-Za-z0-9._-]/g, "_").replace(/^\.+/, "_") || "log"), log.text);
}

export async function runSessions(opts: RunSessionsOptions): Promise<SessionsOutcome> {
  const { task, plans, staged } = opts;
  const spec = task.fullSpec;
  mkdirSync(opts.resultsDir, { recursive: true });
  const sessions: SessionResult[] = [];
  const reused: string[] = [];
  const extra: Array<[string, string]> = [];
  const say = (text: string) => unmapText(staged.map, text, extra);
  const evidence = () => sessions.flatMap((s) => s.tamper_evidence ?? []);
  const lost = () => sessions.filter((s) => s.lost_records).map((s) => `${s.file}: ${s.lost_records}`);
  const stop = (plan: SessionPlan, i: number): PartialRun | undefined => {
    const rest = plans.slice(i + 1);
    // A session the launcher cut short (fail fast) is itself partly skipped: the cases it never
    // reached did not run.
    const cut = sessions.at(-1)!.launch_status === "fail_fast";
    if (!cut && (!rest.length || !opts.stopWhen?.(sessions.at(-1)!, plan, rest))) return undefined;
    const skipped = cut ? [plan, ...rest] : rest;
    return { stopped_after: plan.fileName, skipped: rest.map((p) => p.fileName), stopped_suite: plan.name, skipped_sessions: skipped.map((p) => ({ idPrefix: p.idPrefix, suite: p.name })) };
  };
  for (const [i, plan] of plans.entries()) {
    const name = sessionFileName(plan);
    const file = join(opts.resultsDir, `${name}.json`);
    const failFast = opts.failFast?.(plan) ?? [];
    const key = sessionKey(opts.taskHash, task, plan, failFast);
    const done = readFinishedSession(file, key);
    if (done) {
      opts.onProgress?.(`${name}: finished in an earlier run, reusing ${file}`);
      sessions.push(done);
      reused.push(name);
      const partial = stop(plan, i);
      if (partial) return stopped(partial);
      continue;
    }
    opts.onProgress?.(`${name}: running ${plan.testPaths.join(" + ")} (+ ${plan.canaries.length} canaries) on ${plan.ranks} rank(s)`);
    // The launcher's folder in the workspace (the code under test sees it): the same name for the
    // official and the probe session of a mode, so it says nothing about which one is running.
    const outDir = `.infradev/grade/${plan.mode}`;
    // The same start for every session: the workspace as installed, a sandbox nothing ran in yet.
    await opts.resetWorkspace?.();
    let sandbox: Sandbox;
    try {
      sandbox = await opts.openSandbox();
    } catch (e) {
      return { sessions, harnessError: `${name}: sandbox could not start: ${(e as Error).message}`, reused, tamperEvidence: evidence(), lostRecords: lost() };
    }
    let r: Awaited<ReturnType<typeof runRanks>>;
    const started = Date.now();
    try {
      r = await runRanks(sandbox, {
        ranks: plan.ranks,
        pytestArgs: plan.pytestArgs,
        // A plugin from a file: the rank boot loads it before pytest starts (infradev_rank_boot.py).
        ...(plan.pluginFiles.length ? { plugins: plan.pluginFiles.map((f) => `path:${f}`) } : {}),
        outDir,
        perTestTimeoutSec: spec.timeout_sec,
        runTimeoutSec: spec.run_timeout_sec,
        env: plan.env,
        signal: opts.signal,
        ...(failFast.length ? { stopOnFail: failFast.map((id) => installedCaseId(staged.map, id)).filter((id): id is string => id !== null) } : {}),
        onProgress: (d, t) => opts.onProgress?.(`${name}: ${d}/${t} tests`, "tick"),
      });
    } finally {
      await sandbox.close();
    }
    if (opts.signal?.aborted) throw new GradingInterrupted(`${name}: grading interrupted`);
    const hashesAfter = stagedHashesNow(staged);
    saveLogs(join(opts.logsDir, name), r.logs);
    // A launcher stopped from inside the sandbox (killed, its records cut or missing) is the
    // submission's doing until a control run says otherwise (grade.ts); a backend failure is not.
    const lostRecords = r.harnessError ? undefined : (r.lostRecords ?? (r.launch?.status === "interrupted" ? `launcher interrupted: ${r.launch?.events.at(-1)?.detail ?? "signal"}` : undefined));
    const harnessError = r.harnessError;
    const tamper =
      harnessError || lostRecords
        ? hashEvidenceOnly(staged, hashesAfter, name)
        : tamperEvidence({ session: name, ranks: plan.ranks, cases: r.cases, integrity: r.integrity, events: r.launch?.events, map: staged.map, canaries: plan.canaries, hashesBefore: staged.hashes, hashesAfter, extra, collectionErrors: collectionErrorIds(r.launch) });
    // One wire record per launcher session (rank 0's; a restart after a hang or crash is a new one, with
    // its own counters): each is judged, so a hang cannot leave the traffic after it unjudged.
    const wires = !lostRecords && !harnessError ? r.integrity.flatMap((i) => (i.wire ? [i.wire] : [])) : [];
    const wire = wires[0];
    for (const w of wires) tamper.push(...(opts.wireJudge ? opts.wireJudge(plan, w) : wireEvidence(name, w)));
    const canaryCases = r.cases.filter((c) => mapCaseId(staged.map, c.id)?.suite === "canary");
    // Cut short (fail fast): a case no rank ran (missing, or stopped by the launcher on every rank) did not run.
    const ran = r.launch?.status === "fail_fast" ? r.cases.filter((c) => c.ranks.some((x) => x.outcome !== "missing" && !x.killed)) : r.cases;
    let cases = lostRecords ? [] : mapSession(staged.map, ran, plan.idPrefix, r.launch?.status, say, new Set(spec.pass_to_pass?.paths ?? []));
    if (opts.judge && plan.name === "probe" && !lostRecords && !harnessError) {
      cases = await opts.judge({ plan, cases, attachments: r.attachments, attachmentsDropped: r.attachmentsDropped ?? 0, rerun: (args, env) => rerun(plan, args, env) });
    }
    const result: SessionResult = {
      key,
      mode: plan.mode,
      session: plan.name,
      ranks: plan.ranks,
      file: name,
      cases,
      collection_errors: lostRecords ? [] : collectionErrors(r.launch, plan.idPrefix, say),
      launch_status: r.launch?.status ?? null,
      canaries: plan.canaries.map((c) => ({ id: c.real, expected: c.expected, ranks: canaryCases.find((m) => m.id === c.installed)?.ranks.map((rc) => rc.outcome) ?? [] })),
      tamper_evidence: capEvidence(tamper),
      audit: r.integrity.map((i) => (i.audit ? { rank: i.rank, session: i.session, armed: i.audit.armed, done: i.audit.done, refused_count: i.audit.refused_count, observed: i.audit.observed ?? {} } : null)),
      ...(wire ? { wire } : {}),
      ...(wires.length > 1 ? { wires } : {}),
      ...(lostRecords ? { lost_records: lostRecords } : {}),
      ...(harnessError ? { harness_error: harnessError } : {}),
      duration_s: (Date.now() - started) / 1000,
    };
    writeJsonAtomic(file, result);
    sessions.push(result);
    if (harnessError) return { sessions, harnessError: `${name}: ${harnessError}`, reused, tamperEvidence: evidence(), lostRecords: lost() };
    opts.onProgress?.(`${name}: ${summarize(result)} in ${result.duration_s.toFixed(1)} s${tamper.length ? ` — TAMPER EVIDENCE: ${tamper.length} line(s)` : ""}${lostRecords ? ` — records lost: ${lostRecords}` : ""}`);
    const partial = stop(plan, i);
    if (partial) return stopped(partial);
  }
  return { sessions, reused, tamperEvidence: evidence(), lostRecords: lost() };

  async function rerun(plan: SessionPlan, pytestArgs: string[], env: Record<string, string>): Promise<{ attachments: RankAttachment[]; problem?: string }> {
    await opts.resetWorkspace?.();
    let sandbox: Sandbox;
    try {
      sandbox = await opts.openSandbox();
    } catch (e) {
      return { attachments: [], problem: `sandbox could not start: ${(e as Error).message}` };
    }
    try {
      const r = await runRanks(sandbox, {
        ranks: plan.ranks,
        pytestArgs,
        ...(plan.pluginFiles.length ? { plugins: plan.pluginFiles.map((f) => `path:${f}`) } : {}),
        outDir: `.infradev/grade/${plan.mode}`,
        perTestTimeoutSec: spec.timeout_sec,
        runTimeoutSec: spec.run_timeout_sec,
        env: { ...plan.env, ...env },
        signal: opts.signal,
      });
      if (opts.signal?.aborted) throw new GradingInterrupted(`${plan.fileName}: grading interrupted`);
      const problem = r.harnessError ?? r.lostRecords;
      return { attachments: r.attachments, ...(problem ? { problem } : {}) };
    } finally {
      await sandbox.close();
    }
  }

  function stopped(partial: PartialRun): SessionsOutcome {
    opts.onProgress?.(`stopping early after ${partial.stopped_after}: skipping ${partial.skipped.join(", ")}`);
    return { sessions, reused, tamperEvidence: evidence(), lostRecords: lost(), partial };
  }
}

/** The ids the launcher reported collection errors under (installed names). */
function collectionErrorIds(launch: LaunchSummary | null): string[] {
  const raw = (launch?.collection_errors ?? []) as Array<{ file?: string; nodeid?: string }>;
  return raw.flatMap((e) => [e.nodeid, e.file].filter((x): x is string => typeof x === "string" && x.length > 0));
}

/** Without records to check, the staged files' hashes still are. */
function hashEvidenceOnly(staged: StagedTests, after: Record<string, string>, name: string): string[] {
  return tamperEvidence({ session: name, ranks: 0, cases: [], map: staged.map, canaries: [], hashesBefore: staged.hashes, hashesAfter: after });
}

export function summarize(s: SessionResult): string {
  const n = (o: string) => s.cases.filter((c) => c.outcome === o).length;
  return `${n("passed")} passed, ${n("failed")} failed, ${n("error")} errors, ${n("skipped")} skipped${s.collection_errors.length ? `, ${s.collection_errors.length} collection errors` : ""}`;
}
