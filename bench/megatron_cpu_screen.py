#!/usr/bin/env python3
"""A CPU screen of megatron-param-layout's mutants for task authors, without a GPU.

NOT the task check and not a grade: Megatron-LM runs here on Debian's torch 1.13 CPU through the
stand-in in bench/megatron_cpu/sitecustomize.py (mocked CUDA, gloo groups). It answers one
question cheaply: which mutants of the golden patch do the official tests and the probes kill, so
that survivors get probes before the H200 check (`task check megatron-param-layout`, which is the
only verdict that counts: bench/gpu_check_megatron.sh).

  /usr/bin/python3 bench/megatron_cpu_screen.py --bundle B --out DIR [--jobs N] [--only ID,ID] [--limit N]

Steps: a shallow repository from the bundle (tags base, merge); the golden tree (merge's code
outside tests/ is base + the golden patch; its tests/ are the post-PR tests) with the probes in
px/; mutants from python/host/infradev_mutate.py (the ids `task check` uses); golden once, and
every case golden fails on CPU deselected (gloo lacks reduce-scatter, AVG); then each mutant's file
written into a worker's copy of the tree and `pytest -x <official> px` run: killed by the official
tests, only by the probes, or survived. Resumable (DIR/screen.jsonl); DIR/summary.json at the end,
with hidden/mutants.yaml's ids taken as equivalent. Standard library only.
"""

import argparse
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TASK = os.path.join(ROOT, "tasks", "megatron-param-layout")
BASE = "40627d00d96cef74aceab35e0e3c170e900f3aff"
OFFICIAL = ["tests/unit_tests/distributed/test_param_layout.py", "tests/unit_tests/distributed/test_param_and_grad_buffer.py"]
DESELECT = ["--deselect", "tests/unit_tests/distributed/test_param_and_grad_buffer.py::test_grad_sync[2-"]
PY = "/usr/bin/python3"


def sh(*argv, cwd=None):
    subprocess.run(argv, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(pyc):
    # Megatron's test utilities rendezvous on MASTER_PORT (6000 unless set): one port per run, so
    # that workers (and anything else on the machine) never share one.
    return dict(os.environ, CPUSHIM_CUDA="1", PYTORCH_JIT="0", PYTHONPATH=os.path.join(HERE, "megatron_cpu"), PYTHONPYCACHEPREFIX=pyc,
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="1", RANK="0", LOCAL_RANK="0")


def pytest(tree, pyc, args, timeout):
    argv = [PY, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=", "-W", "ignore", *DESELECT, *args]
    t0 = time.time()
    try:
        p = subprocess.run(argv, cwd=tree, env=env_for(pyc), capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, time.time() - t0
    except subprocess.TimeoutExpired:
        return "timeout", "", time.time() - t0


def failing(text):
    return sorted({line.split()[1] for line in text.splitlines() if line.startswith(("FAILED ", "ERROR "))})


def drop_pyc(pyc, path):
    d, f = os.path.split(os.path.abspath(path))
    for c in glob.glob(pyc + d + "/" + f[:-3] + ".*.pyc"):
        os.unlink(c)


def prepare(bundle, work):
    repo, golden, base = (os.path.join(work, n) for n in ("repo", "golden", "base"))
    if not os.path.isdir(repo):
        sh("git", "init", "-q", repo)
        with open(os.path.join(repo, ".git", "shallow"), "w") as f:
            f.write(BASE + "\n")
        sh("git", "fetch", "-q", os.path.abspath(bundle), "refs/tags/*:refs/tags/*", cwd=repo)
    for tree, rev in ((golden, "merge"), (base, "base")):
        if not os.path.isdir(tree):
            sh("git", "worktree", "add", "-q", "--detach", tree, rev, cwd=repo)
    px = os.path.join(golden, "px")
    shutil.rmtree(px, ignore_errors=True)
    shutil.copytree(os.path.join(TASK, "hidden", "probes"), px)
    return golden, base


def equivalent_ids():
    import yaml  # Debian's python3-yaml, beside python3-torch; the task's own file format

    path = os.path.join(TASK, "hidden", "mutants.yaml")
    if not os.path.exists(path):
        return set()
    return {e["id"] for e in (yaml.safe_load(open(path)) or {}).get("equivalent", [])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundle", required=True, help="tasks/megatron-param-layout/README.md names it")
    ap.add_argument("--out", required=True, help="work and result folder (resumable)")
    ap.add_argument("--jobs", type=int, default=1, help="worker trees at once (default 1)")
    ap.add_argument("--only", default="", help="comma-separated mutant ids")
    ap.add_argument("--limit", type=int, default=0, help="at most this many mutants (0: all)")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per mutant")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    golden, base = prepare(a.bundle, a.out)
    mfile = os.path.join(a.out, "mutants.json")
    if not os.path.exists(mfile):
        p = subprocess.run([PY, os.path.join(ROOT, "python", "host", "infradev_mutate.py"), "mutants", "--base", base, "--post", golden,
                            "--exclude-dir", "tests", "--exclude-dir", "px"], capture_output=True, text=True, check=True)
        open(mfile, "w").write(p.stdout)
    mutants = json.load(open(mfile))["mutants"]
    only = set(filter(None, a.only.split(",")))
    todo = [m for m in mutants if not only or m["id"] in only][: a.limit or None]
    rc, out, dt = pytest(golden, os.path.join(a.out, "pyc-gold"), OFFICIAL + ["px"], 900)
    gold_fail = failing(out)
    summary_line = (out.strip().splitlines() or ["?"])[-1]
    print(f"golden on CPU: {summary_line} in {dt:.0f} s; {len(gold_fail)} case(s) golden fails here are left out", flush=True)
    desel = [x for f in gold_fail for x in ("--deselect", f)]
    results_path = os.path.join(a.out, "screen.jsonl")
    done = {}
    if os.path.exists(results_path):
        for line in open(results_path):
            r = json.loads(line)
            done[r["id"]] = r
    pending = [m for m in todo if m["id"] not in done]
    lock = threading.Lock()
    fo = open(results_path, "a")

    def worker(k):
        tree = os.path.join(a.out, f"w{k}")
        pyc = os.path.join(a.out, f"pyc-w{k}")
        if not os.path.isdir(tree):
            shutil.copytree(golden, tree, symlinks=True, ignore=shutil.ignore_patterns(".git", "__pycache__"))
        shutil.rmtree(os.path.join(tree, "px"), ignore_errors=True)
        shutil.copytree(os.path.join(golden, "px"), os.path.join(tree, "px"))
        while True:
            with lock:
                if not pending:
                    return
                m = pending.pop(0)
            path = os.path.join(tree, m["file"])
            orig = open(path).read()
            try:
                os.unlink(path)
                open(path, "w").write(m["source"])
                drop_pyc(pyc, path)
                rc, out, dt = pytest(tree, pyc, desel + ["-x", *OFFICIAL, "px"], a.timeout)
            finally:
                os.unlink(path)
                open(path, "w").write(orig)
                drop_pyc(pyc, path)
            fails = failing(out)
            if rc == 0:
                verdict = "survived"
            elif rc == "timeout":
                verdict = "killed_official_timeout"
            elif not fails or any(f.startswith("tests/") for f in fails):
                verdict = "killed_official"
            else:
                verdict = "killed_probes"
            r = {"id": m["id"], "verdict": verdict, "fails": fails[:3], "s": round(dt, 1)}
            with lock:
                fo.write(json.dumps(r) + "\n")
                fo.flush()
                done[m["id"]] = r
                print(f"[{len(done)}/{len(todo)}] {verdict:16s} {m['id']} ({dt:.0f} s)", flush=True)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(max(1, a.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    equiv = equivalent_ids()
    rows = [done[m["id"]] for m in todo if m["id"] in done]
    counts = {}
    for r in rows:
        v = "equivalent" if (r["verdict"] == "survived" and r["id"] in equiv) else r["verdict"]
        counts[v] = counts.get(v, 0) + 1
    killed = sum(n for v, n in counts.items() if v.startswith("killed"))
    graded = len(rows) - counts.get("equivalent", 0)
    summary = {
        "what": "CPU screen (stand-in: bench/megatron_cpu/sitecustomize.py), not the H200 task check",
        "golden_on_cpu": summary_line, "left_out_cases": gold_fail,
        "mutants": len(todo), "screened": len(rows), "counts": counts,
        "score": round(killed / graded, 4) if graded else None,
        "survivors": sorted(r["id"] for r in rows if r["verdict"] == "survived" and r["id"] not in equiv),
    }
    json.dump(summary, open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    print(json.dumps({k: summary[k] for k in ("screened", "counts", "score", "survivors")}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
