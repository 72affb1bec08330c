import type { Sandbox } from "../../sandbox/types.js";

/**
 * measure's `command` form: one shell command started on N ranks (RANK / WORLD_SIZE / MASTER_* set
 * as a launcher would) inside one sandbox exec, every Python process of it running under the probe
 * library. A generated `sitecustomize.py` (on PYTHONPATH, in a private temp dir) opens
 * `infradev_probe.measure()` at interpreter start and writes the figures at exit, one file per
 * process; the driver sums a rank's processes and prints one JSON line. Ranks share the sandbox's
 * network namespace, so they rendezvous over its loopback.
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

const SITECUSTOMIZE = String.raw`
import os as _infradev_os
_infradev_out = _infradev_os.environ.get("INFRADEV_MEASURE_OUT")
if _infradev_out:
    def _infradev_measure(out):
        import atexit, json, os
        os.makedirs(out, exist_ok=True)
        try:
            from infradev_probe import measure
            m = measure()
            m.__enter__()
        except Exception as e:
            with open(os.path.join(out, "%d.err" % os.getpid()), "w") as f:
                f.write("%s: %s" % (type(e).__name__, e))
            return
        def done():
            try:
                m.__exit__(None, None, None)
            except Exception as e:
                with open(os.path.join(out, "%d.err" % os.getpid()), "w") as f:
                    f.write("%s: %s" % (type(e).__name__, e))
            with open(os.path.join(out, "%d.json" % os.getpid()), "w") as f:
                json.dump(m.as_dict(), f)
        # Registered first, so it runs last: after torch's own exit handlers.
        atexit.register(done)
    _infradev_measure(_infradev_out)
`;

const DRIVER = String.raw`
import json, os, shutil, signal, subprocess, sys, tempfile, time
cmd, n, helpers, timeout, port, checkout, site_src = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6], sys.argv[7]
site = tempfile.mkdtemp(prefix="infradev-measure-")
with open(os.path.join(site, "sitecustomize.py"), "w") as f:
    f.write(site_src)
# "python" and "python3" in the command mean this interpreter (the task's), whatever else is on PATH.
bindir = os.path.join(site, "bin")
os.mkdir(bindir)
for name in ("python", "python3"):
    os.symlink(sys.executable, os.path.join(bindir, name))
pp = [site, checkout, helpers] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
procs, logs, t0 = [], [], []
for r in range(n):
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"), PYTHONPATH=os.pathsep.join(pp), PYTHONSAFEPATH="1", PYTHONDONTWRITEBYTECODE="1",
               RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
               MASTER_ADDR="127.0.0.1", MASTER_PORT=port, INFRADEV_MEASURE_OUT=os.path.join(site, "rank%d" % r))
    log = open(os.path.join(site, "rank%d.log" % r), "w+b")
    t0.append(time.monotonic())
    procs.append(subprocess.Popen(["bash", "-c", cmd], cwd=checkout, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    logs.append(log)
codes, walls = [None] * n, [None] * n
deadline = time.monotonic() + timeout
first_failure, timed_out = None, False
def kill_all():
    for r, p in enumerate(procs):
        if codes[r] is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
while any(c is None for c in codes):
    for r, p in enumerate(procs):
        if codes[r] is None and p.poll() is not None:
            codes[r], walls[r] = p.returncode, time.monotonic() - t0[r]
            if p.returncode != 0 and first_failure is None:
                first_failure = time.monotonic()
    now = time.monotonic()
    if now > deadline:
        timed_out = True
        kill_all()
        break
    # The peers of a rank that died wait in a collective forever: give them a grace period.
    if first_failure is not None and now - first_failure > 15:
        kill_all()
        break
    time.sleep(0.02)
for r, p in enumerate(procs):
    p.wait()
    if codes[r] is None:
        codes[r] = p.returncode
ranks = []
for r in range(n):
    d = os.path.join(site, "rank%d" % r)
    calls, nbytes, peak, kind, procs_seen, errors = {}, {}, None, None, 0, []
    for name in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        path = os.path.join(d, name)
        if name.endswith(".err"):
            errors.append(open(path).read()[:500])
            continue
        try:
            m = json.load(open(path))
        except ValueError:
            continue
        procs_seen += 1
        for op, c in (m.get("calls") or {}).items():
            calls[op] = calls.get(op, 0) + c
        for op, b in (m.get("bytes") or {}).items():
            nbytes[op] = nbytes.get(op, 0) + b
        if m.get("peak_memory_bytes") is not None:
            peak = max(peak or 0, m["peak_memory_bytes"])
            kind = kind or m.get("memory_kind")
    logs[r].seek(0, 2)
    size = logs[r].tell()
    logs[r].seek(max(0, size - 3000))
    tail = logs[r].read().decode("utf-8", "replace")
    ranks.append({"rank": r, "exit_code": codes[r] if codes[r] is None or codes[r] >= 0 else None,
                  "wall_time_s": walls[r], "peak_memory_bytes": peak, "memory_kind": kind,
                  "calls": calls, "bytes": nbytes, "processes": procs_seen, "log_tail": tail, "probe_errors": errors})
shutil.rmtree(site, ignore_errors=True)
sys.stdout.write("\n@@infradev-measure@@" + json.dumps({"ranks": ranks, "timed_out": timed_out}) + "\n")
`;

const MARK = "@@infradev-measure@@";

export async function measureCommand(
  sandbox: Sandbox,
  opts: { command: string; ranks: number; checkoutDir: string; timeoutSec: number; env: Record<string, string>; port: number; signal?: AbortSignal },
): Promise<CommandMeasurement | { error: string }> {
  const argv = [
    sandbox.python,
    "-c",
    DRIVER,
    opts.command,
    String(opts.ranks),
    sandbox.pythonHelpersDir,
    String(opts.timeoutSec),
    String(opts.port),
    opts.checkoutDir,
    SITECUSTOMIZE,
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
