"""The launcher's desync detector (infradev_launcher/desync.py, infradev_inflight.py): real gloo ranks
stuck in different collectives are stopped as a hang long before the per-test limit; a rank that is
merely late (computing, sleeping) is waited for; the decision rule on its own."""

import os
import sys
import tempfile

from conftest import HANGING, PG_FIXTURE, SANDBOX_PY

sys.path.insert(0, SANDBOX_PY)
import infradev_inflight  # noqa: E402
from infradev_launcher.desync import DesyncWatch  # noqa: E402

LIMIT = "60"  # the bundled tasks' per-test limit: what a desynchronised session used to wait out


def test_ranks_in_different_collectives_are_stopped_before_the_limit(scratch):
    # HANGING: rank 1 blocks in a recv rank 0 never sends; rank 0 goes on to test_after's all_reduce.
    run = scratch({"test_hang.py": HANGING}, 2, "--per-test-timeout", LIMIT, "--desync-after", "2")
    assert run.returncode == 2, run.stderr
    launch = run.launch
    assert launch["status"] == "hang"
    [event] = launch["events"]
    assert event["kind"] == "hang" and event.get("desync") is True, event
    assert event["test"] == "test_hang.py::test_hang"  # the earliest test a rank is in, as the limit would blame
    assert 2 <= event["after_s"] < 30, event  # far below the 60 s limit
    assert "rank 0 in all_reduce" in event["detail"] and "rank 1 in recv" in event["detail"], event["detail"]
    assert launch["restarts"] == 1
    r0, r1 = run.junit(0), run.junit(1)
    assert r1["test_hang.py::test_hang"][0] == "error"
    assert r0["test_hang.py::test_hang"][0] == "passed"  # rank 0 skipped the recv and went on
    for cases in (r0, r1):
        assert cases["test_hang.py::test_before"][0] == "passed"
        assert cases["test_hang.py::test_after"][0] == "passed"  # ran after the restart
    assert run.elapsed_s < 50


LATE = PG_FIXTURE + '''
import time


def test_late_peer():
    t = torch.ones(2)
    if dist.get_rank() == 1:
        time.sleep(6)  # computing: not inside a collective, so nobody is stuck yet
    dist.all_reduce(t)
    assert t[0].item() == 2
'''


def test_a_late_rank_is_waited_for(scratch):
    run = scratch({"test_late.py": LATE}, 2, "--per-test-timeout", LIMIT, "--desync-after", "1")
    assert run.returncode == 0, run.stderr + run.stdout[-2000:]
    assert run.launch["status"] == "ok" and run.launch["events"] == []
    for rank in (0, 1):
        assert run.junit(rank)["test_late.py::test_late_peer"][0] == "passed"


class _Cfg:
    nproc = 2
    per_test_timeout = 60.0
    out_fd = None


def _running(index, nodeid):
    return {"state": "running", "index": index, "nodeid": nodeid}


def _watch(records):
    return DesyncWatch(_Cfg(), 10.0, reader=lambda cfg, rank: records[rank])


def test_rule_one_instance_is_never_a_desync():
    records = {0: (1, 5, 3, 2, "all_reduce"), 1: (1, 9, 3, 2, "all_reduce")}
    w = _watch(records)
    states = [_running(3, "t.py::a")] * 2
    assert w.check(states, [None, None], 0.0) is None
    assert w.check(states, [None, None], 1000.0) is None  # slow, maybe: the per-test limit decides


def test_rule_different_calls_fire_only_after_the_quiet_window_and_progress_resets_it():
    records = {0: (1, 5, 3, 2, "all_reduce"), 1: (1, 7, 4, 1, "all_reduce")}
    w = _watch(records)
    states = [_running(3, "t.py::a"), _running(4, "t.py::b")]
    assert w.check(states, [None, None], 0.0) is None
    assert w.check(states, [None, None], 9.0) is None
    records[1] = (1, 8, 4, 2, "broadcast")  # rank 1 moved on: a new call, the window starts again
    assert w.check(states, [None, None], 12.0) is None
    assert w.check(states, [None, None], 21.0) is None
    rank, test, detail, stuck, stuck_for = w.check(states, [None, None], 22.5)
    assert (rank, test, stuck, stuck_for) == (0, "t.py::a", [0], 10.5)
    assert "rank 1 in broadcast (call 2 of later test t.py::b)" in detail


def test_rule_a_rank_outside_any_collective_or_gone_stops_the_judgement():
    records = {0: (1, 5, 3, 2, "all_reduce"), 1: (0, 7, 3, 1, "all_reduce")}
    w = _watch(records)
    states = [_running(3, "t.py::a")] * 2
    assert w.check(states, [None, None], 0.0) is None
    assert w.check(states, [None, None], 100.0) is None
    records[1] = (1, 7, 3, 1, "broadcast")
    assert w.check(states, [None, 1], 200.0) is None  # rank 1 exited: the crash path handles it
    assert w.check([_running(3, "t.py::a"), {"state": "idle"}], [None, None], 300.0) is None


def test_record_round_trip_and_a_torn_write_reads_as_none():
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rank0.inflight")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        rec = infradev_inflight.Inflight(fd)
        os.close(fd)
        rec.begin_test(4)
        assert rec.enter("all_reduce")
        assert rec.enter("broadcast")  # nested: the outermost call is what is recorded
        with open(path, "rb") as f:
            assert infradev_inflight.parse(f.read()) == (1, 1, 4, 1, "all_reduce")  # written when the outermost call begins
        rec.leave()
        rec.leave()
        with open(path, "rb") as f:
            data = bytearray(f.read())
        assert infradev_inflight.parse(bytes(data)) == (0, 1, 4, 1, "all_reduce")
        data[0] |= 1  # an odd version: a write in progress
        assert infradev_inflight.parse(bytes(data)) is None
        assert infradev_inflight.parse(b"short") is None
        rec.close()


def test_planted_records_are_not_followed_or_trusted():
    """The ranks' folder is writable by the code under test: a link planted under rank{r}.inflight (to a
    valid-looking record elsewhere) or a FIFO is never followed or opened, a record caught mid-write
    (odd version) is not used; each reads as no record, so the per-test limit applies."""
    from infradev_launcher.desync import read_record

    with tempfile.TemporaryDirectory() as d:
        elsewhere = os.path.join(d, "elsewhere")
        fd = os.open(elsewhere, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        rec = infradev_inflight.Inflight(fd)
        os.close(fd)
        assert rec.enter("all_reduce")
        os.symlink(elsewhere, os.path.join(d, "rank0.inflight"))
        os.mkfifo(os.path.join(d, "rank1.inflight"))
        with open(elsewhere, "rb") as f:
            torn = bytearray(f.read())
        torn[0] |= 1
        with open(os.path.join(d, "rank2.inflight"), "wb") as f:
            f.write(bytes(torn))

        class Cfg:
            out_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)

        try:
            assert [read_record(Cfg, r) for r in range(3)] == [None, None, None]
            os.unlink(os.path.join(d, "rank0.inflight"))
            os.rename(elsewhere, os.path.join(d, "rank0.inflight"))
            assert read_record(Cfg, 0) == (1, 1, -1, 1, "all_reduce")  # the same record, as a regular file, is read
        finally:
            os.close(Cfg.out_fd)
            rec.close()
