import { posix } from "node:path";
import type { Sandbox } from "../../sandbox/types.js";

/**
 * measure's `command` form: one shell command started on N ranks (RANK / WORLD_SIZE / MASTER_* set
 * as a launcher would) inside one sandbox exec, every Python process of it running under the probe
 * library. The driver is python/sandbox/infradev_measure.py (its docstring says how); this side
 * starts it and reads its one JSON line.
 */

export interface CommandRank {
  rank: number;
  exit_code: number | null;
  /** The command's wall time on this rank (process start to exit, interpreter start-up included). */
  wall_time_s: number | null;
  peak_memory_bytes: number | null;
  memory_kind: string | null;
  calls: Record<string, number>;
  bytes: Record<string, number>;
  /** Python processes that reported (0: the command ran no Python, or it died before exit handlers). */
  processes: number;
  log_tail: string;
  probe_errors: string[];
}

export interface CommandMeasurement {
  ranks: CommandRank[];
  timed_out: boolean;
}

const MARK = "@@infradev-measure@@";

export async function measureCommand(
  sandbox: Sandbox,
  opts: { command: string; ranks: number; checkoutDir: string; timeoutSec: number; env: Record<string, string>; port: number; signal?: AbortSignal },
): Promise<CommandMeasurement | { error: string }> {
  const argv = [
    sandbox.python,
    posix.join(sandbox.pythonHelpersDir, "infradev_measure.py"),
    opts.command,
    String(opts.ranks),
    sandbox.pythonHelpersDir,
    String(opts.timeoutSec),
    String(opts.port),
    opts.checkoutDir,
  ];
  const res = await sandbox.exec(argv, {
    cwd: opts.checkoutDir,
    env: { ...opts.env, INFRADEV_WORKSPACE: sandbox.repoDir },
    timeoutSec: opts.timeoutSec + 60,
    maxOutputBytes: 4 * 1024 * 1024,
    signal: opts.signal,
  });
  if (res.harnessError) return { error: `the sandbox failed: ${res.harnessError}` };
  const at = res.stdout.lastIndexOf(MARK);
  if (at < 0) {
    const why = res.timedOut ? "timed out" : res.cancelled ? "cancelled" : `exit ${res.exitCode}`;
    return { error: `the measurement driver produced no result (${why}): ${res.stderr.trim().split("\n").slice(-4).join(" | ")}` };
  }
  try {
    return JSON.parse(res.stdout.slice(at + MARK.length).split("\n")[0]!) as CommandMeasurement;
  } catch (e) {
    return { error: `the measurement driver's result is not JSON: ${(e as Error).message}` };
  }
}
