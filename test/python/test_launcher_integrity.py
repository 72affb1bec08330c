"""Independent records of a rank agree on honest sessions: the plugin's records, pytest's own
junitxml, pytest's summary line and the rank's exit code (and the parsers behind them)."""

import hashlib
import json
import os
import sys

import pytest

from conftest import SANDBOX_PY

sys.path.insert(0, SANDBOX_PY)

from infradev_launcher import bundle as bundle_mod  # noqa: E402
from infradev_launcher.integrity import junit_address, parse_pytest_junit, parse_summary  # noqa: E402

MIXED = '''
import os
import pytest


@pytest.fixture
def bad_teardown():
    yield
    raise RuntimeError("teardown boom")


@pytest.fixture
def bad_setup():
    raise RuntimeError("setup boom")


def test_pass():
    pass


def test_fail():
    assert os.environ["RANK"] == "never"


def test_teardown_fails(bad_teardown):
    pass


def test_call_and_teardown_fail(bad_teardown):
    assert 0


def test_setup_fails(bad_setup):
    pass


@pytest.mark.skip(reason="not today")
def test_skip_mark():
    pass


def test_skip_inside():
    pytest.skip("inside")


@pytest.mark.xfail(reason="known")
def test_xfail():
    assert 0


@pytest.mark.xfail(reason="fixed")
def test_xpass():
    pass


@pytest.mark.xfail(reason="strict", strict=True)
def test_xpass_strict():
    pass


@pytest.mark.parametrize("n", [1, 2, 3])
def test_param(n):
    assert n != 2


class TestGroup:
    def test_in_class(self):
        pass

    @pytest.mark.parametrize("s", ["a::b", "c[d]"])
    def test_odd_ids(self, s):
        pass


def test_warns():
    import warnings
    warnings.warn("a warning")
'''
BROKEN = "import no_such_module_anywhere\n"
MODULE_SKIP = "import pytest\n\npytest.importorskip('no_such_module_either')\n\n\ndef test_never():\n    pass\n"


def counts(entry_part):
    return {k: entry_part[k] for k in ("passed", "failed", "error", "skipped")}


def assert_agree(entry, expect_exit):
    assert entry["pytest_junit"] is not None and entry["summary"] is not None, entry
    assert entry["plugin"] == counts(entry["pytest_junit"]) == entry["summary"], entry
    assert entry["exit_code"] == expect_exit


def test_honest_mixed_session_agrees(scratch):
    run = scratch({"test_mixed.py": MIXED, "test_broken.py": BROKEN, "sub/test_nested.py": "def test_deep():\n    pass\n",
                   "test_modskip.py": MODULE_SKIP}, 2, "--", "-q", "test_mixed.py", "test_broken.py", "sub/test_nested.py", "test_modskip.py")
    assert run.returncode == 1, run.stderr
    assert [e["session"] for e in run.integrity] == [0, 0] and [e["rank"] for e in run.integrity] == [0, 1]
    for entry in run.integrity:
        assert_agree(entry, 1)
        # pytest's own summary units: the teardown failure after a passed call is one pass + one error;
        # xpass counts as passed, xfail as skipped; the collection error is an error.
        assert entry["summary"] == {"passed": 10, "failed": 4, "error": 4, "skipped": 4}
        outcomes = entry["pytest_junit"]["outcomes"]
        records = run.records(entry["rank"])
        # per test, pytest's junit and the plugin say the same (the collection error is not a record)
        assert outcomes.pop("test_broken.py") == "error"
        assert outcomes.pop("test_modskip.py") == "skipped"  # skipped at collection (importorskip)
        assert outcomes == {nodeid: rec["outcome"] for nodeid, rec in records.items()}
    assert run.records(0)["test_mixed.py::TestGroup::test_odd_ids[a::b]"]["outcome"] == "passed"
    assert run.records(0)["sub/test_nested.py::test_deep"]["outcome"] == "passed"
    assert [s["nodeid"] for s in run.launch["collection_skips"]] == ["test_modskip.py"]


def test_all_passing_and_empty_sessions_agree(scratch, tmp_path):
    run = scratch({"test_ok.py": "import pytest\n\n@pytest.mark.parametrize('i', range(3))\ndef test_ok(i):\n    pass\n"}, 2)
    assert run.returncode == 0, run.stderr
    for entry in run.integrity:
        assert_agree(entry, 0)
        assert entry["plugin"] == {"passed": 3, "failed": 0, "error": 0, "skipped": 0}
    run = scratch({"test_ok.py": "def test_ok():\n    pass\n"}, 2, "--", "-q", "test_ok.py", "-k", "nothing_matches")
    assert run.returncode == 0, run.stderr  # the launcher: ok (nothing failed); pytest: 5, no tests
    for entry in run.integrity:
        assert_agree(entry, 5)
        assert entry["plugin"] == {"passed": 0, "failed": 0, "error": 0, "skipped": 0}


def test_minus_qq_still_leaves_a_summary_line(scratch):
    run = scratch({"test_ok.py": "def test_ok():\n    pass\n\ndef test_bad():\n    assert 0\n"}, 2, "--", "-qq", "test_ok.py")
    for entry in run.integrity:
        assert_agree(entry, 1)
        assert entry["summary"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 0}


HANG_NO_TORCH = '''
import os
import time


def test_before():
    pass


def test_hang():
    if os.environ["RANK"] == "1":
        time.sleep(120)


def test_after():
    assert os.environ["RANK"] != "1"
'''


def test_hang_restart_gives_integrity_per_session(scratch):
    run = scratch({"test_hang.py": HANG_NO_TORCH}, 2, "--per-test-timeout", "3")
    assert run.returncode == 2, run.stderr
    assert run.launch["status"] == "hang" and run.launch["restarts"] == 1
    assert [(e["session"], e["rank"]) for e in run.integrity] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    s0r0, s0r1, s1r0, s1r1 = run.integrity
    # session 0: rank 1 hung in test_hang; the launcher killed it (rank 0 had finished and exited)
    assert s0r1["exit_code"] is None and s0r1["pytest_junit"] is None and s0r1["summary"] is None
    assert s0r1["plugin"] == {"passed": 1, "failed": 0, "error": 0, "skipped": 0}  # test_before only
    # rank 0 ran all three (nothing hangs there) and exited by itself
    assert_agree(s0r0, 0)
    assert s0r0["summary"] == {"passed": 3, "failed": 0, "error": 0, "skipped": 0}
    # session 1 ran only test_after (test_before finished on both ranks, test_hang is the culprit)
    assert_agree(s1r0, 0)
    assert_agree(s1r1, 1)
    assert s1r0["plugin"] == {"passed": 1, "failed": 0, "error": 0, "skipped": 0}
    assert s1r1["plugin"] == {"passed": 0, "failed": 1, "error": 0, "skipped": 0}
    assert run.records(1)["test_hang.py::test_hang"]["killed"] == "hang"


# -- the parsers on their own -------------------------------------------------------------------


@pytest.mark.parametrize("line, expected", [
    ("= 4 failed, 5 passed, 2 skipped, 1 xfailed, 1 xpassed, 1 warning, 4 errors in 0.03s =", (6, 4, 4, 3)),
    ("4 failed, 5 passed, 2 skipped, 1 xfailed, 1 xpassed, 1 warning, 4 errors in 0.03s", (6, 4, 4, 3)),
    ("============ 1 passed in 65.43s (0:01:05) ============", (1, 0, 0, 0)),
    ("==== 2 passed, 3 deselected, 2 warnings in 1.00s ====", (2, 0, 0, 0)),
    ("= 1 error in 0.10s =", (0, 0, 1, 0)),
    ("= 1 failed, 1 passed, 1 rerun in 0.5s =", (1, 1, 0, 0)),
    ("\x1b[31m= \x1b[31m\x1b[1m1 failed\x1b[0m, \x1b[32m2 passed\x1b[0m\x1b[31m in 0.05s\x1b[0m\x1b[31m =\x1b[0m", (2, 1, 0, 0)),
    ("============================ no tests ran in 0.00s =============================", (0, 0, 0, 0)),
    ("= 3 deselected in 0.01s =", (0, 0, 0, 0)),
])
def test_summary_line_formats(line, expected):
    passed, failed, error, skipped = expected
    assert parse_summary("collected 3 items\n\n" + line + "\n") == {"passed": passed, "failed": failed, "error": error, "skipped": skipped}


def test_summary_takes_the_last_line_and_ignores_lookalikes():
    text = "= 9 passed in 1.0s =\nsomething 3 passed in a while\n= 1 failed, 2 passed in 0.2s =\n\n"
    assert parse_summary(text) == {"passed": 2, "failed": 1, "error": 0, "skipped": 0}
    assert parse_summary("= 2 passed, 1 bogus in 0.1s =") is None
    assert parse_summary("no summary here") is None


def test_junit_addresses_match_pytest():
    assert junit_address("tests/unit/test_b.py::TestSync::test_step[2]") == ("tests.unit.test_b.TestSync", "test_step[2]")
    assert junit_address("test_a.py::test_x[a::b]") == ("test_a", "test_x[a::b]")
    assert junit_address("test_b.py") == ("", "test_b")
    assert parse_pytest_junit(b"<not xml", []) is None
    assert parse_pytest_junit(b"<html/>", []) is None


# -- the bundle's caps ----------------------------------------------------------------------------


def _record(nodeid, outcome, longrepr):
    return {"nodeid": nodeid, "outcome": outcome, "when": "call", "phases": {"call": outcome}, "xfail": False, "duration_s": 0.1,
            "message": "assert x == y " * 20, "longrepr": longrepr, "markers": {}, "session": 0, "wall_time_s": 0.1,
            "peak_memory_bytes": 1 << 20, "peak_memory_delta_bytes": 0, "reserved_memory_bytes": None, "memory_kind": "host_rss",
            "calls": {"all_reduce": 3}, "bytes": {"all_reduce": 48}}


def _bundle(n_tests, nproc, longrepr, id_len=60):
    ids = ["tests/test_mod_%d.py::test_case_%s" % (i % 50, str(i).rjust(id_len, "0")) for i in range(n_tests)]
    per_rank = [{i: _record(i, "failed", longrepr) for i in ids} for _ in range(nproc)]
    integrity = [{"rank": r, "session": 0, "exit_code": 1, "plugin": {}, "summary": None,
                  "pytest_junit": {"passed": 0, "failed": n_tests, "error": 0, "skipped": 0, "outcomes": {i: "failed" for i in ids}}}
                 for r in range(nproc)]
    logs = [("rank%d.log" % r, b"\x01\xff" * (1 << 20)) for r in range(nproc)]
    launch = {"status": "tests_failed", "events": [], "collection_errors": [], "notes": []}
    return bundle_mod.bundle_line("n", launch, ids, per_rank, integrity, logs), ids


def test_bundle_for_10k_tests_on_2_ranks_keeps_every_record():
    line, ids = _bundle(10000, 2, "E   assert 1 == 2\n" * 20)
    assert len(line) < 32 << 20
    b = json.loads(line[len(bundle_mod.BUNDLE_PREFIX):])
    assert b["records_dropped"] == 0 and b["collected_dropped"] == 0
    assert [len(r["records"]) for r in b["ranks"]] == [10000, 10000]
    assert all(len(l["text"]) <= 64 << 10 for l in b["logs"])


def test_bundle_stays_bounded_whatever_the_ranks_wrote():
    # forged extremes: 8 ranks x 20k tests, every longrepr at the plugin's cap, long ids, binary logs
    line, ids = _bundle(20000, 8, "\u2603\x00" * 4000, id_len=1500)
    assert len(line.encode("ascii")) <= bundle_mod.BUNDLE_MAX
    b = json.loads(line[len(bundle_mod.BUNDLE_PREFIX):])
    assert b["records_dropped"] > 0 and b["collected_dropped"] > 0
    kept = [len(r["records"]) for r in b["ranks"]]
    assert max(kept) - min(kept) <= 1  # cut round-robin: every rank loses the same tests
    assert any(r.get("reduced") for r in b["ranks"][0]["records"])
    assert any(e["pytest_junit"].get("outcomes_truncated") for e in b["integrity"])


def test_neutral_test_name_is_sha1_of_the_node_id():
    from infradev_probe.plugin import neutral_test_name

    nodeid = "tests/test_x.py::test_probe_secret[1]"
    assert neutral_test_name(nodeid) == "test_" + hashlib.sha1(nodeid.encode()).hexdigest()[:12]
    # the plugin imported is the sandbox copy (python/sandbox), the one mounted into every sandbox
    import infradev_probe.plugin as plugin_mod

    assert os.path.dirname(os.path.dirname(os.path.abspath(plugin_mod.__file__))) == os.path.abspath(SANDBOX_PY)
