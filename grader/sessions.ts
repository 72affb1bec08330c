import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import type { MergedCase } from "../sandbox/merge.js";
import { runRanks, type LaunchSummary } from "../sandbox/ranks.js";
import type { Sandbox } from "../sandbox/types.js";
import type { GraderTask } from "../tasks/loader.js";
import { readJsonFile, writeJsonAtomic } from "./files.js";
import { exceptionType } from "./labels.js";
import type { CaseRecord, CollectionError, SessionResult, Suite } from "./types.js";
import type { PytestPin } from "./test-config.js";
import { PROBES_DIR, pytestPinFor } from "./workspace.js";

/**
 * The pytest sessions of one grading run, and running them with a file per finished session so
 * that a killed run resumes where it stopped.
 *
 * Per mode, the official tests and the probes run in ONE launcher session when their test module
 * names cannot clash (pytest's default import mode needs unique basenames for rootless test files):
 * ranks start once instead of twice. Which suite a case belongs to is decided by its path — probes
 * live under infradev_probes/ — so Set A and Set B stay separable. Official tests run first, so a
 * probe can never change an official outcome.
 */

export const SESSION_FORMAT = 1;

export interface SessionPlan {
  mode: string;
  /** "all" (official + probes together), "official" or "probe". */
  name: "all" | "official" | "probe";
  pytestArgs: string[];
  env: Record<string, string>;
  /** Prefix of case ids: `<mode>/` when the task has more than one mode. */
  idPrefix: string;
}

function testModules(dir: string): string[] {
  if (!existsSync(dir)) return [];
  const out: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    if (e.isDirectory()) out.push(...testModules(join(dir, e.name)));
    else if (/^test_.*\.py$|_test\.py$/.test(e.name)) out.push(e.name);
  }
  return out;
}

/** Official and probe test files share a basename: they must run in separate sessions. */
export function suitesClash(repoDir: string, officialDirs: string[]): boolean {
  const official = new Set(officialDirs.flatMap((d) => testModules(join(repoDir, d))));
  return testModules(join(repoDir, PROBES_DIR)).some((m) => official.has(basename(m)));
}

/**
 * `pin`: the arguments that pin pytest's config to the base's (test-config.ts); read from the
 * repo root when not given — after the restore of the submission's pytest-affecting files.
 */
export function planSessions(task: GraderTask, repoDir: string, opts: { combine?: boolean; pin?: PytestPin } = {}): SessionPlan[] {
  const spec = task.fullSpec;
  const official = spec.test_dirs.map((d) => d.replace(/\/+$/, "")).filter((d) => existsSync(join(repoDir, d)));
  const combine = (opts.combine ?? true) && !suitesClash(repoDir, official);
  const modes = Object.keys(spec.modes);
  const common = ["--continue-on-collection-errors", ...(opts.pin ?? pytestPinFor(repoDir)).args];
  return modes.flatMap((mode): SessionPlan[] => {
    const env = { ...spec.env.vars, ...spec.modes[mode] };
    const idPrefix = modes.length > 1 ? `${mode}/` : "";
    if (combine) return [{ mode, name: "all", pytestArgs: [...official, PROBES_DIR, ...common], env, idPrefix }];
    return [
      ...(official.length ? [{ mode, name: "official" as const, pytestArgs: [...official, ...common], env, idPrefix }] : []),
      { mode, name: "probe", pytestArgs: [PROBES_DIR, ...common], env, idPrefix },
    ];
  });
}

export function sessionFileName(plan: SessionPlan): string {
  return `${plan.mode}.${plan.name}`;
}

export function suiteOf(nodeid: string): Suite {
  return nodeid.startsWith(`${PROBES_DIR}/`) ? "probe" : "official";
}

/** What identifies a session's result: a file written under another key is run again, never reused. */
export function sessionKey(taskHash: string, task: GraderTask, plan: SessionPlan): string {
  const spec = task.fullSpec;
  const what = { SESSION_FORMAT, taskHash, plan, ranks: spec.ranks, timeout_sec: spec.timeout_sec, run_timeout_sec: spec.run_timeout_sec };
  return createHash("sha256").update(JSON.stringify(what)).digest("hex").slice(0, 24);
}

function firstLine(s: string): string {
  const line = s.split("\n").find((l) => l.trim()) ?? "";
  return line.length > 300 ? `${line.slice(0, 297)}...` : line;
}

/** A merged case, slimmed to what scoring needs. */
export function caseRecord(c: MergedCase, idPrefix: string, launchStatus?: string | null): CaseRecord {
  const failing = c.ranks.find((r) => r.outcome === "error" || r.outcome === "failed") ?? c.ranks.find((r) => r.outcome === "missing");
  const errorType = failing ? exceptionType(failing.message, failing.excerpt) : undefined;
  // The session ran out of time: the test it was on, and those it never reached, did not finish.
  const outOfTime =
    launchStatus === "run_timeout" && c.outcome !== "passed" && c.outcome !== "skipped" && (c.reason === "missing" || c.ranks.some((r) => r.message.startsWith("run_timeout")));
  const reason = outOfTime ? "run_timeout" : c.reason;
  return {
    id: `${idPrefix}${c.id}`,
    suite: suiteOf(c.id),
    outcome: c.outcome,
    ...(reason ? { reason } : {}),
    ...(c.probe ? { probe: c.probe } : {}),
    ...(errorType ? { error_type: errorType } : {}),
    ...(failing && c.outcome !== "passed" && c.outcome !== "skipped" ? { message: firstLine(failing.message || failing.excerpt) } : {}),
    time_s: c.timeSec,
  };
}

export function collectionErrors(launch: LaunchSummary | null, idPrefix: string): CollectionError[] {
  const raw = (launch?.collection_errors ?? []) as Array<{ file?: string; nodeid?: string; message?: string }>;
  return raw.map((e) => {
    const message = e.message ?? "";
    const type = exceptionType("", message);
    return { path: `${idPrefix}${e.file ?? e.nodeid ?? ""}`, ...(type ? { error_type: type } : {}), message: firstLine(message) };
  });
}

export interface RunSessionsOptions {
  sandbox: Sandbox;
  task: GraderTask;
  taskHash: string;
  plans: SessionPlan[];
  /** Host folder for `<mode>.<name>.json` (one per finished session). */
  resultsDir: string;
  /** Host folder for the launcher's files of each session (`<mode>.<name>/`). */
  logsDir: string;
  onProgress?: (msg: string) => void;
  signal?: AbortSignal;
}

export interface SessionsOutcome {
  sessions: SessionResult[];
  /** The first harness fault, if any session had one (later sessions are not run). */
  harnessError?: string;
  /** Sessions read back from an earlier (killed) run instead of being run again. */
  reused: string[];
}

/** Reads a finished session's file, or null when it is absent, from another plan, or a harness fault. */
export function readFinishedSession(file: string, key: string): SessionResult | null {
  const s = readJsonFile<SessionResult>(file);
  return s && s.key === key && !s.harness_error ? s : null;
}

export async function runSessions(opts: RunSessionsOptions): Promise<SessionsOutcome> {
  const { sandbox, task, plans } = opts;
  const spec = task.fullSpec;
  mkdirSync(opts.resultsDir, { recursive: true });
  const sessions: SessionResult[] = [];
  const reused: string[] = [];
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
    opts.onProgress?.(`${name}: running ${plan.pytestArgs.filter((a) => !a.startsWith("-")).join(" + ")} on ${spec.ranks} rank(s)`);
    const outDir = `.infradev/grade/${name}`;
    const started = Date.now();
    const r = await runRanks(sandbox, {
      ranks: spec.ranks,
      pytestArgs: plan.pytestArgs,
      outDir,
      perTestTimeoutSec: spec.timeout_sec,
      runTimeoutSec: spec.run_timeout_sec,
      env: plan.env,
      signal: opts.signal,
      onProgress: (d, t) => opts.onProgress?.(`${name}: ${d}/${t} tests`),
    });
    // An interrupted launcher (SIGTERM/SIGINT from outside) leaves a partial session: never a result.
    const harnessError = r.harnessError ?? (r.launch?.status === "interrupted" ? `launcher interrupted: ${r.launch?.events.at(-1)?.detail ?? "signal"}` : undefined);
    const logs = join(opts.logsDir, name);
    rmSync(logs, { recursive: true, force: true });
    // The launcher's logs come in its result bundle (capped): written as regular files, nothing read from the sandbox.
    mkdirSync(logs, { recursive: true });
    for (const log of r.logs) writeFileSync(join(logs, log.name.replace(/[^A-Za-z0-9._-]/g, "_").replace(/^\.+/, "_") || "log"), log.text);
    const result: SessionResult = {
      key,
      mode: plan.mode,
      session: plan.name,
      cases: r.cases.map((c) => caseRecord(c, plan.idPrefix, r.launch?.status)),
      collection_errors: collectionErrors(r.launch, plan.idPrefix),
      launch_status: r.launch?.status ?? null,
      ...(harnessError ? { harness_error: harnessError } : {}),
      duration_s: (Date.now() - started) / 1000,
    };
    writeJsonAtomic(file, result);
    sessions.push(result);
    if (harnessError) return { sessions, harnessError: `${name}: ${harnessError}`, reused };
    opts.onProgress?.(`${name}: ${summarize(result)} in ${result.duration_s.toFixed(1)} s`);
  }
  return { sessions, reused };
}

export function summarize(s: SessionResult): string {
  const n = (o: string) => s.cases.filter((c) => c.outcome === o).length;
  return `${n("passed")} passed, ${n("failed")} failed, ${n("error")} errors, ${n("skipped")} skipped${s.collection_errors.length ? `, ${s.collection_errors.length} collection errors` : ""}`;
}
