"""The seccomp filter every rank inherits (python/sandbox/infradev_guard.py): the calls that reach
into another process fail with EPERM; ordinary calls and a personality query still work."""

import os
import subprocess
import sys

GUARD = os.path.join(os.path.dirname(__file__), "..", "..", "python", "sandbox", "infradev_guard.py")

PROBE = r'''
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = {"x86_64": dict(ptrace=101, personality=135, pvr=310, pvw=311, kcmp=312, getfd=438, pidfd_open=434, getpid=39),
      "aarch64": dict(ptrace=117, personality=92, pvr=270, pvw=271, kcmp=272, getfd=438, pidfd_open=434, getpid=172)}[os.uname().machine]
def call(nr, *a):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *[ctypes.c_ulong(x) for x in a])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
child = os.fork()
if child == 0:
    import time; time.sleep(5); os._exit(0)
pidfd = os.pidfd_open(child)
out = {
    "ptrace_seize": call(NR["ptrace"], 0x4206, child, 0, 0),
    "process_vm_readv": call(NR["pvr"], child, 0, 0, 0, 0, 0),
    "process_vm_writev": call(NR["pvw"], child, 0, 0, 0, 0, 0),
    "kcmp": call(NR["kcmp"], os.getpid(), child, 0, 0, 0),
    "pidfd_getfd": call(NR["getfd"], pidfd, 0, 0),
    "personality_set": call(NR["personality"], 0x0040000),
    "personality_query": call(NR["personality"], 0xFFFFFFFF),
    "getpid": call(NR["getpid"]),
}
os.kill(child, 9)
print(out)
'''


def test_the_filter_refuses_cross_process_calls_and_nothing_else():
    r = subprocess.run([sys.executable, "-S", GUARD, sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    out = eval(r.stdout.strip())  # noqa: S307 - our own probe's dict
    for name in ("ptrace_seize", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "personality_set"):
        assert out[name] == "EPERM", out
    assert out["personality_query"] == "ok" and out["getpid"] == "ok", out


def test_without_the_filter_the_same_calls_are_not_refused_by_it():
    """The control: outside the filter none of these fails with EPERM from seccomp (ptrace of our own
    child is allowed; the zero-length process_vm_readv returns 0)."""
    r = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    out = eval(r.stdout.strip())  # noqa: S307
    assert out["ptrace_seize"] == "ok" and out["process_vm_readv"] == "ok", out
