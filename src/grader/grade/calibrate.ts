import { join } from "node:path";
import type { GraderTask } from "../../task/hidden/grader-task.js";
import { clearArtifacts, taskContentHash } from "../../lib/files.js";
import { readJsonFile, writeJsonAtomic } from "../../lib/json.js";
import { fingerprintHash, hardwareFingerprint } from "../workspace/fingerprint.js";
import { runSubmission, type SandboxFactory } from "./pipeline.js";
import { flakyIds } from "./score.js";
import { gradedWorldSizes, worldSizesTag } from "./sessions.js";
import type { Calibration, CaseRecord, GoldCase, HardwareFingerprint, SessionResult } from "./types.js";
import { wireReferences } from "./wire-judge.js";
import { defaultCalibrationDir } from "../../lib/paths.js";
import { prefixed, type Progress } from "../../lib/progress.js";

/**
 * Gold's calibration: the golden patch run `runs` times (3) on this machine, cached by task content
 * hash + hardware fingerprint (taken in the grader's sandbox: fingerprint.ts). Each run keeps its
 * session files, so a killed calibration resumes; `force` removes them first.
 */

/**
 * 2: gold graded under the same restore of pytest-affecting files and config pin as submissions.
 * 3: gold run with the staged, renamed tests and canaries (and held to the same tamper checks).
 * 4: gold run under the same plan as submissions: separate official / probe sessions, each from
 *    the same fresh state.
 * 5: gold run at each graded world size (`world_sizes`; ids carry `ws<N>/` the way a grade's do).
 * 6: `wire_unexplained` (the sessions where gold's own loopback traffic exceeded wire.py's bound:
 *    the wire verdict is off there) and `wire_reference` (gold's residual and payload per session), for the
 *    wire verdict (wire-judge.ts).
 * 7: the residual's expected payload counts the process groups' set-up (wire.py EXPECTED_PER_GROUP).
 * 8: `wire_reference` keeps gold's most calls, groups and store requests per session (units_max).
 */
export const CALIBRATION_FORMAT = 8;
export const CALIBRATION_RUNS = 3;

export { defaultCalibrationDir }; // lives in lib/paths.ts: the sandboxes mask it

/** Gold could not be calibrated because the harness failed (not the task). */
export class HarnessFault extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HarnessFault";
  }
}

/** The task itself is broken: gold does not apply. */
export class CalibrationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CalibrationError";
  }
}

export interface CalibrateOptions {
  task: GraderTask;
  cacheDir?: string;
  sandboxFactory: SandboxFactory;
  /** Computed once and shared by callers that grade many submissions. */
  fingerprint?: HardwareFingerprint;
  taskHash?: string;
  /** The world sizes gold runs at (default: the task's, gradedWorldSizes); `grade --ranks N` passes [N]. */
  worldSizes?: readonly number[];
  runs?: number;
  /** Ignore a cached calibration and its runs' session files: gold runs again from scratch. */
  force?: boolean;
  onProgress?: Progress;
  signal?: AbortSignal;
}

export interface CalibrationHandle {
  calibration: Calibration;
  file: string;
  cached: boolean;
}

/** Per-case outcome across runs (pure). Ids are kept in first-seen order. */
export function combineRuns(runs: CaseRecord[][]): GoldCase[] {
  const order: string[] = [];
  const byId = new Map<string, GoldCase>();
  for (const cases of runs) {
    for (const c of cases) {
      if (!byId.has(c.id)) {
        order.push(c.id);
        byId.set(c.id, { id: c.id, suite: c.suite, outcomes: [] });
      }
      const g = byId.get(c.id)!;
      if (!g.probe && c.probe) g.probe = c.probe;
    }
  }
  for (const id of order) {
    const g = byId.get(id)!;
    g.outcomes = runs.map((cases) => cases.find((c) => c.id === id)?.outcome ?? "not_collected");
  }
  return order.map((id) => byId.get(id)!);
}

/**
 * `<cache>/<task>/<task hash>-<fingerprint>`, with `-ws<N>[-<N>…]` when the world sizes are not the
 * task's own (those are in the task hash already): `grade --ranks 4` calibrates at 4 once, beside
 * the default calibration, and reuses it.
 */
export function calibrationDirFor(cacheDir: string, task: GraderTask, taskHash: string, fp: HardwareFingerprint, worldSizes?: readonly number[]): string {
  const tag = worldSizes ? worldSizesTag(task.fullSpec, worldSizes) : "";
  return join(cacheDir, task.id, `${taskHash.slice(0, 16)}-${fingerprintHash(fp)}${tag}`);
}

export async function calibrate(opts: CalibrateOptions): Promise<CalibrationHandle> {
  const { task } = opts;
  const runs = opts.runs ?? CALIBRATION_RUNS;
  const taskHash = opts.taskHash ?? taskContentHash(task.taskDir);
  const fingerprint = opts.fingerprint ?? (await hardwareFingerprint(task, opts.sandboxFactory));
  const worldSizes = opts.worldSizes ? [...opts.worldSizes].sort((a, b) => a - b) : gradedWorldSizes(task.fullSpec);
  const dir = calibrationDirFor(opts.cacheDir ?? defaultCalibrationDir(), task, taskHash, fingerprint, worldSizes);
  const file = join(dir, "calibration.json");
  const cached = readJsonFile<Calibration>(file);
  if (!opts.force && cached && cached.format === CALIBRATION_FORMAT && cached.task_hash === taskHash && cached.runs === runs && cached.world_sizes?.join(",") === worldSizes.join(",")) {
    return { calibration: cached, file, cached: true };
  }
  // --force: gold really runs again; the cache entry and the per-run session files (resume points) go (clearArtifacts).
  if (opts.force) clearArtifacts(dir);
  const started = Date.now();
  const perRun: CaseRecord[][] = [];
  const wireUnexplained = new Set<string>();
  const sessionsPerRun: SessionResult[][] = [];
  for (let i = 1; i <= runs; i++) {
    const progress = prefixed(opts.onProgress, `calibrate ${task.id}: gold run ${i}/${runs}: `);
    const out = await runSubmission({
      task,
      runKey: `${taskHash}:${fingerprintHash(fingerprint)}:gold${i}`,
      patchFile: task.hidden.goldenPatch,
      artifactDir: join(dir, `run${i}`),
      sandboxFactory: opts.sandboxFactory,
      worldSizes,
      // Gold is never tampered: where its own traffic exceeds the bound, the verdict is disarmed for
      // that session instead (wire_unexplained), and said.
      wireJudge: () => [],
      onProgress: progress,
      signal: opts.signal,
    });
    if (out.kind === "inapplicable") throw new CalibrationError(`${task.id}: the golden patch does not apply: ${out.reason}`);
    if (out.harnessError) throw new HarnessFault(`${task.id}: gold run ${i}: ${out.harnessError}`);
    if (out.lostRecords.length) throw new HarnessFault(`${task.id}: gold run ${i} lost its records: ${out.lostRecords.join("; ")}`);
    // Gold is never tampered: evidence here is a broken task or a broken grader, said loudly.
    if (out.tamperEvidence.length) throw new CalibrationError(`${task.id}: gold run ${i} reads as tampered (a grader or task bug): ${out.tamperEvidence.join(" | ")}`);
    if (out.cases.length === 0) {
      throw new CalibrationError(`${task.id}: gold run ${i} collected no test case (see ${join(dir, `run${i}`, "logs")})`);
    }
    perRun.push(out.cases);
    sessionsPerRun.push(out.sessions);
    for (const s of out.sessions) {
      if (!s.wire?.verdict) continue;
      wireUnexplained.add(s.file);
      progress?.(`${s.file}: gold's own loopback traffic exceeds what its counted collectives explain (ratio ${s.wire.bound_ratio}); the wire verdict is off for this session`);
    }
  }
  const cases = combineRuns(perRun);
  const calibration: Calibration = {
    format: CALIBRATION_FORMAT,
    task_id: task.id,
    task_hash: taskHash,
    world_sizes: worldSizes,
    fingerprint,
    fingerprint_hash: fingerprintHash(fingerprint),
    runs,
    cases,
    flaky: flakyIds(cases),
    wire_unexplained: [...wireUnexplained].sort(),
    wire_reference: wireReferences(sessionsPerRun),
    created_at: new Date().toISOString(),
    duration_s: (Date.now() - started) / 1000,
  };
  writeJsonAtomic(file, calibration);
  return { calibration, file, cached: false };
}
