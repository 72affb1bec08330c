"""The launcher's reading of a hang (python/sandbox/infradev_launcher/hang.py), on real faulthandler
dumps of real threads: one waiting in torch.distributed (a gloo rendezvous whose peer never comes), one
sleeping in plain Python. The grade-level test (test/grader/grade/grade.test.ts, a rank that sleeps
while the other waits in all_reduce) covers the whole path through the launcher."""

import faulthandler
import sys
import tempfile
import threading
import time

from conftest import SANDBOX_PY

sys.path.insert(0, SANDBOX_PY)
from infradev_launcher import hang  # noqa: E402


# A fresh interpreter: other tests of this suite initialise the default process group in this process,
# after which init_process_group returns at once instead of waiting for its peer.
_WAITER = r'''
import datetime, faulthandler, socket, sys, tempfile, threading, time
import torch.distributed as dist

def waits_for_a_peer(port):
    try:  # rank 0 of 2: the peer never comes, the rendezvous times out after a few seconds
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=2,
                                timeout=datetime.timedelta(seconds=3))
    except Exception:
        pass

s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
t = threading.Thread(target=waits_for_a_peer, args=(port,), daemon=True)
t.start()
end = time.monotonic() + 60
while True:
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        text = f.read()
    if "in init_process_group" in text or time.monotonic() > end:
        break
    time.sleep(0.05)
sys.stdout.write(text)
t.join(30)
'''


def _waiting_dump():
    import subprocess

    r = subprocess.run([sys.executable, "-c", _WAITER], capture_output=True, text=True, timeout=120,
                       env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _dump_all_threads():
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return f.read()


def sleeps_elsewhere(started, stop):
    started.set()
    while not stop.is_set():
        time.sleep(0.05)


def test_a_thread_waiting_in_torch_distributed_is_named_with_its_call_site():
    text = _waiting_dump()
    threads = hang.parse_stacks(text)
    assert len(threads) >= 2 and sum(th["current"] for th in threads) == 1, text
    pos = hang.rank_position(text)
    assert pos["collective"] == "init_process_group", pos
    assert pos["call_site"] == "<string>:" + pos["call_site"].split(":", 1)[1] and pos["call_site"].endswith(" in waits_for_a_peer"), pos


def test_explain_names_the_waiting_rank_and_where_the_absent_one_is():
    waiting = _waiting_dump()
    stop = threading.Event()
    s_started = threading.Event()
    s = threading.Thread(target=sleeps_elsewhere, args=(s_started, stop), daemon=True)
    s.start()
    s_started.wait(10)
    elsewhere = _dump_all_threads()
    stop.set()
    s.join(10)
    # Rank 1's dump holds no torch.distributed frame: its position is its main thread's innermost frame.
    pos1 = hang.rank_position(elsewhere)
    assert pos1["collective"] is None and pos1["at"].startswith("test_hang.py:"), pos1
    sentence, record = hang.explain({"rank": 1}, {0: waiting, 1: elsewhere}, 3)
    assert record["name"] == "init_process_group" and record["waiting"] == [0] and record["not_arrived"] == [1, 2]
    assert record["where"]["2"] == "no stack (exited or did not answer)"
    assert sentence.startswith("collective hang: rank 0 waits in init_process_group called at <string>:")
    assert "did not arrive: rank 1 (at test_hang.py:" in sentence and "rank 2 (no stack" in sentence
    # Nothing in torch.distributed on any rank: no collective to name.
    assert hang.explain({"rank": 0}, {0: elsewhere, 1: elsewhere}, 2) is None
    # annotate adds the sentence to the event's detail and the record beside it; garbage changes nothing.
    event = {"rank": 1, "detail": "test x did not finish within 5 s"}
    hang.annotate(event, {0: waiting, 1: elsewhere}, 2)
    assert event["detail"].startswith("test x did not finish within 5 s; collective hang: rank 0 waits in init_process_group")
    assert event["collective"]["not_arrived"] == [1]
    event = {"rank": 0, "detail": "d"}
    hang.annotate(event, {0: "not a dump\x00", 1: ""}, 2)
    assert event == {"rank": 0, "detail": "d"}
