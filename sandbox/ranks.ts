import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join, posix } from "node:path";
import { readJsonFile } from "../lib/json.js";
import { parseJUnit, type JUnitCase } from "./junit.js";
import { type LaunchEvent, type MergedCase, type ProbeMarker, type RankResources, mergeRankReports } from "./merge.js";
import type { ExecResult, Sandbox } from "./types.js";

/** launch.json, as the Python rank launcher writes it (sandbox/python/README.md). */
export interface LaunchSummary {
  launcher: string;
  nproc: number;
  status: "ok" | "tests_failed" | "hang" | "crash" | "run_timeout" | "interrupted" | "launch_error";
  exit_codes: Array<number | null>;
  duration_s: number;
  restarts: number;
  events: LaunchEvent[];
  collected: string[];
  collection_errors: unknown[];
  [extra: string]: unknown;
}

export interface RunRanksOptions {
  ranks: number;
  /** pytest arguments (paths, -k, ...), relative to cwd inside the sandbox. */
  pytestArgs: string[];
  /** Folder for per-rank results, relative to the sandbox's repoDir (e.g. ".infradev/results/<id>"). */
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
  signal?: AbortSignal;
  /** Called as tests finish on rank 0 (done / total collected). */
  onProgress?: (done: number, total: number) => void;
}

export interface RunRanksResult {
  /** null when the launcher never wrote launch.json (it could not start: a harness fault). */
  launch: LaunchSummary | null;
  cases: MergedCase[];
  /** Host folder with rank{r}.xml / .log / .probe.json / launch.json. */
  hostOutDir: string;
  exec: ExecResult;
  /** Set when the launcher or sandbox itself failed rather than the tests. */
  harnessError?: string;
}

type ProbeJson = { tests?: Record<string, RankResources & { markers?: { probe?: ProbeMarker } }> };

/** Distinct tests finished on a rank (results.jsonl is appended across restarts). */
function countFinished(file: string): number {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch {
    return 0;
  }
  const ids = new Set<string>();
  for (const line of text.split("\n")) {
    const m = /"nodeid":\s*"((?:[^"\\]|\\.)*)"/.exec(line);
    if (m) ids.add(m[1]!);
  }
  return ids.size;
}

/**
 * Per-test resources of one rank: results.jsonl is appended test by test, so it survives a rank that
 * was killed mid-session (probe.json is only written at a clean session end).
 */
function readRankResources(hostOutDir: string, rank: number): NonNullable<ProbeJson["tests"]> {
  const out: NonNullable<ProbeJson["tests"]> = { ...(readJsonFile<ProbeJson>(join(hostOutDir, `rank${rank}.probe.json`))?.tests ?? {}) };
  let text = "";
  try {
    text = readFileSync(join(hostOutDir, `rank${rank}.results.jsonl`), "utf8");
  } catch {
    return out;
  }
  for (const line of text.split("\n")) {
    if (!line.trim()) continue;
    try {
      const rec = JSON.parse(line) as RankResources & { nodeid?: string; markers?: { probe?: ProbeMarker } };
      if (rec.nodeid) out[rec.nodeid] = rec;
    } catch {
      // a line cut by a kill mid-write
    }
  }
  return out;
}

/**
 * Runs one pytest session on N ranks through the Python launcher inside the given sandbox, then
 * reads every rank's JUnit and probe JSON from the host side and merges them per test id.
 */
export async function runRanks(sandbox: Sandbox, opts: RunRanksOptions): Promise<RunRanksResult> {
  if (!Number.isInteger(opts.ranks) || opts.ranks < 1) throw new Error(`runRanks: ranks must be an integer ≥ 1 (got ${opts.ranks})`);
  const outDirSandbox = posix.join(sandbox.repoDir, opts.outDir);
  const hostOutDir = sandbox.toHostPath(outDirSandbox);
  mkdirSync(hostOutDir, { recursive: true });
  const argv = [
    sandbox.python,
    "-S", // the launcher is stdlib only: no site-packages scan (its start-up adds to every run)
    posix.join(sandbox.pythonHelpersDir, "infradev_launch.py"),
    "--nproc",
    String(opts.ranks),
    "--out-dir",
    outDirSandbox,
    "--per-test-timeout",
    String(opts.perTestTimeoutSec),
    "--run-timeout",
    String(opts.runTimeoutSec),
    "--launcher",
    opts.launcher ?? "builtin",
    ...(opts.noContinue ? ["--no-continue"] : []),
    "--",
    ...opts.pytestArgs,
  ];

  let timer: NodeJS.Timeout | undefined;
  let last = -1;
  if (opts.onProgress) {
    // After a hang the launcher restarts the ranks on the remaining tests and rank0.collected.json is
    // rewritten with fewer ids: the first (largest) count is the session's total.
    let total = 0;
    timer = setInterval(() => {
      const collected = readJsonFile<{ ids?: string[] }>(join(hostOutDir, "rank0.collected.json"));
      total = Math.max(total, collected?.ids?.length ?? 0);
      const done = Math.min(total, countFinished(join(hostOutDir, "rank0.results.jsonl")));
      if (done !== last && total > 0) {
        last = done;
        opts.onProgress!(done, total);
      }
    }, 500);
  }
  let exec: ExecResult;
  try {
    exec = await sandbox.exec(argv, {
      cwd: opts.cwd ?? sandbox.repoDir,
      env: opts.env,
      // The launcher enforces the run limit itself; this outer limit only catches a wedged launcher.
      timeoutSec: opts.runTimeoutSec + 60,
      signal: opts.signal,
    });
  } finally {
    if (timer) clearInterval(timer);
  }

  const launch = readJsonFile<LaunchSummary>(join(hostOutDir, "launch.json"));
  if (exec.harnessError || !launch || launch.status === "launch_error") {
    const why = exec.harnessError ?? (launch ? `launcher: ${String(launch.error ?? "launch error")}` : `launcher wrote no launch.json (exit ${exec.exitCode}${exec.timedOut ? ", timed out" : ""}): ${exec.stderr.trim().split("\n").slice(-3).join(" | ")}`);
    return { launch, cases: [], hostOutDir, exec, harnessError: why };
  }
  const perRank: JUnitCase[][] = [];
  const resources: NonNullable<ProbeJson["tests"]>[] = [];
  for (let r = 0; r < opts.ranks; r++) {
    const xml = join(hostOutDir, `rank${r}.xml`);
    perRank.push(existsSync(xml) ? parseJUnit(readFileSync(xml, "utf8")) : []);
    resources.push(readRankResources(hostOutDir, r));
  }
  const cases = mergeRankReports(perRank, { events: launch.events, resources, collected: launch.collected });
  // A session shorter than the poll interval would otherwise report no progress at all: the
  // client always hears the end.
  if (opts.onProgress && cases.length > 0 && last !== cases.length) opts.onProgress(cases.length, cases.length);
  return { launch, cases, hostOutDir, exec };
}
