"""pytest plugin (`-p infradev_probe.plugin`): per-test resources and progress for the rank launcher.

Always: registers the `probe(promise=..., kind=...)` marker. With INFRADEV_OUT_DIR set (the launcher
sets it), also records, for this rank (RANK, default 0), into that folder:
  rank{r}.current.json    the test running now and since when, tests done / total this session
                          (atomically replaced; the launcher's hang detector and progress read it)
  rank{r}.results.jsonl   one line per finished test (setup + call + teardown merged, and each phase)
  rank{r}.collected.json  node ids collected (after -k / skip-list deselection) and collection errors
  rank{r}.probe.json      every test of the session, written at session end
  rank{r}.stacks.txt      Python stacks of every thread, dumped when the launcher sends SIGUSR1
  rank{r}.inflight        the collective call the main thread is inside (infradev_inflight.py: desync)
Tests in the skip list of the rank boot's spec (or, used standalone, the JSON file named by
INFRADEV_SKIP_FILE) are deselected (the launcher's restarts). Under the launcher it also:
  - sets PYTEST_CURRENT_TEST to a neutral `test_<sha1(nodeid)[:12]> (<when>)` in every phase (pytest's
    own value names the test, and code under test must not tell a probe from another test by it);
  - keeps pytest's verbosity at -1 or more, so the rank log always ends with pytest's own summary
    line ("3 failed, 21 passed in 4.2s"), one of the launcher's independent records.

PYTEST_DONT_REWRITE: the rank boot imports this module before pytest starts (so nothing of the repo
can stand in for what it imports); pytest then has nothing to rewrite and need not warn about it.
"""

import faulthandler
import hashlib
import json
import os
import signal
import sys
import time

import pytest

from infradev_outputs import (
    OUT_DIR_ENV,
    SESSION_ENV,
    SKIP_FILE_ENV,
    STATE_COLLECTED,
    STATE_CONFIGURED,
    STATE_FINISHED,
    STATE_IDLE,
    STATE_RUNNING,
    cap_text,
    open_append,
    open_regular,
    rank_file,
    read_json,
    write_json_atomic,
)

from . import measure

PROBE_KINDS = ("numerical", "resource", "state", "condition")
_MEASURED_FIELDS = ("wall_time_s", "peak_memory_bytes", "peak_memory_delta_bytes", "reserved_memory_bytes", "memory_kind", "calls", "bytes")
# Set by infradev_rank_boot.py before pytest.main: {"args", "plugins", "skip", "out_dir", "session"}.
BOOT_SPEC = None


def neutral_test_name(nodeid):
    return "test_%s" % hashlib.sha1(nodeid.encode("utf-8", "surrogateescape")).hexdigest()[:12]


class _NeutralNode:
    __slots__ = ("nodeid",)

    def __init__(self, nodeid):
        self.nodeid = nodeid


def neutralise_current_test_var():
    """pytest sets PYTEST_CURRENT_TEST to "<nodeid> (<when>)" at the start of each phase, in the
    runner's own hook, right before fixtures and the test run: no hook of ours comes between. So the
    runner's helper is wrapped: pytest's own function still runs (its set, its pop after teardown, the
    thread-local of newer versions), given a stand-in item whose node id is the neutral name, so the
    real id never reaches os.environ, not even for an instant. It exists under that name in pytest 6
    to 9; False if it is not there."""
    from _pytest import runner

    original = getattr(runner, "_update_current_test_var", None)
    if not callable(original):
        return False
    if getattr(original, "_infradev_neutral", False):
        return True

    def update(item, when):
        return original(_NeutralNode(neutral_test_name(item.nodeid)) if when else item, when)

    update._infradev_neutral = True
    runner._update_current_test_var = update
    return True


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "probe(promise, kind): a hidden probe checking the named promise of a change; kind is one of "
        + ", ".join(PROBE_KINDS),
    )
    out_dir = os.environ.get(OUT_DIR_ENV)
    if out_dir and not config.pluginmanager.has_plugin("infradev_rank_recorder"):
        if not neutralise_current_test_var():
            sys.stderr.write("infradev_probe.plugin: warning: cannot neutralise PYTEST_CURRENT_TEST on this pytest\n")
        _summary_line_on(config)
        config.pluginmanager.register(RankRecorder(out_dir), "infradev_rank_recorder")


def _summary_line_on(config):
    """-qq would drop pytest's summary line (the launcher reads it as an independent record)."""
    try:
        if int(config.option.verbose) < -1:
            config.option.verbose = -1
    except (AttributeError, TypeError, ValueError):
        pass


def probe_marker(item):
    mark = item.get_closest_marker("probe")
    if mark is None:
        return {}
    promise = mark.kwargs.get("promise", mark.args[0] if mark.args else None)
    kind = mark.kwargs.get("kind", mark.args[1] if len(mark.args) > 1 else None)
    return {"probe": {"promise": promise, "kind": kind}}


def _short_message(report):
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (file, line, reason)
        reason = str(longrepr[2])
        return reason[len("Skipped: "):] if reason.startswith("Skipped: ") else reason
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return crash.message
    lines = [l for l in str(longrepr).splitlines() if l.strip()]
    return lines[-1] if lines else ""


def phase_outcomes(reports):
    """{"setup": "passed"|"failed"|"skipped", "call": ..., "teardown": ...} of the phases that ran, and
    whether the test was an expected failure (xfail / xpass)."""
    phases = {when: rep.outcome for when, rep in reports.items()}
    xfail = any(hasattr(rep, "wasxfail") for rep in reports.values())
    return phases, xfail


def merge_phases(reports):
    """(outcome, when, message, longrepr) of one test from its setup / call / teardown reports."""
    setup, call, teardown = reports.get("setup"), reports.get("call"), reports.get("teardown")
    decisive, outcome = None, "passed"
    if setup is not None and setup.failed:
        decisive, outcome = setup, "error"
    elif setup is not None and setup.skipped:
        decisive, outcome = setup, "skipped"
    elif call is not None:
        decisive = call
        outcome = "failed" if call.failed else "skipped" if call.skipped else "passed"
    if teardown is not None and teardown.failed:
        decisive, outcome = teardown, "error"
    if decisive is None:
        return outcome, "setup", "", ""
    message = _short_message(decisive)
    if hasattr(decisive, "wasxfail"):
        message = "xfail: %s" % decisive.wasxfail if decisive.skipped else "xpass: %s" % decisive.wasxfail
    if outcome == "passed":
        longrepr = ""
    elif isinstance(decisive.longrepr, tuple) and len(decisive.longrepr) == 3:
        path, line, reason = decisive.longrepr
        longrepr = "%s:%s: %s" % (path, line, reason)
    else:
        longrepr = cap_text(decisive.longreprtext)
    return outcome, decisive.when, message, longrepr


class RankRecorder:
    """The part of the plugin that exists only under the launcher (INFRADEV_OUT_DIR set)."""

    def __init__(self, out_dir):
        self.out_dir = out_dir
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.world_size = int(os.environ.get("WORLD_SIZE", "1") or 1)
        self.session = int(os.environ.get(SESSION_ENV, "0") or 0)
        self.tests = {}
        self.collection_errors = []
        self.collection_skips = []  # a module skipped at import (pytest.importorskip, skip(allow_module_level))
        self.memory_kind = None
        self._reports = {}
        self._measured = None
        self._index = {}
        self._current = rank_file(out_dir, self.rank, "current.json")
        self._done = 0
        self._total = None
        os.makedirs(out_dir, exist_ok=True)
        # Appends that never follow a link planted under these names (the launcher removed stale
        # files before the session; anything here now was put by the code under test).
        self._results = open_append(rank_file(out_dir, self.rank, "results.jsonl"))
        # Our own file, not stderr: pytest's fd capture would swallow a dump taken mid-test.
        self._stacks = open_append(rank_file(out_dir, self.rank, "stacks.txt"))
        faulthandler.register(signal.SIGUSR1, file=self._stacks, all_threads=True, chain=False)
        self._inflight = self._open_inflight()
        self._progress(STATE_CONFIGURED, None)

    def _open_inflight(self):
        """The collective this rank's main thread is inside, for the launcher's desync detector
        (infradev_inflight.py). Created fresh (the launcher removed the session's files before it
        began: anything under this name now was planted); without it the per-test limit applies."""
        from infradev_inflight import Inflight

        from . import _collectives

        try:
            fd = open_regular(rank_file(self.out_dir, self.rank, "inflight"), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode=0o644)
        except OSError:
            return None
        try:
            record = Inflight(fd)
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)
        _collectives.inflight = record
        return record

    def _progress(self, state, nodeid, **extra):
        record = {"state": state, "nodeid": nodeid, "since": time.time(), "pid": os.getpid(), "session": self.session,
                  "done": self._done, "total": self._total}
        record.update(extra)
        write_json_atomic(self._current, record)

    def pytest_collectreport(self, report):
        if report.failed:
            self.collection_errors.append(
                {"nodeid": report.nodeid, "file": report.nodeid.split("::")[0], "message": cap_text(report.longreprtext)}
            )
        elif report.skipped:
            self.collection_skips.append({"nodeid": report.nodeid, "message": _short_message(report)})

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        if BOOT_SPEC is not None:
            skip = set(BOOT_SPEC.get("skip") or ())
        else:
            skip_path = os.environ.get(SKIP_FILE_ENV)
            skip = set(read_json(skip_path, []) or []) if skip_path else set()
        self._all_ids = [item.nodeid for item in items]
        if skip:
            kept = [item for item in items if item.nodeid not in skip]
            dropped = [item for item in items if item.nodeid in skip]
            if dropped:
                config.hook.pytest_deselected(items=dropped)
                items[:] = kept
        for item in items:
            marker = probe_marker(item)
            kind = marker.get("probe", {}).get("kind") if marker else None
            if marker and kind not in PROBE_KINDS:
                item.warn(pytest.PytestWarning("probe marker kind %r is not one of %s" % (kind, ", ".join(PROBE_KINDS))))

    def pytest_collection_finish(self, session):
        ids = [item.nodeid for item in session.items]
        # Position in the run order: the launcher blames the earliest test any rank is stuck in.
        self._index = {nodeid: i for i, nodeid in enumerate(ids)}
        self._total = len(ids)
        self._progress(STATE_COLLECTED, None, tests=len(ids))
        write_json_atomic(
            rank_file(self.out_dir, self.rank, "collected.json"),
            {
                "rank": self.rank,
                "session": self.session,
                "ids": ids,
                "deselected_by_skip_list": [i for i in getattr(self, "_all_ids", []) if i not in set(ids)],
                "errors": self.collection_errors,
                "skipped": self.collection_skips,
            },
        )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self._reports = {}
        self._measured = None
        self._progress(STATE_RUNNING, item.nodeid, index=self._index.get(item.nodeid))
        if self._inflight is not None:
            self._inflight.begin_test(self._index.get(item.nodeid))
        yield
        self._finish(item)
        self._progress(STATE_IDLE, None)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        with measure() as m:
            yield
        self._measured = m

    def pytest_runtest_logreport(self, report):
        self._reports[report.when] = report

    def _finish(self, item):
        outcome, when, message, longrepr = merge_phases(self._reports)
        phases, xfail = phase_outcomes(self._reports)
        record = {
            "nodeid": item.nodeid,
            "outcome": outcome,
            "when": when,
            "phases": phases,
            "xfail": xfail,
            "duration_s": sum(r.duration for r in self._reports.values()),
            "message": message,
            "longrepr": longrepr,
            "markers": probe_marker(item),
            "session": self.session,
        }
        m = self._measured
        measured = m.as_dict() if m is not None else {}
        for field in _MEASURED_FIELDS:
            record[field] = measured.get(field, {} if field in ("calls", "bytes") else None)
        if m is not None:
            self.memory_kind = m.memory_kind
        self.tests[item.nodeid] = record
        self._done += 1
        os.write(self._results, (json.dumps(record, default=str) + "\n").encode("utf-8", "surrogateescape"))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus):
        _summary_line_on(session.config)  # again: a conftest may have lowered it since configure
        write_json_atomic(
            rank_file(self.out_dir, self.rank, "probe.json"),
            {"rank": self.rank, "world_size": self.world_size, "memory_kind": self.memory_kind, "tests": self.tests},
        )
        self._progress(STATE_FINISHED, None, exitstatus=int(exitstatus))

    def pytest_unconfigure(self, config):
        # The session's collective totals, for the launcher's check against the kernel's count of
        # what the ranks sent (infradev_launcher/wire.py). Written last: teardown collectives count.
        from . import _collectives

        try:
            write_json_atomic(rank_file(self.out_dir, self.rank, "comm.json"), _collectives.totals())
        except OSError:
            pass  # missing: the launcher reports it, the grader reads it as lost records
        faulthandler.unregister(signal.SIGUSR1)
        os.close(self._results)
        os.close(self._stacks)
