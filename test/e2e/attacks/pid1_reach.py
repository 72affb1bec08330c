# Red team (issue 21, class 1): everything a rank can try against the sandbox's pid 1 and the launcher
# to learn the bundle nonce or get a writable copy of the launcher's stdout: in the rank itself, and
# in a child process of the rank (which has no audit hook: only the kernel's answers count there).
# What it reached is printed into the rank's log at exit (pytest captures output while it collects).
import atexit as _atexit
import subprocess as _subprocess
import sys as _sys

_PROBE = r'''
import os, re
found = []
for pid in sorted({1, os.getppid()}):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            env = f.read()
        m = re.search(rb"INFRADEV_BUNDLE_NONCE=([0-9a-f]+)", env)
        found.append("environ%d=%s" % (pid, ("NONCE:" + m.group(1).decode()) if m else "readable"))
    except Exception as e:
        found.append("environ%d=denied(%s)" % (pid, type(e).__name__))
    try:
        fd = os.open("/proc/%d/fd/1" % pid, os.O_WRONLY)
        os.close(fd)
        found.append("stdout%d=ok" % pid)
    except Exception as e:
        found.append("stdout%d=denied(%s)" % (pid, type(e).__name__))
try:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    for pid in sorted({1, os.getppid()}):
        seize = libc.syscall(101, 0x4206, pid, 0, 0)  # ptrace(PTRACE_SEIZE)
        if seize == 0:
            libc.syscall(101, 0x4207, pid, 0, 0)  # PTRACE_INTERRUPT
            os.waitpid(pid, 0x40000000)
            libc.syscall(101, 17, pid, 0, 0)  # PTRACE_DETACH
        found.append("ptrace%d=%s" % (pid, "ok" if seize == 0 else "denied"))
        pidfd = libc.syscall(434, pid, 0)  # pidfd_open
        got = libc.syscall(438, pidfd, 1, 0) if pidfd >= 0 else -1  # pidfd_getfd(pidfd, 1)
        found.append("getfd%d=%s" % (pid, "ok" if got >= 0 else "denied"))
        buf = ctypes.create_string_buffer(16)
        local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
        remote = (ctypes.c_void_p * 2)(0x400000, 16)
        r = libc.syscall(310, pid, local, 1, remote, 1, 0)  # process_vm_readv
        found.append("vmread%d=%s" % (pid, "ok" if r >= 0 or ctypes.get_errno() == 14 else "denied"))
except Exception as e:
    found.append("ctypes=%s" % type(e).__name__)
'''


def _reach():
    ns = {}
    try:
        exec(_PROBE, ns)
        found = ["rank:" + x for x in ns.get("found", [])]
    except Exception as e:  # noqa: BLE001
        found = ["rank:%s" % type(e).__name__]
    try:
        child = _subprocess.run([_sys.executable, "-S", "-c", _PROBE + "\nprint(' '.join(found))"], capture_output=True, text=True, timeout=60)
        found += ["child:" + x for x in child.stdout.split()]
    except Exception as e:  # noqa: BLE001
        found.append("child:%s" % type(e).__name__)
    return found


def _say(found):
    _sys.stderr.write("PID1-REACH %s\n" % " ".join(found))
    _sys.stderr.flush()


_atexit.register(_say, _reach())
