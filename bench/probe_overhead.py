"""Overhead of the probe library's counting wrapper on 1,000 small all_reduces, 2 gloo ranks.

    /usr/bin/python3 bench/probe_overhead.py [--calls 1000] [--reps 21] [--numel 16]

Each rank times, in the same run and interleaved (the order rotates every repetition), blocks of
`calls` all_reduces through: the original torch function (unpatched), the patched one with no
measure open, and the patched one inside `measure()`. Ratios are medians over repetitions; the
target is patched-with-measure / unpatched <= 1.05.
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SANDBOX_PY = os.path.join(os.path.dirname(HERE), "python", "sandbox")


def rank_main(args):
    sys.path.insert(0, SANDBOX_PY)
    import infradev_probe
    from infradev_probe import measure

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    patched = dist.all_reduce
    unpatched = patched.__wrapped__
    assert infradev_probe.is_patched() and unpatched is not patched
    t = torch.ones(args.numel)

    def block(fn, counted):
        dist.barrier()
        if counted:
            with measure() as m:
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    fn(t)
                elapsed = time.perf_counter() - t0
            assert m.calls["all_reduce"] == args.calls
        else:
            t0 = time.perf_counter()
            for _ in range(args.calls):
                fn(t)
            elapsed = time.perf_counter() - t0
        return elapsed

    arms = [("unpatched", unpatched, False), ("patched_idle", patched, False), ("patched_measuring", patched, True)]
    for arm in arms:  # warm-up
        block(arm[1], arm[2])
    times = {name: [] for name, _, _ in arms}
    for rep in range(args.reps):
        order = arms[rep % 3:] + arms[:rep % 3]
        for name, fn, counted in order:
            times[name].append(block(fn, counted))
    # Rank 0 reports the max over ranks of each block (a collective is as slow as its slowest rank).
    table = torch.tensor([times[name] for name, _, _ in arms], dtype=torch.float64)
    dist.all_reduce(table, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        med = {name: statistics.median(table[i].tolist()) for i, (name, _, _) in enumerate(arms)}
        paired = [table[2][j].item() / table[0][j].item() for j in range(args.reps)]
        print("probe overhead: %d all_reduce of %d float32 on %d gloo ranks, %d interleaved reps (torch %s)"
              % (args.calls, args.numel, dist.get_world_size(), args.reps, torch.__version__))
        for name in med:
            print("  %-18s median %.4f s per block (%.1f us per call)" % (name, med[name], 1e6 * med[name] / args.calls))
        print("  ratio patched_idle / unpatched       = %.3f" % (med["patched_idle"] / med["unpatched"]))
        print("  ratio patched_measuring / unpatched  = %.3f   (target <= 1.05)" % (med["patched_measuring"] / med["unpatched"]))
        print("  median of per-rep paired ratios      = %.3f" % statistics.median(paired))
        wrapper_cost(t, med["unpatched"] / args.calls)
    dist.destroy_process_group()


def wrapper_cost(t, unpatched_call_s, n=200000):
    """The wrapper alone, around a no-op: its absolute cost per call, free of the network's noise."""
    from infradev_probe import _collectives, measure

    def noop(tensor, op=None, group=None, async_op=False):
        return None

    wrapped = _collectives._make_wrapper(noop, "all_reduce")

    def loop(fn):
        t0 = time.perf_counter()
        for _ in range(n):
            fn(t)
        return (time.perf_counter() - t0) / n

    raw, idle, counting = [], [], []
    for _ in range(7):
        raw.append(loop(noop))
        idle.append(loop(wrapped))
        with measure():
            counting.append(loop(wrapped))
    extra = statistics.median(counting) - statistics.median(raw)
    print("  wrapper alone: +%.2f us per call measuring, +%.2f us idle (median of 7 x %d calls)"
          % (1e6 * extra, 1e6 * (statistics.median(idle) - statistics.median(raw)), n))
    print("  => bound from the wrapper's own cost: %.4f x of this run's unpatched all_reduce (%.1f us)"
          % (1 + extra / unpatched_call_s, 1e6 * unpatched_call_s))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--numel", type=int, default=16)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rank-main", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_main:
        return rank_main(args)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(args.nproc), OMP_NUM_THREADS="1")
    procs = [
        subprocess.Popen([sys.executable, __file__, "--rank-main"] + sys.argv[1:], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)))
        for r in range(args.nproc)
    ]
    return max(p.wait() for p in procs)


if __name__ == "__main__":
    sys.exit(main())
