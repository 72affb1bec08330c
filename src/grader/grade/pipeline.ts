import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Sandbox } from "../../sandbox/types.js";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { applyPatch } from "../workspace/apply.js";
import { writeJsonAtomic } from "../../lib/json.js";
import { checkPatch } from "../workspace/patch-check.js";
import { runRanks, type WireCheck } from "../../runner/ranks.js";
import { differentialJudge } from "./differential-judge.js";
import { GradingInterrupted, planSessions, runSessions, type SandboxFactory, type SessionPlan, type StopRule } from "./sessions.js";
import type { ConfigRevert, PytestPin } from "../workspace/harness-files.js";
import type { ApplyMethod, CaseRecord, CollectionError, PartialRun, SessionResult } from "./types.js";
import { captureWorkspaceState, restoreWorkspaceState } from "../workspace/fresh-state.js";
import type { Progress } from "../../lib/progress.js";
import { freshWorkspace, installGradingTests, pytestPinFor, removeWorkspace, revertTestConfig } from "../workspace/workspace.js";

/**
 * One submission through the container-side steps: fresh workspace → apply → restore the
 * pytest-affecting files it touched (test-config.ts) → revert test edits → post-PR tests + probes →
 * sessions pinned to the base's pytest config. Shared by `grade` and by gold's calibration runs, so
 * gold is held to the same rules. Everything it learns is written under `artifactDir` (apply.json,
 * apply.log, sessions/, logs/).
 */

export type { SandboxFactory } from "./sessions.js";

export interface RunSubmissionOptions {
  task: GraderTask;
  /** Task content + hardware: part of every session key. */
  runKey: string;
  /** null: run the pre-PR base as it is (the acceptance check's "base" row; never a submission). */
  patchFile: string | null;
  artifactDir: string;
  sandboxFactory: SandboxFactory;
  /** The world sizes to run every suite at (default: the task's, sessions.ts gradedWorldSizes). */
  worldSizes?: readonly number[];
  /** Asked after each session: true skips the rest (sessions.ts runSessions). */
  stopWhen?: StopRule;
  /** The ids each session stops at on their first failure (sessions.ts runSessions failFast). */
  failFast?: (plan: SessionPlan) => string[];
  /** The wire verdict's evidence per session (sessions.ts RunSessionsOptions.wireJudge). */
  wireJudge?: (plan: SessionPlan, wire: WireCheck | undefined) => string[];
  onProgress?: Progress;
  signal?: AbortSignal;
}

export type RunOutcome =
  | { kind: "inapplicable"; reason: string }
  | {
      kind: "ran";
      /** null: nothing was applied (the base as it is). */
      method: ApplyMethod | null;
      sessions: SessionResult[];
      cases: CaseRecord[];
      collectionErrors: CollectionError[];
      harnessError?: string;
      /** Tamper evidence of every session (tamper.ts); empty when there is none. */
      tamperEvidence: string[];
      /** `<session>: why` per session whose records were lost (grade.ts runs the control). */
      lostRecords: string[];
      /** Case-id prefixes of the sessions whose records were lost. */
      lostPrefixes: string[];
      /** Test-dir paths the submission had touched, reverted before the post-PR tests went in. */
      revertedTestEdits: string[];
      /** Pytest-affecting files outside the test dirs it had touched, restored or removed. */
      revertedTestConfig: ConfigRevert[];
      pytestPin: PytestPin;
      reusedSessions: string[];
      /** Set when stopWhen stopped the run early. */
      partial?: PartialRun;
    };

export async function runSubmission(opts: RunSubmissionOptions): Promise<RunOutcome> {
  const { task, artifactDir } = opts;
  mkdirSync(artifactDir, { recursive: true });
  // The pure pre-check first: a refused patch needs no workspace.
  const pre: ReturnType<typeof checkPatch> = opts.patchFile === null ? { ok: true, paths: [] } : checkPatch(readFileSync(opts.patchFile));
  if (!pre.ok) {
    const reason = `inapplicable: ${pre.reason}`;
    writeFileSync(join(artifactDir, "apply.log"), `pre-check: ${pre.reason}\n`);
    writeJsonAtomic(join(artifactDir, "apply.json"), { applied: false, reason });
    return { kind: "inapplicable", reason };
  }
  const ws = await freshWorkspace(task, { recordIn: artifactDir, onProgress: opts.onProgress });
  try {
    const applied =
      opts.patchFile === null
        ? { applied: true as const, method: null, paths: [] as string[], log: "nothing applied: the pre-PR base as it is\n" }
        : await applyPatch(ws.repoDir, opts.patchFile, ws.baseCommit);
    writeFileSync(join(artifactDir, "apply.log"), applied.log);
    if (!applied.applied) {
      writeJsonAtomic(join(artifactDir, "apply.json"), { applied: false, reason: applied.reason });
      return { kind: "inapplicable", reason: applied.reason };
    }
    // What the patch names and what git sees: a file hidden from git status by an ignore rule still counts.
    const touched = [...new Set([...pre.paths, ...applied.paths])].sort();
    const configReverts = await revertTestConfig(task, ws, touched);
    const install = await installGradingTests(task, ws, touched);
    const pin = pytestPinFor(ws.repoDir);
    writeJsonAtomic(join(artifactDir, "apply.json"), {
      applied: true,
      method: applied.method,
      paths: applied.paths,
      reverted_test_edits: install.reverted,
      reverted_test_config: configReverts,
      pytest_pin: pin,
    });
    const notes = [
      install.reverted.length ? `reverted ${install.reverted.length} edit(s) under the test dirs` : "",
      configReverts.length ? `restored or removed ${configReverts.length} pytest-affecting file(s) outside them (${configReverts.map((c) => c.path).join(", ")})` : "",
      pin.droppedAddopts.length ? `left ${pin.droppedAddopts.join(" ")} out of the base's addopts` : "",
    ].filter(Boolean);
    opts.onProgress?.(`${applied.method ? `applied with ${applied.method}` : "the base as it is"}${notes.map((n) => `; ${n}`).join("")}`);
    const plans = planSessions(task, ws.repoDir, install.staged, { pin, ...(opts.worldSizes ? { worldSizes: opts.worldSizes } : {}) });
    const reverts = { revertedTestEdits: install.reverted, revertedTestConfig: configReverts, pytestPin: pin };
    // The post-PR state every session starts from (fresh-state.ts), kept outside the workspace.
    const state = captureWorkspaceState(ws.repoDir, join(ws.root, "grading", "state"));
    // Golden-differential rules are judged on the host against golden's records from its own session.
    const judge = differentialJudge({
      task,
      runKey: opts.runKey,
      sandboxFactory: opts.sandboxFactory,
      map: install.staged.map,
      probeFiles: install.staged.probeFiles,
      shrink: !opts.failFast,
      artifactDir,
      ...(opts.onProgress ? { onProgress: opts.onProgress } : {}),
      ...(opts.signal ? { signal: opts.signal } : {}),
    });
    const out = await runSessions({
      openSandbox: () => opts.sandboxFactory({ task, hostRepoDir: ws.repoDir, readOnlyOverlays: install.staged.overlays }),
      resetWorkspace: () => restoreWorkspaceState(state),
      task,
      taskHash: opts.runKey,
      plans,
      resultsDir: join(artifactDir, "sessions"),
      logsDir: join(artifactDir, "logs"),
      staged: install.staged,
      onProgress: opts.onProgress,
      signal: opts.signal,
      ...(opts.stopWhen ? { stopWhen: opts.stopWhen } : {}),
      ...(opts.failFast ? { failFast: opts.failFast } : {}),
      ...(opts.wireJudge ? { wireJudge: opts.wireJudge } : {}),
      ...(judge ? { judge } : {}),
    });
    const lostPlans = plans.filter((p) => out.sessions.some((s) => s.file === p.fileName && s.lost_records));
    return {
      kind: "ran",
      method: applied.method,
      sessions: out.sessions,
      cases: out.sessions.flatMap((s) => s.cases),
      collectionErrors: out.sessions.flatMap((s) => s.collection_errors),
      ...(out.harnessError ? { harnessError: out.harnessError } : {}),
      tamperEvidence: out.tamperEvidence,
      lostRecords: out.lostRecords,
      lostPrefixes: [...new Set(lostPlans.map((p) => p.idPrefix))],
      ...reverts,
      reusedSessions: out.reused,
      ...(out.partial ? { partial: out.partial } : {}),
    };
  } finally {
    removeWorkspace(ws, { recordIn: artifactDir });
  }
}

export interface ControlOptions {
  task: GraderTask;
  sandboxFactory: SandboxFactory;
  /** The mode whose session lost its records (its env is used). */
  mode: string;
  /** The world size that session ran at (the control runs at the same). */
  ranks: number;
  /** Host folder for the control's files (apply.log stays out: nothing is applied). */
  artifactDir: string;
  onProgress?: Progress;
  signal?: AbortSignal;
}

export type ControlOutcome = { ok: true } | { ok: false; why: string };

/**
 * The control run for a session whose records were lost: the same sandbox factory over a fresh
 * base workspace (nothing of the submission in it), the canaries only, on as many ranks as the session
 * that lost its records.
 * If it loses its records too (or cannot run), the harness is at fault; if it runs cleanly, the loss
 * was the submission's.
 */
export async function runControl(opts: ControlOptions): Promise<ControlOutcome> {
  const { task, ranks } = opts;
  const spec = task.fullSpec;
  mkdirSync(opts.artifactDir, { recursive: true });
  const ws = await freshWorkspace(task, { recordIn: opts.artifactDir, onProgress: opts.onProgress });
  try {
    const install = await installGradingTests(task, ws, []);
    const pin = pytestPinFor(ws.repoDir);
    const files = [...new Set(install.staged.canaries.map((c) => c.installed.split("::")[0]!))];
    let sandbox: Sandbox;
    try {
      sandbox = await opts.sandboxFactory({ task, hostRepoDir: ws.repoDir, readOnlyOverlays: install.staged.overlays });
    } catch (e) {
      return { ok: false, why: `the control's sandbox could not start: ${(e as Error).message}` };
    }
    try {
      opts.onProgress?.(`control: ${install.staged.canaries.length} canaries on the base, ${ranks} rank(s)`);
      const r = await runRanks(sandbox, {
        ranks,
        pytestArgs: [...files, "--continue-on-collection-errors", ...pin.args],
        outDir: ".infradev/grade/control",
        perTestTimeoutSec: spec.timeout_sec,
        runTimeoutSec: spec.run_timeout_sec,
        env: { ...spec.env.vars, ...spec.modes[opts.mode] },
        signal: opts.signal,
      });
      if (opts.signal?.aborted) throw new GradingInterrupted("control run interrupted");
      if (r.harnessError) return { ok: false, why: `the control run failed too: ${r.harnessError}` };
      if (r.lostRecords) return { ok: false, why: `the control run lost its records too: ${r.lostRecords}` };
      if (r.launch?.status === "interrupted") return { ok: false, why: "the control run's launcher was interrupted too" };
      writeJsonAtomic(join(opts.artifactDir, "control.json"), { launch_status: r.launch?.status ?? null, cases: r.cases.length });
      return { ok: true };
    } finally {
      await sandbox.close();
    }
  } finally {
    removeWorkspace(ws, { recordIn: opts.artifactDir });
  }
}
