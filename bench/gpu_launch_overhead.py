"""Launch overhead of the rank launcher against plain torchrun, 1 rank over NCCL.

    python bench/gpu_launch_overhead.py --out OUT/launch.json [--repeats 3]

Runs bench/gpu_nccl_smoke.py (one NCCL test) three ways, interleaved, and reports the median wall
time of each and the ratios: plain `torchrun -m pytest`, `infradev_launch.py --launcher torchrun`,
`infradev_launch.py --launcher builtin`. The launcher's runs also say which launcher really ran
(torchrun falls back to builtin where torchrun is broken) and the merged outcome.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELPERS = os.path.join(ROOT, "python", "sandbox")
SMOKE = os.path.join(ROOT, "bench", "gpu_nccl_smoke.py")
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def run(argv, env):
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--nproc", type=int, default=1)
    args = parser.parse_args()
    env = dict(os.environ, **MULTICAST_OFF)
    env["PYTHONPATH"] = HELPERS + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    py = sys.executable
    scratch = tempfile.mkdtemp(prefix="launch-overhead-")
    ways = {
        "plain torchrun": lambda i: [py, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
                                     "--nproc_per_node", str(args.nproc), "-m", "pytest", "-q", "-p", "no:cacheprovider", SMOKE],
        "launcher --launcher torchrun": lambda i: [py, os.path.join(HELPERS, "infradev_launch.py"), "--nproc", str(args.nproc),
                                                   "--out-dir", os.path.join(scratch, "torchrun-%d" % i), "--launcher", "torchrun",
                                                   "--", SMOKE, "-p", "no:cacheprovider"],
        "launcher --launcher builtin": lambda i: [py, os.path.join(HELPERS, "infradev_launch.py"), "--nproc", str(args.nproc),
                                                  "--out-dir", os.path.join(scratch, "builtin-%d" % i), "--launcher", "builtin",
                                                  "--", SMOKE, "-p", "no:cacheprovider"],
    }
    times = {k: [] for k in ways}
    details = {k: [] for k in ways}
    run([py, "-c", "import torch; torch.cuda.init()"], env)  # warm the page cache once, for every way alike
    for i in range(args.repeats):
        for name, argv in ways.items():
            seconds, proc = run(argv(i), env)
            times[name].append(seconds)
            info = {"rc": proc.returncode, "seconds": round(seconds, 3)}
            if name.startswith("launcher"):
                launch_json = os.path.join(scratch, ("torchrun-%d" if "torchrun" in name else "builtin-%d") % i, "launch.json")
                if os.path.exists(launch_json):
                    launch = json.load(open(launch_json))
                    info.update({"status": launch["status"], "launcher_used": launch["launcher"],
                                 "summary": launch["summary"], "notes": launch.get("notes", [])})
            if proc.returncode != 0:
                info["tail"] = (proc.stdout + proc.stderr)[-800:]
            details[name].append(info)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["plain torchrun"]
    report = {"nproc": args.nproc, "repeats": args.repeats,
              "median_s": {k: round(v, 3) for k, v in med.items()},
              "ratio_to_plain_torchrun": {k: round(v / base, 3) for k, v in med.items()},
              "runs": details}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print("launch overhead, %d rank(s) over NCCL, bench/gpu_nccl_smoke.py, median of %d:" % (args.nproc, args.repeats))
    for name in ways:
        last = details[name][-1]
        print("  %-30s %6.2f s  x%.3f  rc=%s %s" % (name, med[name], med[name] / base, last["rc"],
                                                   "status=%s launcher_used=%s %s" % (last.get("status"), last.get("launcher_used"), last.get("summary", ""))
                                                   if name.startswith("launcher") else ""))
        if last["rc"] != 0:
            print("    tail: " + last.get("tail", "").replace("\n", "\n    "))


if __name__ == "__main__":
    main()
