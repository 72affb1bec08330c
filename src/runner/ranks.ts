import { randomBytes } from "node:crypto";
import { posix } from "node:path";
import { type LaunchEvent, type MergedCase, type RankRecord, mergeRankReports } from "./merge.js";
import type { ExecResult, Sandbox } from "../sandbox/types.js";

/** launch.json, as the Python rank launcher writes it (python/sandbox/README.md). */
export interface LaunchSummary {
  launcher: string;
  nproc: number;
  status: "ok" | "tests_failed" | "fail_fast" | "hang" | "crash" | "run_timeout" | "interrupted" | "launch_error";
  exit_codes: Array<number | null>;
  duration_s: number;
  restarts: number;
  events: LaunchEvent[];
  collected: string[];
  collection_errors: unknown[];
  [extra: string]: unknown;
}

/** The launcher's exit code for each status (python/sandbox/README.md). */
export const LAUNCHER_EXIT_CODES: Record<LaunchSummary["status"], number> = {
  ok: 0,
  tests_failed: 1,
  fail_fast: 1,
  hang: 2,
  crash: 2,
  run_timeout: 2,
  interrupted: 2,
  launch_error: 3,
};
export const BUNDLE_PREFIX = "INFRADEV-BUNDLE ";
export const PROGRESS_PREFIX = "INFRADEV-PROGRESS ";
/** The bundle is at most 56 MiB (the launcher caps it); the rest is room for stderr. */
export const LAUNCHER_MAX_OUTPUT_BYTES = 96 * 1024 * 1024;

export interface RunRanksOptions {
  ranks: number;
  /** pytest arguments (paths, -k, ...), relative to cwd inside the sandbox. */
  pytestArgs: string[];
  /** Folder for per-rank files (for the agent to read), relative to the sandbox's repoDir (e.g. ".infradev/results/<id>"). */
  outDir: string;
  cwd?: string;
  /** Per-test wall-clock limit (a test past it is a hang). */
  perTestTimeoutSec: number;
  /** Whole-session limit. */
  runTimeoutSec: number;
  /** Mode / task environment for every rank. */
  env?: Record<string, string>;
  launcher?: "builtin" | "torchrun";
  /** Stop after a hang/crash instead of continuing the suite without the finished tests. */
  noContinue?: boolean;
  /** pytest plugins every rank loads (`-p NAME`; plugin autoload is off in the ranks). */
  plugins?: string[];
  /** Empty the out dir once the launcher has its bundle (nothing of this session stays readable in the workspace). */
  removeOutDir?: boolean;
  /**
   * Test ids whose failure, error or skip on any rank stops the session there (status `fail_fast`,
   * the tests not reached missing): for task check's mutants only, whose verdict needs one failing
   * case; never for a submission's grade.
   */
  stopOnFail?: string[];
  signal?: AbortSignal;
  /** Called as tests finish on rank 0 (done / total collected). */
  onProgress?: (done: number, total: number) => void;
}

export type OutcomeCounts = { passed: number; failed: number; error: number; skipped: number };

/**
 * Independent records of one rank in one launcher session (after a hang or crash the launcher
 * restarts the ranks on the remaining tests: each session has its own entry). Counts are in the
 * units of pytest's summary line (python/sandbox/infradev_launcher/integrity.py), so on an honest
 * run plugin == pytest_junit (counts) == summary, and exit_code is 0 iff failed + error == 0 and
 * something ran (5: nothing collected).
 */
export interface RankIntegrity {
  rank: number;
  /** The launcher session (0, then 1, 2... after restarts). */
  session: number;
  /** exit code of the rank's pytest process as the launcher saw it (waitpid); null = killed by the launcher. */
  exit_code: number | null;
  /** outcome counts from the recording plugin's records (every record line of the session, + collection errors). */
  plugin: OutcomeCounts;
  /** pytest's OWN junitxml (--junitxml, written by pytest's junitxml plugin), parsed by the launcher: null if absent/unparseable. */
  pytest_junit: (OutcomeCounts & { outcomes: Record<string, "passed" | "failed" | "error" | "skipped">; outcomes_truncated?: boolean }) | null;
  /** counts from pytest's terminal summary line in the rank's log ("== 3 failed, 21 passed in 4.2s =="): null if none found. */
  summary: OutcomeCounts | null;
  /**
   * The rank's audit channel (python/sandbox/infradev_audit.py parse_channel): the hook armed, pytest
   * returned (done), what it refused; null where there is none (torchrun closes the descriptor).
   */
  audit?: { armed: boolean; done: boolean; refused: string[]; refused_count: number; observed?: Record<string, number>; junk: number; overflow: boolean } | null;
  /** The plugin wrote the rank's collective totals when pytest ended (absent in bundles of older launchers). */
  comm_written?: boolean;
  /** `group=` objects the collectives refused (not a torch ProcessGroup): "all_reduce(group=<mod.Type>)". */
  refused_groups?: string[];
  /** Rank 0 only: the kernel's count of what the session sent, beside what the totals counted (a record, not a verdict). */
  wire?: WireCheck;
}

/**
 * python/sandbox/infradev_launcher/wire.py's record: the kernel's count of what the session sent on
 * the sandbox's loopback, beside what the ranks' collective totals counted or explain; `skip` says
 * why it was not taken. `verdict` is true when lo carried more payload than every counted call,
 * group and store request can explain (payload_bytes_min > 1.25 × payload_bound): collectives were
 * run past the counters. The grader makes that tamper evidence unless gold's own session of the same
 * name exceeded the bound too (sessions.ts, calibrate.ts `wire_unexplained`).
 */
export interface WireCheck {
  skip?: string;
  measured_segments?: number;
  explained_segments?: number;
  explained_by?: Record<string, number>;
  segments_ratio?: number | null;
  tx_packets?: number;
  retrans_segments?: number;
  /** TCP payload bytes: lo's bytes less the headers of its packets. */
  payload_bytes?: number;
  /** payload_bytes less the most the retransmitted segments can have carried. */
  payload_bytes_min?: number;
  /** The payload bytes the ranks' collective counters counted (a recv counts its tensor too). */
  counted_bytes?: number;
  payload_ratio?: number | null;
  calls?: number;
  /** The most payload the counted calls, groups and store requests can have put on lo (wire.py's model). */
  payload_bound?: number;
  payload_bound_by?: Record<string, number>;
  /** payload_bytes_min / payload_bound. */
  bound_ratio?: number | null;
  /** Bytes the ranks counted, summed, by op. */
  counted_by_op?: Record<string, number>;
  /** What honest gloo traffic of the counted calls carries (wire.py's per-op model, framing). */
  expected_payload?: number;
  /** payload_bytes (retransmissions in) less expected_payload: what no counted call explains, at most. */
  residual_bytes_max?: number;
  /** payload_bytes_min less expected_payload: the same, at least. */
  residual_bytes_min?: number;
  /** payload_bytes less 16 KiB per retransmitted segment, less expected_payload: what the grader judges. */
  residual_bytes_judged?: number;
  /** How many calls, process groups and store requests expected_payload counted, and its (upper) bytes per one. */
  expected_units?: Record<string, number>;
  expected_unit_bytes?: Record<string, number>;
  verdict?: boolean;
}

export interface RunRanksResult {
  /** The bundle's launch summary; null when no valid bundle came back (see lostRecords / harnessError). */
  launch: LaunchSummary | null;
  cases: MergedCase[];
  exec: ExecResult;
  /** ONLY a backend failure (exec.harnessError: bwrap/engine could not run the command at all). */
  harnessError?: string;
  /**
   * The launcher ran but its result is missing, cut, duplicated, not the last line, or the launcher
   * exited abnormally (signal / unexpected code), was interrupted from inside the sandbox, or reported
   * a launch error: evidence the code under test may have caused it.
   */
  lostRecords?: string;
  integrity: RankIntegrity[];
  /** capped text logs for artifacts: rank logs' tails, stacks, launch summary (name → text). */
  logs: Array<{ name: string; text: string }>;
  /** Per-rank records probes wrote for the host to judge (empty without a bundle or without such probes). */
  attachments: RankAttachment[];
  /** Attachments the bundle's cap left out. */
  attachmentsDropped?: number;
  /** The out dir as the sandbox sees it (where the agent finds the rank logs). */
  sandboxOutDir: string;
}

interface Bundle {
  format: number;
  nonce: string;
  launch: Omit<LaunchSummary, "collected">;
  collected: string[];
  ranks: Array<{ rank: number; records: RankRecord[]; records_dropped?: number }>;
  records_dropped?: number;
  integrity: RankIntegrity[];
  logs: Array<{ name: string; text: string }>;
  attachments?: unknown[];
  attachments_dropped?: number;
}

/** A per-rank file a probe wrote for the host to judge (python/sandbox/infradev_outputs.py ATTACHMENTS), as the bundle carried it. */
export interface RankAttachment {
  rank: number;
  name: string;
  text: string;
}

const STATUSES = new Set(Object.keys(LAUNCHER_EXIT_CODES));
const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function lastLines(text: string, n: number): string {
  return text
    .split("\n")
    .filter((l) => l.trim() && !l.startsWith(PROGRESS_PREFIX))
    .slice(-n)
    .join(" | ");
}

/** Why a bundle cannot be used, or the bundle. Exported for tests. */
export function readBundle(exec: ExecResult, nonce: string): { bundle: Bundle } | { lost: string } {
  if (exec.cancelled) return { lost: "the run was cancelled before the launcher finished" };
  if (exec.timedOut) return { lost: "the launcher did not finish within its outer time limit and was killed by the host" };
  if (exec.exitCode === null) return { lost: `the launcher was killed by ${exec.signal ?? "a signal"}` };
  const codes = new Set(Object.values(LAUNCHER_EXIT_CODES));
  if (!codes.has(exec.exitCode)) return { lost: `the launcher exited with code ${exec.exitCode}, not one of its own (${[...codes].join(", ")}): ${lastLines(exec.stderr, 3)}` };
  const lines = exec.stdout.split("\n");
  const bundleLines = lines.map((l, i) => [l, i] as const).filter(([l]) => l.startsWith(BUNDLE_PREFIX));
  if (bundleLines.length === 0) return { lost: `the launcher printed no result bundle (exit ${exec.exitCode}${exec.truncated ? ", output cut" : ""}): ${lastLines(exec.stderr, 3)}` };
  if (bundleLines.length > 1) return { lost: `the launcher's stdout holds ${bundleLines.length} result bundles (exactly one is the launcher's)` };
  let lastNonEmpty = lines.length - 1;
  while (lastNonEmpty >= 0 && lines[lastNonEmpty]!.trim() === "") lastNonEmpty--;
  const [line, index] = bundleLines[0]!;
  if (index !== lastNonEmpty) return { lost: "the result bundle is not the last line of the launcher's stdout" };
  let parsed: unknown;
  try {
    parsed = JSON.parse(line.slice(BUNDLE_PREFIX.length));
  } catch (e) {
    return { lost: `the result bundle is not valid JSON: ${(e as Error).message}` };
  }
  if (!isObj(parsed) || parsed.format !== 1) return { lost: "the result bundle has an unknown format" };
  if (parsed.nonce !== nonce) return { lost: "the result bundle does not carry this run's nonce (not this launcher's)" };
  const launch = parsed.launch;
  if (!isObj(launch) || typeof launch.status !== "string" || !STATUSES.has(launch.status)) return { lost: "the result bundle has no valid launch summary" };
  if (!Array.isArray(parsed.ranks) || !Array.isArray(parsed.integrity) || !Array.isArray(parsed.logs) || !Array.isArray(parsed.collected)) {
    return { lost: "the result bundle lacks ranks / integrity / logs / collected" };
  }
  if (!Array.isArray(launch.events)) launch.events = [];
  return { bundle: parsed as unknown as Bundle };
}

/** Feeds onProgress from the launcher's stderr stream (`INFRADEV-PROGRESS {"done":n,"total":m}` lines, split anywhere across chunks). */
export function progressReader(onProgress: (done: number, total: number) => void): { push(chunk: string): void; last(): number } {
  let buf = "";
  let last = -1;
  return {
    push(chunk: string) {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (!line.startsWith(PROGRESS_PREFIX)) continue;
        try {
          const p = JSON.parse(line.slice(PROGRESS_PREFIX.length)) as { done?: unknown; total?: unknown };
          if (typeof p.done === "number" && typeof p.total === "number" && p.total > 0 && p.done !== last) {
            last = p.done;
            onProgress(p.done, p.total);
          }
        } catch {
          // not ours, or cut
        }
      }
      if (buf.length > 4096) buf = buf.slice(-4096); // a line that long is not a progress line
    },
    last: () => last,
  };
}

/**
 * The launcher's spec in the environment (INFRADEV_LAUNCH_SPEC_HEX, popped by the launcher): the out
 * dir, pytest args and plugins stay out of its argv, which /proc/<pid>/cmdline shows every process of
 * the sandbox. The format is the rank spec's (python/sandbox/infradev_outputs.py encode_spec):
 * NUL-separated "<key>:<value>" records after a magic line, hex-encoded.
 */
export function launchSpecHex(outDir: string, pytestArgs: string[], plugins: string[], stopOnFail: string[] = []): string {
  const parts = ["infradev-rank-spec-1", `o:${outDir}`, "n:0", ...pytestArgs.map((a) => `a:${a}`), ...plugins.map((p) => `p:${p}`), ...stopOnFail.map((f) => `f:${f}`)];
  for (const p of parts) if (p.includes("\0")) throw new Error(`runRanks: a pytest argument or plugin name contains a NUL byte: ${JSON.stringify(p)}`);
  return Buffer.from(parts.join("\0"), "utf8").toString("hex");
}

function outDirArg(repoDir: string, cwd: string | undefined, outDir: string): { sandboxOutDir: string; arg: string } {
  if (outDir.includes("\0") || posix.isAbsolute(outDir) || outDir.split("/").includes("..") || posix.normalize(outDir) === ".") {
    throw new Error(`runRanks: outDir must name a folder inside the workspace: relative, without '..' (got ${JSON.stringify(outDir)})`);
  }
  const sandboxOutDir = posix.join(repoDir, outDir);
  const cwdAbs = posix.resolve(repoDir, cwd ?? ".");
  // Relative to the launcher's cwd when the cwd holds it: the launcher then checks (O_NOFOLLOW) only the
  // workspace's own folders. Else (a cwd elsewhere, e.g. the base checkout) the absolute path, every
  // component of which the launcher checks: a relative path with '..' would follow the cwd's physical parents.
  const rel = posix.relative(cwdAbs, sandboxOutDir);
  return { sandboxOutDir, arg: rel === "" ? "." : rel.split("/").includes("..") ? sandboxOutDir : rel };
}

/**
 * Runs one pytest session on N ranks through the Python launcher inside the given sandbox. The
 * results come back only as the launcher's result bundle, the last line of its stdout; the host
 * reads no file of the out dir (the code under test can write there).
 */
export async function runRanks(sandbox: Sandbox, opts: RunRanksOptions): Promise<RunRanksResult> {
  if (!Number.isInteger(opts.ranks) || opts.ranks < 1) throw new Error(`runRanks: ranks must be an integer ≥ 1 (got ${opts.ranks})`);
  const { sandboxOutDir, arg } = outDirArg(sandbox.repoDir, opts.cwd, opts.outDir);
  const nonce = randomBytes(16).toString("hex");
  const specHex = launchSpecHex(arg, opts.pytestArgs, opts.plugins ?? [], opts.stopOnFail ?? []);
  // One environment string may hold 128 KiB (MAX_ARG_STRLEN): a longer spec goes in argv, as before.
  const inEnv = specHex.length < 120 * 1024;
  const argv = [
    sandbox.python,
    // -I: isolated (no PYTHONPATH / PYTHON* variables, no user site, no cwd or script dir on sys.path:
    // a task's PYTHONPATH or the repo cannot shadow what the launcher imports; it adds its own folder);
    // -S: stdlib only, no site-packages scan (its start-up adds to every run).
    "-I",
    "-S",
    posix.join(sandbox.pythonHelpersDir, "infradev_launch.py"),
    "--nproc",
    String(opts.ranks),
    "--per-test-timeout",
    String(opts.perTestTimeoutSec),
    "--run-timeout",
    String(opts.runTimeoutSec),
    "--launcher",
    opts.launcher ?? "builtin",
    ...(opts.noContinue ? ["--no-continue"] : []),
    ...(opts.removeOutDir ? ["--remove-out-dir"] : []),
    ...(inEnv ? [] : ["--out-dir", arg, ...(opts.plugins ?? []).flatMap((p) => ["--plugin", p]), ...(opts.stopOnFail ?? []).flatMap((f) => ["--stop-on-fail", f]), "--", ...opts.pytestArgs]),
  ];

  const progress = opts.onProgress ? progressReader(opts.onProgress) : undefined;
  const exec = await sandbox.exec(argv, {
    cwd: opts.cwd ?? sandbox.repoDir,
    env: { ...opts.env, INFRADEV_BUNDLE_NONCE: nonce, ...(inEnv ? { INFRADEV_LAUNCH_SPEC_HEX: specHex } : {}) },
    // The launcher enforces the run limit itself; this outer limit only catches a wedged launcher.
    timeoutSec: opts.runTimeoutSec + 60,
    maxOutputBytes: LAUNCHER_MAX_OUTPUT_BYTES,
    signal: opts.signal,
    ...(progress ? { onOutput: (chunk: string, stream: "stdout" | "stderr") => stream === "stderr" && progress.push(chunk) } : {}),
  });
  const stderrLog = { name: "launcher.stderr", text: exec.stderr.split("\n").filter((l) => !l.startsWith(PROGRESS_PREFIX)).join("\n").slice(-65536) };

  if (exec.harnessError) {
    return { launch: null, cases: [], exec, harnessError: exec.harnessError, integrity: [], logs: [stderrLog], attachments: [], sandboxOutDir };
  }
  const read = readBundle(exec, nonce);
  if ("lost" in read) return { launch: null, cases: [], exec, lostRecords: read.lost, integrity: [], logs: [stderrLog], attachments: [], sandboxOutDir };
  const b = read.bundle;
  const launch = { ...b.launch, collected: b.collected.filter((c): c is string => typeof c === "string") } as LaunchSummary;
  const logs = [
    ...b.logs.filter((l): l is { name: string; text: string } => isObj(l) && typeof l.name === "string" && typeof l.text === "string"),
    stderrLog,
  ];
  const integrity = b.integrity.filter(isObj) as unknown as RankIntegrity[];
  const perRank: RankRecord[][] = [];
  for (let r = 0; r < opts.ranks; r++) {
    const entry = b.ranks.find((x) => isObj(x) && x.rank === r);
    perRank.push(Array.isArray(entry?.records) ? entry.records.filter(isObj) as unknown as RankRecord[] : []);
  }
  const cases = mergeRankReports(perRank, { events: launch.events, collected: launch.collected });
  // A session shorter than the launcher's poll interval may report no progress at all: the client
  // always hears the end.
  if (opts.onProgress && cases.length > 0 && progress!.last() !== cases.length) opts.onProgress(cases.length, cases.length);

  let lostRecords: string | undefined;
  if (LAUNCHER_EXIT_CODES[launch.status] !== exec.exitCode) {
    lostRecords = `the launcher exited with code ${exec.exitCode} but its bundle says ${launch.status} (code ${LAUNCHER_EXIT_CODES[launch.status]})`;
  } else if (launch.status === "launch_error") {
    lostRecords = `the launcher reported a launch error: ${String(launch.error ?? "unknown")}`;
  } else if (launch.status === "interrupted") {
    // The host did not cancel this run (exec.cancelled is false): the signal came from inside the sandbox.
    lostRecords = `the launcher was interrupted from inside the sandbox: ${launch.events.at(-1)?.detail ?? "a signal"}`;
  } else if ((b.records_dropped ?? 0) > 0) {
    // Not lost: the bundle's cap cut records; those tests count as missing on the ranks concerned.
    logs.push({ name: "bundle-notes.txt", text: `${b.records_dropped} per-rank records were left out of the bundle (over its cap)\n` });
  }
  const attachments = (Array.isArray(b.attachments) ? b.attachments : []).filter(
    (a): a is RankAttachment => isObj(a) && Number.isInteger(a.rank) && (a.rank as number) >= 0 && (a.rank as number) < opts.ranks && typeof a.name === "string" && typeof a.text === "string",
  );
  const dropped = typeof b.attachments_dropped === "number" && b.attachments_dropped > 0 ? b.attachments_dropped : 0;
  return { launch, cases, exec, ...(lostRecords ? { lostRecords } : {}), integrity, logs, attachments, ...(dropped ? { attachmentsDropped: dropped } : {}), sandboxOutDir };
}
