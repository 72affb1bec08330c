"""measure's `command` form, inside the sandbox: one shell command started on N ranks (RANK /
WORLD_SIZE / MASTER_* set as a launcher would), every Python process of it under the probe library.

    python infradev_measure.py CMD N HELPERS TIMEOUT_S PORT CHECKOUT

infradev_measure_site.py, written as `sitecustomize.py` into a private temp dir on PYTHONPATH, opens
`infradev_probe.measure()` at interpreter start and writes the figures at exit, one file per
process; this driver sums a rank's processes and prints one JSON line after a marker
(src/tools/support/measure-command.ts reads it). Ranks share the sandbox's network namespace, so
they rendezvous over its loopback. Stdlib only.
"""
import json, os, shutil, signal, subprocess, sys, tempfile, time
cmd, n, helpers, timeout, port, checkout = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), sys.argv[5], sys.argv[6]
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "infradev_measure_site.py")) as f:
    site_src = f.read()
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
