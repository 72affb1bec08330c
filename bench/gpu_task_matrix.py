"""A task's acceptance matrix through the rank launcher: every variant x every mode, official tests + probes.

    python bench/gpu_task_matrix.py --task tasks/cuda-graph-decode --out OUT [--jobs N] [--env K=V ...]
        [--variants golden,base,...] [--launcher builtin|torchrun] [--ranks N]
        [--probes DIR] [--wrong-dir DIR]

Variants: golden, hollow, base (no patch), every adversarial patch of hidden/adversarial/index.yaml,
every alternative-correct patch of hidden/alternatives/index.yaml, and with --wrong-dir every *.patch
there (a held-out set of wrong patches kept outside the repository).
Each gets a fresh copy of the pre-PR snapshot, its patch (git apply, else patch -p1), the post-PR
tests in place of test_dirs and the probes as infradev_probes/, then one launcher session per mode
with both suites. Prints one row per (variant, mode) and checks what the task claims:

- golden passes every official test and every probe in every mode;
- each adversarial patch passes every official test in every mode, and fails at least one probe
  tagged with each promise it says it breaks (in some mode); the modes where it fails are listed;
- base and hollow fail something;
- each alternative passes everything in every mode, like golden (a failing probe is over-strict);
- each held-out wrong patch passes every official test in every mode and fails some probe.

--probes runs another probe folder in place of hidden/probes (e.g. an older one, to measure before/after).

This is the grader's job done without Node (the device machine may have none); the grader's own
Set A / Set B table comes from `infradev demo` / `infradev grade` where Node exists. Writes
OUT/matrix.json; exit 1 when an expectation does not hold.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(ROOT, "python", "sandbox", "infradev_launch.py")


def load_task(task_dir):
    with open(os.path.join(task_dir, "task.yaml")) as f:
        spec = yaml.safe_load(f)
    adv_index = os.path.join(task_dir, "hidden", "adversarial", "index.yaml")
    adversarial = []
    if os.path.exists(adv_index):
        with open(adv_index) as f:
            adversarial = yaml.safe_load(f) or []
    return spec, adversarial


def variants_of(task_dir, adversarial, wrong_dir=None):
    """(name, patch, breaks, kind) per variant; kind: golden | base | hollow | adversarial | alternative | wrong."""
    hidden = os.path.join(task_dir, "hidden")
    out = [("golden", os.path.join(hidden, "golden.patch"), [], "golden"), ("base", None, [], "base")]
    if os.path.exists(os.path.join(hidden, "hollow.patch")):
        out.append(("hollow", os.path.join(hidden, "hollow.patch"), [], "hollow"))
    for entry in adversarial:
        out.append((entry["name"], os.path.join(hidden, "adversarial", entry["patch"]), list(entry["breaks"]), "adversarial"))
    alt_index = os.path.join(hidden, "alternatives", "index.yaml")
    if os.path.exists(alt_index):
        with open(alt_index) as f:
            for entry in yaml.safe_load(f) or []:
                out.append((entry["name"], os.path.join(hidden, "alternatives", entry["patch"]), [], "alternative"))
    if wrong_dir:
        for fname in sorted(os.listdir(wrong_dir)):
            if fname.endswith(".patch"):
                out.append(("wrong:" + fname[: -len(".patch")], os.path.join(wrong_dir, fname), [], "wrong"))
    return out


def apply_patch(repo, patch):
    tries = (["git", "apply", "--whitespace=nowarn", patch], ["patch", "-p1", "--forward", "--batch", "-i", patch])
    errors = []
    for argv in tries:
        if shutil.which(argv[0]) is None:
            errors.append("%s: not installed" % argv[0])
            continue
        r = subprocess.run(argv, cwd=repo, capture_output=True, text=True)
        if r.returncode == 0:
            return argv[0]
        errors.append("%s: %s" % (argv[0], (r.stderr or r.stdout).strip()[-300:]))
    raise RuntimeError("cannot apply %s: %s" % (patch, "; ".join(errors)))


def make_workspace(task_dir, spec, name, patch, scratch, probes_dir=None):
    repo = os.path.join(scratch, name.replace(":", "_"))
    shutil.copytree(os.path.join(task_dir, spec["source"]["path"]), repo,
                    ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    if shutil.which("git"):
        subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    method = apply_patch(repo, patch) if patch else None
    for d in spec["test_dirs"]:
        shutil.rmtree(os.path.join(repo, d), ignore_errors=True)
        src = os.path.join(task_dir, "hidden", "tests", d)
        if os.path.exists(src):
            shutil.copytree(src, os.path.join(repo, d))
    shutil.copytree(probes_dir or os.path.join(task_dir, "hidden", "probes"), os.path.join(repo, "infradev_probes"),
                    ignore=shutil.ignore_patterns("__pycache__"))
    return repo, method


def run_session(repo, spec, mode, mode_env, extra_env, out_dir, python, launcher):
    env = dict(os.environ)
    env.update({k: str(v) for k, v in ((spec.get("env") or {}).get("vars") or {}).items()})
    env.update({k: str(v) for k, v in mode_env.items()})
    env.update(extra_env)
    argv = [python, LAUNCHER, "--nproc", str(spec["ranks"]), "--out-dir", out_dir,
            "--per-test-timeout", str(spec.get("timeout_sec", 300)), "--run-timeout", str(spec.get("run_timeout_sec", 1800)),
            "--launcher", launcher, "--"] + list(spec["test_dirs"]) + ["infradev_probes", "-p", "no:cacheprovider"]
    t0 = time.monotonic()
    proc = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    launch_path = os.path.join(out_dir, "launch.json")
    launch = json.load(open(launch_path)) if os.path.exists(launch_path) else {}
    tests = {}
    for rank in range(spec["ranks"]):
        path = os.path.join(out_dir, "rank%d.probe.json" % rank)
        if not os.path.exists(path):
            continue
        for nodeid, rec in json.load(open(path)).get("tests", {}).items():
            prev = tests.get(nodeid)
            order = {"error": 3, "failed": 2, "passed": 1, "skipped": 0}
            if prev is None or order.get(rec.get("outcome"), 3) > order.get(prev["outcome"], 3):
                probe = (rec.get("markers") or {}).get("probe") or {}
                tests[nodeid] = {"outcome": rec.get("outcome", "error"), "message": (rec.get("message") or "")[:300],
                                 "promise": probe.get("promise"), "kind": probe.get("kind"),
                                 "suite": "probe" if nodeid.startswith("infradev_probes/") else "official"}
    for nodeid in launch.get("collected", []):
        tests.setdefault(nodeid, {"outcome": "failed", "message": "collected but no result (crash or hang)", "promise": None,
                                  "kind": None, "suite": "probe" if nodeid.startswith("infradev_probes/") else "official"})
    return {"mode": mode, "status": launch.get("status", "launch_error rc=%d" % proc.returncode), "seconds": round(seconds, 2),
            "launcher": launch.get("launcher"), "collection_errors": launch.get("collection_errors", []),
            "launcher_tail": (proc.stdout + proc.stderr)[-600:], "tests": tests}


def summarise(session):
    official = [t for t in session["tests"].values() if t["suite"] == "official"]
    probes = [t for t in session["tests"].values() if t["suite"] == "probe"]
    failed_probes = sorted({t["promise"] or "?" for t in probes if t["outcome"] in ("failed", "error")})
    return {
        "official": "%d/%d" % (sum(t["outcome"] == "passed" for t in official), len(official)),
        "official_all_pass": bool(official) and all(t["outcome"] in ("passed", "skipped") for t in official)
        and not session["collection_errors"],
        "probes": "%d/%d" % (sum(t["outcome"] == "passed" for t in probes), len(probes)),
        "probes_all_pass": bool(probes) and all(t["outcome"] == "passed" for t in probes),
        "failed_promises": failed_probes,
    }


def expectations(results, variants):
    problems, verdicts = [], {}
    for name, _patch, breaks, kind in variants:
        sessions = results[name]["sessions"]
        sums = {s["mode"]: summarise(s) for s in sessions}
        fail_modes = sorted(m for m, s in sums.items() if not (s["official_all_pass"] and s["probes_all_pass"]))
        if not results[name]["applied"]:
            ok = kind in ("base", "hollow")
            verdicts[name] = "NOT APPLIED"
        elif kind in ("golden", "alternative"):
            ok = not fail_modes
            verdicts[name] = "passes everything in every mode" if ok else "FAILS in %s: %s" % (
                fail_modes, sorted({p for s in sums.values() for p in s["failed_promises"]}))
        elif kind == "wrong":
            official_ok = all(s["official_all_pass"] for s in sums.values())
            caught = {m: s["failed_promises"] for m, s in sums.items() if s["failed_promises"]}
            ok = official_ok and bool(caught)
            verdicts[name] = "official %s in every mode; %s" % ("pass" if official_ok else "FAIL (not a valid wrong patch)",
                                                               ("caught: %s" % caught) if caught else "NOT CAUGHT by any probe")
        elif kind in ("base", "hollow"):
            ok = bool(fail_modes)
            verdicts[name] = ("fails (modes: %s)" % ", ".join(fail_modes)) if ok else "PASSES everything"
        else:
            official_ok = all(s["official_all_pass"] for s in sums.values())
            caught = {p for s in sums.values() for p in s["failed_promises"]}
            missing = [p for p in breaks if p not in caught]
            probe_fail_modes = sorted(m for m, s in sums.items() if s["failed_promises"])
            ok = official_ok and bool(probe_fail_modes) and not missing
            verdicts[name] = "official %s in every mode; probes fail under %s%s" % (
                "pass" if official_ok else "FAIL", probe_fail_modes or "NO MODE",
                "" if not missing else "; promises not caught: %s" % missing)
        if not ok:
            problems.append("%s: %s" % (name, verdicts[name]))
    return verdicts, problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", required=True, help="task folder (with hidden/)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--jobs", type=int, default=1, help="variants run in parallel (1 for timing probes)")
    parser.add_argument("--env", action="append", default=[], help="K=V added to every session (after the task's and the mode's)")
    parser.add_argument("--variants", default="", help="comma-separated subset")
    parser.add_argument("--modes", default="", help="comma-separated subset of the task's modes")
    parser.add_argument("--launcher", default="builtin", choices=("builtin", "torchrun"))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--ranks", type=int, default=0, help="override the task's rank count (e.g. 1 on a one-GPU node with NCCL)")
    parser.add_argument("--probes", default="", help="probe folder to run instead of the task's hidden/probes")
    parser.add_argument("--wrong-dir", default="", help="folder of held-out wrong patches (*.patch), each expected to be caught")
    args = parser.parse_args(argv)

    task_dir = os.path.abspath(args.task)
    spec, adversarial = load_task(task_dir)
    if args.ranks:
        spec["ranks"] = args.ranks
    modes = spec.get("modes") or {"default": {}}
    if args.modes:
        modes = {m: modes[m] for m in args.modes.split(",")}
    variants = variants_of(task_dir, adversarial, os.path.abspath(args.wrong_dir) if args.wrong_dir else None)
    if args.variants:
        keep = args.variants.split(",")
        variants = [v for v in variants if v[0] in keep]
    extra_env = dict(kv.split("=", 1) for kv in args.env)
    os.makedirs(args.out, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix="infradev-matrix-")
    results = {}

    def run_variant(variant):
        name, patch, breaks, kind = variant
        try:
            repo, method = make_workspace(task_dir, spec, name, patch, scratch, os.path.abspath(args.probes) if args.probes else None)
        except Exception as exc:  # an inapplicable patch is a result, not a crash of the matrix
            return name, {"applied": False, "kind": kind, "error": str(exc), "sessions": []}
        sessions = []
        for mode, mode_env in modes.items():
            out_dir = os.path.join(scratch, "out", name.replace(":", "_"), mode)
            sessions.append(run_session(repo, spec, mode, mode_env, extra_env, out_dir, args.python, args.launcher))
        return name, {"applied": True, "kind": kind, "apply_method": method, "breaks": breaks, "sessions": sessions}

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for name, result in pool.map(run_variant, variants):
            results[name] = result
    verdicts, problems = expectations(results, variants)
    report = {"task": spec["id"], "env": extra_env, "probes": args.probes or "hidden/probes", "launcher": args.launcher, "seconds": round(time.monotonic() - t0, 1),
              "results": results, "verdicts": verdicts, "problems": problems}
    with open(os.path.join(args.out, "matrix-%s%s.json" % (spec["id"], "-" + os.path.basename(args.probes.rstrip("/")) if args.probes else "")), "w") as f:
        json.dump(report, f, indent=1)

    print("\n== %s: variants x modes through the rank launcher (%s, %d rank(s)) ==" % (spec["id"], args.launcher, spec["ranks"]))
    print("%-34s %-12s %-9s %-9s %-7s %s" % ("variant", "mode", "official", "probes", "secs", "probe promises failing"))
    for name, _p, _b, _k in variants:
        res = results[name]
        if not res["applied"]:
            print("%-34s %s" % (name, "NOT APPLIED: " + res["error"][:100]))
            continue
        for s in res["sessions"]:
            sm = summarise(s)
            extra = "" if s["status"] in ("ok", "tests_failed") else " [%s]" % s["status"]
            print("%-34s %-12s %-9s %-9s %-7s %s%s" % (name, s["mode"], sm["official"], sm["probes"], s["seconds"],
                                                       ", ".join(sm["failed_promises"]) or "-", extra))
    print("\nverdicts:")
    for name, v in verdicts.items():
        print("  %-32s %s" % (name, v))
    print("EXPECTATIONS %s (%.0f s)" % ("MET" if not problems else "NOT MET: " + "; ".join(problems), report["seconds"]))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
