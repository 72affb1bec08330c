"""Wall time of a session of one trivial test through the launcher vs the same ranks started by hand.

    /usr/bin/python3 bench/launcher_overhead.py [--reps 9] [--nprocs 2,4] [--torch]

Arms, interleaved (the order rotates every repetition), medians over repetitions:
  launcher  python -I -S infradev_launch.py --nproc N --out-dir D -- -q test_trivial.py (as runRanks runs it)
  by_hand   the launcher's own rank command (python -m pytest -p infradev_probe.plugin ...), N
            processes started here with bare env vars (RANK, WORLD_SIZE, MASTER_*, INFRADEV_OUT_DIR),
            each in its own session like the launcher's ranks, waited for
  bare      plain `python -m pytest -q test_trivial.py` on N processes (no plugin), for reference
Target: launcher / by_hand <= 1.15. --torch makes the trivial test import torch (a realistic rank).
"""

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANDBOX_PY = os.path.join(ROOT, "python", "sandbox")
sys.path.insert(0, SANDBOX_PY)

from infradev_outputs import PYTEST_PREFIX  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_launcher(work, nproc, out):
    # -I -S as runRanks starts it (sandbox/ranks.ts): the launcher needs no site-packages.
    cmd = [sys.executable, "-I", "-S", os.path.join(SANDBOX_PY, "infradev_launch.py"), "--nproc", str(nproc), "--out-dir", out, "--", "-q", "test_trivial.py"]
    t0 = time.perf_counter()
    code = subprocess.run(cmd, cwd=work, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    elapsed = time.perf_counter() - t0
    assert code == 0, "launcher failed (%d): see %s" % (code, out)
    return elapsed


def run_by_hand(work, nproc, out, with_plugin):
    os.makedirs(out, exist_ok=True)
    port = str(free_port())
    cmd = [sys.executable] + (PYTEST_PREFIX if with_plugin else ["-m", "pytest"]) + ["-q", "test_trivial.py"]
    base = dict(os.environ, WORLD_SIZE=str(nproc), LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                PYTHONPATH=SANDBOX_PY, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if with_plugin:
        base["INFRADEV_OUT_DIR"] = out
    t0 = time.perf_counter()
    procs = []
    for r in range(nproc):
        log = open(os.path.join(out, "hand%d.log" % r), "wb")
        # A session per rank, as the launcher does: with the kernel's autogroup scheduling a new
        # session gets its own CPU share, which on a busy machine changes times by up to 2x.
        procs.append(subprocess.Popen(cmd, cwd=work, env=dict(base, RANK=str(r), LOCAL_RANK=str(r)), stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    codes = [p.wait() for p in procs]
    elapsed = time.perf_counter() - t0
    assert codes == [0] * nproc, codes
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--nprocs", default="2,4")
    parser.add_argument("--torch", action="store_true", help="the trivial test imports torch")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="infradev-bench-")
    body = "import torch\n\n" if args.torch else ""
    with open(os.path.join(work, "test_trivial.py"), "w") as f:
        f.write(body + "def test_trivial():\n    assert 1 + 1 == 2\n")
    print("launcher overhead: one trivial test%s, %d interleaved reps, %d CPUs, load average %s"
          % (" importing torch" if args.torch else "", args.reps, os.cpu_count(), " ".join("%.1f" % x for x in os.getloadavg())))
    try:
        for nproc in [int(n) for n in args.nprocs.split(",")]:
            arms = [
                ("launcher", lambda i: run_launcher(work, nproc, os.path.join(work, "l%d_%d" % (nproc, i)))),
                ("by_hand", lambda i: run_by_hand(work, nproc, os.path.join(work, "h%d_%d" % (nproc, i)), True)),
                ("bare", lambda i: run_by_hand(work, nproc, os.path.join(work, "b%d_%d" % (nproc, i)), False)),
            ]
            for _name, fn in arms:  # warm-up (page cache, pyc files)
                fn(-1)
            times = {name: [] for name, _ in arms}
            for rep in range(args.reps):
                for name, fn in arms[rep % 3:] + arms[:rep % 3]:
                    times[name].append(fn(rep))
            med = {name: statistics.median(ts) for name, ts in times.items()}
            paired = statistics.median(l / h for l, h in zip(times["launcher"], times["by_hand"]))
            print("  %d ranks: launcher %.3f s, by_hand %.3f s, bare pytest %.3f s (medians)" % (nproc, med["launcher"], med["by_hand"], med["bare"]))
            print("  %d ranks: ratio launcher / by_hand = %.3f (target <= 1.15); median paired ratio %.3f; by_hand / bare = %.3f"
                  % (nproc, med["launcher"] / med["by_hand"], paired, med["by_hand"] / med["bare"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
