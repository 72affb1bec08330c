"""Process hardening inside the sandbox: non-dumpable processes and the ranks' seccomp filter.

The launcher calls `harden()` before any rank exists; every rank and everything it starts inherits
the seccomp filter (filters survive fork and exec and cannot be removed). The filter refuses (EPERM)
the system calls that reach into another process: ptrace, process_vm_readv / process_vm_writev,
pidfd_getfd, kcmp, and personality changes (a query, personality(0xffffffff), is allowed), plus every
system call of a foreign ABI (x32, i386), where the same calls have other numbers.

Why an in-process filter rather than bwrap's `--seccomp FD`: the same code then holds on every
backend (bubblewrap, docker, none), the filter covers exactly the launcher's descendants (the ranks,
`pytest_run`, `measure`) and nothing of the host, and it is installed before any rank exists.
The launcher itself is non-dumpable (no process of the same user can ptrace it, open its /proc
files or pidfd_getfd from it); so is every rank (`non_dumpable()` from the rank boot), so that a
child of one rank cannot write into another's memory through /proc/<pid>/mem.

Standard library only, through _ctypes (0.4 ms) rather than ctypes (4-8 ms on every run's start).
"""

import os
import struct
import sys

PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2

# classic BPF
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_RET_K = 0x06
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM = 1

# (audit arch, {name: number}) per machine; seccomp_data: nr at 0, arch at 4, args[0] at 16.
_ARCHES = {
    "x86_64": (0xC000003E, {"ptrace": 101, "personality": 135, "process_vm_readv": 310, "process_vm_writev": 311,
                            "kcmp": 312, "pidfd_getfd": 438}),
    "aarch64": (0xC00000B7, {"ptrace": 117, "personality": 92, "process_vm_readv": 270, "process_vm_writev": 271,
                             "kcmp": 272, "pidfd_getfd": 438}),
}
X32_SYSCALL_BIT = 0x40000000
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp")


def _prctl_function():
    """libc's prctl taking unsigned longs (a pointer fits), or None."""
    try:
        import _ctypes

        class _ULong(_ctypes._SimpleCData):
            _type_ = "L"

        class _Int(_ctypes._SimpleCData):
            _type_ = "i"

        class _Fn(_ctypes.CFuncPtr):
            _flags_ = _ctypes.FUNCFLAG_CDECL | _ctypes.FUNCFLAG_USE_ERRNO
            _restype_ = _Int
            _argtypes_ = (_ULong, _ULong, _ULong, _ULong, _ULong)

        return _Fn(_ctypes.dlsym(_ctypes.dlopen(None, 2), "prctl"))
    except Exception:  # noqa: BLE001 - no libc prctl here: nothing is hardened, and harden() says so
        return None


def _buffer(data):
    """A C buffer holding `data` (kept alive by the caller) and its address."""
    import _ctypes

    class _Char(_ctypes._SimpleCData):
        _type_ = "c"

    class _Buf(_ctypes.Array):
        _type_ = _Char
        _length_ = max(1, len(data))

    buf = _Buf.from_buffer_copy(data.ljust(_Buf._length_, b"\0"))
    return buf, _ctypes.addressof(buf)


def _ins(code, k, jt=0, jf=0):
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program(machine=None):
    """The classic-BPF program (bytes) for this machine, or None for a machine we have no table for."""
    entry = _ARCHES.get(machine or os.uname().machine)
    if entry is None:
        return None
    arch, nrs = entry
    body = []
    # Each entry: (instruction, jump-to-deny when true?) resolved once the length is known.
    body.append(("ld", 4))
    body.append(("jne_deny", arch))
    body.append(("ld", 0))
    if arch == 0xC000003E:
        body.append(("jge_deny", X32_SYSCALL_BIT))
    for name in DENIED:
        body.append(("jeq_deny", nrs[name]))
    body.append(("jeq_next_personality", nrs["personality"]))
    body.append(("allow", None))
    # personality: allowed only as a query
    body.append(("ld", 16))
    body.append(("jeq_allow_else_deny", 0xFFFFFFFF))
    body.append(("allow", None))
    body.append(("deny", None))
    deny_at = len(body) - 1
    out = []
    for i, (op, k) in enumerate(body):
        to_deny = deny_at - i - 1
        if op == "ld":
            out.append(_ins(_LD_W_ABS, k))
        elif op == "jne_deny":
            out.append(_ins(_JEQ_K, k, 0, to_deny))
        elif op == "jge_deny":
            out.append(_ins(_JGE_K, k, to_deny, 0))
        elif op == "jeq_deny":
            out.append(_ins(_JEQ_K, k, to_deny, 0))
        elif op == "jeq_next_personality":
            out.append(_ins(_JEQ_K, k, 1, 0))  # personality: skip the allow below
        elif op == "jeq_allow_else_deny":
            out.append(_ins(_JEQ_K, k, 0, 1))
        elif op == "allow":
            out.append(_ins(_RET_K, SECCOMP_RET_ALLOW))
        elif op == "deny":
            out.append(_ins(_RET_K, SECCOMP_RET_ERRNO | EPERM))
    return b"".join(out)


def install_filter(prctl):
    """no_new_privs + the filter on this process (and so on everything it starts). True on success."""
    prog = filter_program()
    if prog is None or prctl is None:
        return False
    try:
        buf, addr = _buffer(prog)
        fprog, fprog_addr = _buffer(struct.pack("=HxxxxxxQ" if struct.calcsize("P") == 8 else "=HxxI", len(prog) // 8, addr))
        if prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        ok = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fprog_addr, 0, 0) == 0
        del buf, fprog
        return ok
    except Exception:  # noqa: BLE001
        return False


def non_dumpable(prctl=None):
    """PR_SET_DUMPABLE 0 on this process: no other process of the same user can ptrace it or open
    its /proc/<pid>/mem, environ or fd. True when it holds."""
    prctl = prctl or _prctl_function()
    if prctl is None:
        return False
    try:
        return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0 and prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
    except Exception:  # noqa: BLE001
        return False


def harden(subreaper=True, seccomp=True):
    """The launcher's hardening, before any rank exists: {"non_dumpable", "subreaper", "seccomp"}."""
    prctl = _prctl_function()
    out = {"non_dumpable": non_dumpable(prctl), "subreaper": False, "seccomp": False}
    if prctl is not None and subreaper:
        try:
            out["subreaper"] = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
        except Exception:  # noqa: BLE001
            pass
    if seccomp:
        out["seccomp"] = install_filter(prctl)
    return out


if __name__ == "__main__":  # `python3 infradev_guard.py CMD...`: CMD under the filter (for tests)
    h = harden(subreaper=False)
    if not h["seccomp"]:
        sys.stderr.write("infradev_guard: could not install the filter\n")
        sys.exit(3)
    os.execvp(sys.argv[1], sys.argv[1:])
