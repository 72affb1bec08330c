#!/usr/bin/env python3
"""A stand-in interpreter for testing the launcher's torchrun path where torchrun itself is broken
(Debian's torch 1.13 on Python 3.11). `fake_torchrun_python.py -m torch.distributed.run ARGS` does
what torchrun does for one node: starts --nproc_per_node workers with RANK / LOCAL_RANK /
WORLD_SIZE / MASTER_* set, and when one fails, terminates the others. Anything else runs the real
interpreter: $INFRADEV_REAL_PYTHON (the shebang's python may lack torch)."""

import argparse
import os
import signal
import subprocess
import sys
import time

REAL = os.environ.get("INFRADEV_REAL_PYTHON", sys.executable)


def fake_torchrun(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--nnodes")
    parser.add_argument("--nproc_per_node", type=int)
    parser.add_argument("--max_restarts")
    parser.add_argument("--master_addr")
    parser.add_argument("--master_port")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    a = parser.parse_args(argv)
    n = a.nproc_per_node
    workers = []
    for rank in range(n):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR=a.master_addr, MASTER_PORT=a.master_port)
        workers.append(subprocess.Popen([REAL, a.script] + a.args, env=env))

    def stop(signum, _frame):
        for w in workers:
            if w.poll() is None:
                w.terminate()

    signal.signal(signal.SIGTERM, stop)
    while True:
        codes = [w.poll() for w in workers]
        if all(c is not None for c in codes):
            return max(abs(c) for c in codes)
        if any(c not in (None, 0) for c in codes):
            time.sleep(0.5)  # torchrun's monitor interval, roughly
            stop(signal.SIGTERM, None)
        time.sleep(0.05)


if __name__ == "__main__":
    if sys.argv[1:3] == ["-m", "torch.distributed.run"]:
        sys.exit(fake_torchrun(sys.argv[3:]))
    os.execv(REAL, [REAL] + sys.argv[1:])
