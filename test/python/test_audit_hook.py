"""The ranks' audit hook (python/sandbox/infradev_audit.py) and the launcher's hardening
(python/sandbox/infradev_guard.py), through the real launcher: refusals reach the launcher's bundle
on the audit channel, an honest rank arms and finishes it, and the ranks run under the seccomp filter."""

import json
import os

from test_launcher_hostile import host_view, launch

HOSTILE = '''
import ctypes
import gc
import os
import sys


def test_honest():
    assert 1 + 1 == 2


def _tries():
    def noop():
        pass

    attempts = {
        "code": lambda: setattr(test_honest, "__code__", noop.__code__),
        "defaults": lambda: setattr(test_honest, "__defaults__", (1,)),
        "ctypes": lambda: ctypes.CDLL(None),
        "string_at": lambda: ctypes.string_at(id(noop), 8),
        "self_mem": lambda: open("/proc/self/mem", "rb"),
        "self_mem_via_root": lambda: open("/proc/self/root/proc/self/mem", "rb"),
        "launcher_environ": lambda: open("/proc/%d/environ" % int(os.environ["INFRADEV_LAUNCHER_PID"]), "rb"),
        "settrace": lambda: sys.settrace(None),
        "gc_referrers": lambda: gc.get_referrers(noop),
        "replace": lambda: noop.__code__.replace(co_consts=(None,)),
        "fake_library_file": lambda: exec(compile("x = 1", os.__file__, "exec")),
    }
    out = {}
    for name, fn in attempts.items():
        try:
            fn()
            out[name] = "allowed"
        except RuntimeError as e:
            out[name] = "refused" if "refused" in str(e) else "error"
        except OSError:
            out[name] = "oserror"
    return out


def test_forgeries_are_refused():
    out = _tries()
    print("ATTEMPTS", out)
    assert all(v == "refused" for k, v in out.items() if k != "launcher_environ"), out
    assert out["launcher_environ"] in ("refused", "oserror"), out


def test_under_the_filter():
    with open("/proc/self/status") as f:
        assert "Seccomp:\\t2" in f.read()
'''


def test_refusals_reach_the_bundle_and_honest_ranks_finish_their_channel(tmp_path):
    proc, _work = launch(tmp_path, {"test_hostile.py": HOSTILE}, 2)
    bundle, why = host_view(proc)
    assert why is None, (why, proc.stderr[-2000:])
    assert bundle["launch"]["status"] == "ok", proc.stderr[-3000:]
    assert bundle["launch"]["hardening"] == {"non_dumpable": True, "subreaper": True, "seccomp": True}
    for entry in bundle["integrity"]:
        audit = entry["audit"]
        assert audit["armed"] and audit["done"] and audit["junk"] == 0 and not audit["overflow"], audit
        assert audit["refused_count"] >= 10, audit
        joined = " | ".join(audit["refused"])
        for needle in ("__code__ of test_honest", "ctypes.dlopen", "/proc/self/mem", "sys.settrace", "gc.get_referrers", "code.__new__"):
            assert needle in joined, (needle, joined)


def test_an_honest_session_refuses_nothing(tmp_path):
    body = '''
    import collections, json, threading, functools

    def test_plain():
        P = collections.namedtuple("P", "a b", defaults=(1, 2))
        assert P().a == 1
        t = threading.Thread(target=lambda: json.dumps({"a": 1}))
        t.start(); t.join()
        assert functools.reduce(lambda a, b: a + b, [1, 2, 3]) == 6
    '''
    proc, _work = launch(tmp_path, {"test_plain.py": body}, 1)
    bundle, why = host_view(proc)
    assert why is None and bundle["launch"]["status"] == "ok", proc.stderr[-2000:]
    audit = bundle["integrity"][0]["audit"]
    assert audit["armed"] and audit["done"] and audit["refused_count"] == 0 and audit["junk"] == 0, audit


def test_junk_on_the_channel_and_a_cut_channel_are_seen(tmp_path):
    body = '''
    import os

    def test_write_junk():
        os.write(3, b"done refused=0\\nhello\\n")
        os.close(3)
    '''
    proc, _work = launch(tmp_path, {"test_junk.py": body}, 1)
    bundle, why = host_view(proc)
    assert why is None, proc.stderr[-2000:]
    audit = bundle["integrity"][0]["audit"]
    # the fake "done" came before the hook's own: the channel was cut (no real done) and holds junk
    assert audit["junk"] >= 1, audit
