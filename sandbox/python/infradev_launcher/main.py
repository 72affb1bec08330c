"""The launcher's command line and its run: sessions, restarts after a hang or crash, launch.json."""

import argparse
import glob
import os
import signal
import sys
import threading
import time

from infradev_outputs import write_json_atomic

from . import procs, report
from .session import run_session

EXIT_CODES = {"ok": 0, "tests_failed": 1, "hang": 2, "crash": 2, "run_timeout": 2, "interrupted": 2, "launch_error": 3}
USAGE = (
    "infradev_launch.py --nproc N --out-dir DIR [--per-test-timeout SEC] [--run-timeout SEC] [--grace SEC] "
    "[--launcher builtin|torchrun] [--no-continue] -- <pytest args...>"
)


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


class StopFlag:
    """Set by SIGTERM / SIGINT; the session loop polls it, kills the ranks and still reports."""

    def __init__(self):
        self._event = threading.Event()
        self.reason = None

    def set(self, reason):
        self.reason = reason
        self._event.set()

    def is_set(self):
        return self._event.is_set()


def _positive(text):
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0 (got %s)" % text)
    return value


def _nproc(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be an integer >= 1 (got %s)" % text)
    return value


def parse_args(argv):
    if "--" in argv:
        cut = argv.index("--")
        own, pytest_args = argv[:cut], argv[cut + 1:]
    else:
        own, pytest_args = argv, []
    parser = _Parser(prog="infradev_launch.py", usage=USAGE, add_help=True)
    parser.add_argument("--nproc", type=_nproc, required=True, help="number of ranks")
    parser.add_argument("--out-dir", required=True, help="folder for logs, JUnit XML and JSON results")
    parser.add_argument("--per-test-timeout", type=_positive, default=300.0, help="seconds one test may run on a rank (default 300)")
    parser.add_argument("--run-timeout", type=_positive, default=3600.0, help="seconds the whole run may take (default 3600)")
    parser.add_argument("--startup-timeout", type=_positive, default=600.0,
                        help="seconds a rank may take to start pytest and collect (default 600)")
    parser.add_argument("--grace", type=_positive, default=5.0, help="seconds the other ranks get after one exits mid-session (default 5)")
    parser.add_argument("--kill-grace", type=_positive, default=2.0, help="seconds between SIGTERM and SIGKILL (default 2)")
    parser.add_argument("--launcher", choices=("builtin", "torchrun"), default="builtin")
    parser.add_argument("--no-fallback", action="store_true", help="with --launcher torchrun: a broken torchrun is a launch error")
    parser.add_argument("--no-continue", dest="cont", action="store_false", help="stop after a hang or crash")
    parser.add_argument("--max-restarts", type=int, default=20, help="restarts after hangs / crashes (default 20)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for the ranks (default: this one)")
    try:
        cfg = parser.parse_args(own)
    except ValueError as exc:
        raise UsageError(str(exc))
    cfg.pytest_args = pytest_args
    cfg.out_dir = os.path.abspath(cfg.out_dir)
    return cfg


def _prepare_out_dir(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    stale = glob.glob(os.path.join(out_dir, "rank[0-9]*.*")) + [
        os.path.join(out_dir, n) for n in ("launch.json", "torchrun.log", "skip.json")]
    for path in stale:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass


def _skip_after(per_rank, events):
    """Tests a restart leaves out: finished on every rank, plus each test that hung or crashed."""
    finished = set.intersection(*(set(r) for r in per_rank)) if per_rank else set()
    culprits = {e["test"] for e in events if e["kind"] in ("hang", "crash") and e.get("test")}
    return finished | culprits


def _collected_ids(result):
    first = next((c for c in result.collected if c), None)
    if not first:
        return []
    return list(first.get("ids", [])) + list(first.get("deselected_by_skip_list", []))


def _status(sessions, events, launch_error, summary, collection_errors):
    if launch_error:
        return "launch_error"
    for kind in ("interrupted", "run_timeout"):
        if any(e["kind"] == kind for e in events):
            return kind
    if events:
        return events[0]["kind"]
    last = sessions[-1]
    if summary["failed"] or summary["error"] or collection_errors or any(c not in (0, 5) for c in last.exit_codes):
        return "tests_failed"
    return "ok"


def run(cfg, stop):
    t_launch = time.monotonic()
    run_deadline = t_launch + cfg.run_timeout
    _prepare_out_dir(cfg.out_dir)
    launcher = cfg.launcher
    sessions, events, notes = [], [], []
    launch_error = None
    skip = set()
    collected, collection_errors = None, []
    while True:
        result = run_session(cfg, len(sessions), launcher, skip, stop, run_deadline, t_launch)
        if result.start_failure:
            if cfg.no_fallback:
                launch_error = result.start_failure
                sessions.append(result)
                break
            notes.append(result.start_failure + "; fell back to the built-in launcher")
            launcher = "builtin"
            continue
        sessions.append(result)
        result.killed = report.killed_records(result, cfg)
        if collected is None:
            collected = _collected_ids(result)
            collection_errors = next((c.get("errors", []) for c in result.collected if c), [])
        if result.launch_error:
            launch_error = result.launch_error
            break
        event = result.event
        if event is None:
            break
        events.append(event)
        if event["kind"] not in ("hang", "crash") or not cfg.cont or not event.get("test"):
            break
        if stop.is_set():
            break
        if len(sessions) > cfg.max_restarts:
            notes.append("stopped after %d restarts (--max-restarts)" % cfg.max_restarts)
            break
        skip = _skip_after(report.rank_records(cfg.out_dir, cfg.nproc, sessions), events)
        if not [t for t in _collected_ids(result) if t not in skip]:
            break
    per_rank = report.rank_records(cfg.out_dir, cfg.nproc, sessions)
    for rank, records in enumerate(per_rank):
        report.write_junit(os.path.join(cfg.out_dir, "rank%d.xml" % rank), rank, records)
        report.write_probe_json(cfg.out_dir, rank, cfg.nproc, records)
    summary = report.merged_summary(per_rank, collected or [])
    status = _status(sessions, events, launch_error, summary, collection_errors)
    survivors = sum(s.survivors for s in sessions)
    if survivors:
        notes.append("%d processes could not be killed" % survivors)
    launch = {
        "launcher": sessions[-1].launcher if sessions else launcher,
        "launcher_requested": cfg.launcher,
        "nproc": cfg.nproc,
        "status": status,
        "exit_codes": sessions[-1].exit_codes if sessions else [],
        "duration_s": round(time.monotonic() - t_launch, 3),
        "restarts": max(0, len(sessions) - 1),
        "events": events,
        "collected": collected or [],
        "collection_errors": collection_errors,
        "summary": summary,
        "sessions": [s.summary() for s in sessions],
        "error": launch_error,
        "notes": notes,
        "pytest_args": cfg.pytest_args,
        "per_test_timeout_s": cfg.per_test_timeout,
        "run_timeout_s": cfg.run_timeout,
    }
    write_json_atomic(os.path.join(cfg.out_dir, "launch.json"), launch)
    return launch


def _one_line(launch, out_dir):
    status = launch["status"]
    s = launch["summary"]
    counts = "%d passed, %d failed, %d errors, %d skipped of %d on %d ranks" % (
        s["passed"], s["failed"], s["error"], s["skipped"], s["total"], launch["nproc"])
    if status == "launch_error":
        return "infradev_launch: launch error: %s" % launch["error"]
    if launch["events"]:
        return "infradev_launch: %s: %s; %s (%s)" % (status, launch["events"][0]["detail"], counts, out_dir)
    return "infradev_launch: %s: %s in %.1f s" % (status, counts, launch["duration_s"])


def _write_launch_error(out_dir, nproc, launcher, message):
    """launch.json for a run that never started, so callers always find one where they can."""
    if not out_dir:
        return
    try:
        os.makedirs(out_dir, exist_ok=True)
        write_json_atomic(os.path.join(out_dir, "launch.json"), {
            "launcher": launcher, "launcher_requested": launcher, "nproc": nproc, "status": "launch_error",
            "exit_codes": [], "duration_s": 0.0, "restarts": 0, "events": [], "collected": [],
            "collection_errors": [], "summary": None, "sessions": [], "error": message, "notes": [],
        })
    except OSError:
        pass


def _raw_option(argv, name):
    own = argv[:argv.index("--")] if "--" in argv else argv
    for i, arg in enumerate(own):
        if arg == name and i + 1 < len(own):
            return own[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = parse_args(argv)
    except UsageError as exc:
        sys.stderr.write("infradev_launch: error: %s\nusage: %s\n" % (exc, USAGE))
        _write_launch_error(_raw_option(argv, "--out-dir"), None, _raw_option(argv, "--launcher") or "builtin", "usage: %s" % exc)
        return EXIT_CODES["launch_error"]
    stop = StopFlag()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.set(signal.Signals(signum).name))
    procs.become_subreaper()
    try:
        launch = run(cfg, stop)
    except OSError as exc:
        sys.stderr.write("infradev_launch: launch error: %s\n" % exc)
        _write_launch_error(cfg.out_dir, cfg.nproc, cfg.launcher, str(exc))
        return EXIT_CODES["launch_error"]
    except Exception as exc:  # a launcher bug: say so in launch.json rather than leave none
        import traceback

        traceback.print_exc()
        _write_launch_error(cfg.out_dir, cfg.nproc, cfg.launcher, "launcher failure: %r" % (exc,))
        return EXIT_CODES["launch_error"]
    sys.stderr.write(_one_line(launch, cfg.out_dir) + "\n")
    return EXIT_CODES[launch["status"]]
