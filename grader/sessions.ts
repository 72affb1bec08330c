import { createHash } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { MergedCase } from "../sandbox/merge.js";
import { runRanks, type LaunchSummary } from "../sandbox/ranks.js";
import type { Sandbox } from "../sandbox/types.js";
import type { GraderTask } from "../tasks/loader.js";
import { readJsonFile, writeJsonAtomic } from "./files.js";
import { exceptionType } from "./labels.js";
import type { CaseRecord, CollectionError, SessionResult, Suite } from "./types.js";
import { mapCaseId, unmapText, type Canary, type InstallMap } from "./install.js";
import { capEvidence, tamperEvidence } from "./tamper.js";
import type { PytestPin } from "./test-config.js";
import { PROBES_DIR, pytestPinFor, stagedHashesNow, type StagedTests } from "./workspace.js";

/**
 * The pytest sessions of one grading run, and running them with a file per finished session so
 * that a killed run resumes where it stopped.
 *
 * Per mode, the official tests and the probes run in SEPARATE launcher sessions, official first, and
 * every session starts from the same state: fresh processes, a fresh sandbox (the factory is called
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
 */
export const SESSION_FORMAT = 3;

export interface SessionPlan {
  mode: string;
  /** "official" (the post-PR tests) or "probe" (the hidden probes). */
  name: "official" | "probe";
  pytestArgs: string[];
  /** The same arguments with this run's random names replaced by stable ones (for the session key). */
  keyArgs: string[];
  /** The test paths among them, with stable names (progress lines; never an option's value such as -c's file). */
  testPaths: string[];
  env: Record<string, string>;
  /** Prefix of case ids: `<mode>/` when the task has more than one mode. */
  idPrefix: string;
  /** The canaries this session runs (installed under its paths). */
  canaries: Canary[];
}

/** Where the install put things, as planning needs it (StagedTests has more). */
export type SessionLayout = Pick<StagedTests, "officialDirs" | "probeDir" | "canaries">;

/**
 * Per mode: the official session (when there are official tests), then the probe session.
 * `pin`: the arguments that pin pytest's config to the base's (test-config.ts); read from the
 * repo root when not given — after the restore of the submission's pytest-affecting files.
 */
export function planSessions(task: GraderTask, repoDir: string, layout: SessionLayout, opts: { pin?: PytestPin } = {}): SessionPlan[] {
  const spec = task.fullSpec;
  const official = layout.officialDirs;
  const probes = layout.probeDir;
  const modes = Object.keys(spec.modes);
  const common = ["--continue-on-collection-errors", ...(opts.pin ?? pytestPinFor(repoDir)).args];
  const stable = (args: string[]) => args.map((a) => a.split(probes).join(PROBES_DIR));
  const only = (loc: string) => layout.canaries.filter((c) => c.location === loc);
  return modes.flatMap((mode): SessionPlan[] => {
    const env = { ...spec.env.vars, ...spec.modes[mode] };
    const idPrefix = modes.length > 1 ? `${mode}/` : "";
    const plan = (name: SessionPlan["name"], paths: string[], options: string[], canaries: Canary[]): SessionPlan => ({
      mode,
      name,
      pytestArgs: [...paths, ...options, ...common],
      keyArgs: stable([...paths, ...options, ...common]),
      testPaths: stable(paths),
      env,
      idPrefix,
      canaries,
    });
    return [...(official.length ? [plan("official", official, [`--ignore=${probes}`], only("official"))] : []), plan("probe", [probes], [], only("probe"))];
  });
}

export function sessionFileName(plan: SessionPlan): string {
  return `${plan.mode}.${plan.name}`;
}

/** The suite of a real case id (probes' real ids start with infradev_probes/). */
export function suiteOf(nodeid: string): Suite {
  return nodeid.startsWith(`${PROBES_DIR}/`) ? "probe" : "official";
}

/** What identifies a session's result: a file written under another key is run again, never reused. */
export function sessionKey(taskHash: string, task: GraderTask, plan: SessionPlan): string {
  const spec = task.fullSpec;
  const what = { SESSION_FORMAT, taskHash, plan: { mode: plan.mode, name: plan.name, args: plan.keyArgs, env: plan.env, idPrefix: plan.idPrefix }, ranks: spec.ranks, timeout_sec: spec.timeout_sec, run_timeout_sec: spec.run_timeout_sec };
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

/** What one session's ranks reported, in real ids: scored cases, canaries apart, strangers counted. */
export function mapSession(map: InstallMap, cases: readonly MergedCase[], idPrefix: string, launchStatus: string | null | undefined, say: (s: string) => string): CaseRecord[] {
  const out: CaseRecord[] = [];
  for (const c of cases) {
    const real = mapCaseId(map, c.id);
    // Canaries are never scored; ids that were never installed are tamper evidence (tamper.ts).
    if (!real || real.suite === "canary") continue;
    out.push(caseRecord(c, idPrefix, launchStatus, { id: real.id, suite: real.suite, ...(real.probe ? { probe: real.probe } : {}) }, say));
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
  onProgress?: (msg: string) => void;
  signal?: AbortSignal;
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
  const extra: Array<[string, string]> = [[staged.probeDir, PROBES_DIR]];
  const say = (text: string) => unmapText(staged.map, text, extra);
  const evidence = () => sessions.flatMap((s) => s.tamper_evidence ?? []);
  const lost = () => sessions.filter((s) => s.lost_records).map((s) => `${s.mode}.${s.session}: ${s.lost_records}`);
  for (const plan of plans) {
    const name = sessionFileName(plan);
    const file = join(opts.resultsDir, `${name}.json`);
    const key = sessionKey(opts.taskHash, task, plan);
    const done = readFinishedSession(file, key);
    if (done) {
      opts.onProgress?.(`${name}: finished in an earlier run, reusing ${file}`);
      sessions.push(done);
      reused.push(name);
      continue;
    }
    opts.onProgress?.(`${name}: running ${plan.testPaths.join(" + ")} (+ ${plan.canaries.length} canaries) on ${spec.ranks} rank(s)`);
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
        ranks: spec.ranks,
        pytestArgs: plan.pytestArgs,
        outDir,
        perTestTimeoutSec: spec.timeout_sec,
        runTimeoutSec: spec.run_timeout_sec,
        env: plan.env,
        signal: opts.signal,
        onProgress: (d, t) => opts.onProgress?.(`${name}: ${d}/${t} tests`),
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
        : tamperEvidence({ session: name, ranks: spec.ranks, cases: r.cases, integrity: r.integrity, events: r.launch?.events, map: staged.map, canaries: plan.canaries, hashesBefore: staged.hashes, hashesAfter, extra, collectionErrors: collectionErrorIds(r.launch) });
    const canaryCases = r.cases.filter((c) => mapCaseId(staged.map, c.id)?.suite === "canary");
    const result: SessionResult = {
      key,
      mode: plan.mode,
      session: plan.name,
      cases: lostRecords ? [] : mapSession(staged.map, r.cases, plan.idPrefix, r.launch?.status, say),
      collection_errors: lostRecords ? [] : collectionErrors(r.launch, plan.idPrefix, say),
      launch_status: r.launch?.status ?? null,
      canaries: plan.canaries.map((c) => ({ id: c.real, expected: c.expected, ranks: canaryCases.find((m) => m.id === c.installed)?.ranks.map((rc) => rc.outcome) ?? [] })),
      tamper_evidence: capEvidence(tamper),
      ...(lostRecords ? { lost_records: lostRecords } : {}),
      ...(harnessError ? { harness_error: harnessError } : {}),
      duration_s: (Date.now() - started) / 1000,
    };
    writeJsonAtomic(file, result);
    sessions.push(result);
    if (harnessError) return { sessions, harnessError: `${name}: ${harnessError}`, reused, tamperEvidence: evidence(), lostRecords: lost() };
    opts.onProgress?.(`${name}: ${summarize(result)} in ${result.duration_s.toFixed(1)} s${tamper.length ? ` — TAMPER EVIDENCE: ${tamper.length} line(s)` : ""}${lostRecords ? ` — records lost: ${lostRecords}` : ""}`);
  }
  return { sessions, reused, tamperEvidence: evidence(), lostRecords: lost() };
}

/** The ids the launcher reported collection errors under (installed names). */
function collectionErrorIds(launch: LaunchSummary | null): string[] {
  const raw = (launch?.collection_errors ?? []) as Array<{ file?: string; nodeid?: string }>;
  return raw.flatMap((e) => [e.nodeid, e.file].filter((x): x is string => typeof x === "string" && x.length > 0));
}

/** Without records to check, the staged files' hashes still are. */
function hashEvidenceOnly(staged: StagedTests, after: Record<string, string>, name: string): string[] {
  return tamperEvidence({ session: name, ranks: 0, cases: [], map: staged.map, canaries: [], hashesBefore: staged.hashes, hashesAfter: after, extra: [[staged.probeDir, PROBES_DIR]] });
}

export function summarize(s: SessionResult): string {
  const n = (o: string) => s.cases.filter((c) => c.outcome === o).length;
  return `${n("passed")} passed, ${n("failed")} failed, ${n("error")} errors, ${n("skipped")} skipped${s.collection_errors.length ? `, ${s.collection_errors.length} collection errors` : ""}`;
}
