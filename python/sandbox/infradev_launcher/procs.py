"""Processes: free ports, the ranks' environment, and killing whole process trees (Linux /proc)."""

import os
import time

import _socket  # not `socket`: its import costs ~12 ms, paid before the ranks start

# NVLink multicast (NVLS / symmetric-memory multicast) must stay off on our GPU machines.
ALWAYS_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/sandbox


def free_port():
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def base_env(nproc, port, out_dir, session):
    """Environment shared by every rank (the per-rank variables are added by the caller)."""
    env = dict(os.environ)
    env.update(ALWAYS_ENV)
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = HERE + (os.pathsep + path if path else "")
    env.update(
        {
            "WORLD_SIZE": str(nproc),
            "LOCAL_WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "INFRADEV_OUT_DIR": out_dir,
            "INFRADEV_SESSION": str(session),
            "INFRADEV_LAUNCHER_PID": str(os.getpid()),
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.pop("INFRADEV_SKIP_FILE", None)  # the skip list travels in the rank spec
    # As torchrun does: N ranks each using every core would oversubscribe the machine.
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    return env


def rank_env(env, rank):
    env = dict(env)
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "GROUP_RANK": "0"})
    return env


_SUBREAPER = []  # [True] once prctl succeeded


HARDENING = {}  # what harden() managed: {"non_dumpable": bool, "subreaper": bool, "seccomp": bool}


def harden():
    """Before any rank starts (infradev_guard.harden): make the launcher non-dumpable (processes of
    the same user, i.e. the code under test, can no longer ptrace it or open /proc/<launcher>/fd/*,
    its environ or mem, so they cannot write into the stdout that carries the result bundle), a
    child subreaper (orphaned grandchildren are re-parented to us instead of init, so kill_tree still
    finds them), and install the seccomp filter every rank inherits (no ptrace, process_vm_*,
    pidfd_getfd, kcmp, personality changes). Returns HARDENING."""
    from infradev_guard import harden as guard

    got = guard()
    if got["subreaper"] and not _SUBREAPER:
        _SUBREAPER.append(True)
    HARDENING.update(got)
    return HARDENING


def become_subreaper():
    return harden()["subreaper"]


def surely_no_descendants():
    """True when, as a subreaper whose tracked children are all reaped, we have no child at all:
    then nothing of the ranks' trees is left (an orphan would have been re-parented to us). A cheap
    test that spares the /proc scan after a clean session."""
    if not _SUBREAPER:
        return False
    try:
        pid, _status = os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return True
    return False  # a child exists (or was an orphan zombie, now reaped): do the full sweep


def _proc_table():
    """pid -> (ppid, pgid, sid, state) for every process we can see."""
    table = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                data = f.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2:].split()  # the command name may hold spaces and parens
        try:
            table[int(name)] = (int(rest[1]), int(rest[2]), int(rest[3]), rest[0].decode())
        except (IndexError, ValueError):
            continue
    return table


def tree_pids(roots):
    """Live (non-zombie) processes that descend from `roots` or share a root's session."""
    roots = set(roots)
    table = _proc_table()
    children = {}
    for pid, (ppid, _pgid, _sid, _state) in table.items():
        children.setdefault(ppid, []).append(pid)
    found = set()
    me = os.getpid()
    stack = [p for p in roots if p in table]
    stack += [pid for pid, (_pp, _pg, sid, _st) in table.items() if sid in roots]
    # Orphans of the ranks' trees are re-parented to us (subreaper), even those that left the
    # rank's session: every child of ours is part of the run.
    stack += children.get(me, [])
    while stack:
        pid = stack.pop()
        if pid in found:
            continue
        found.add(pid)
        stack.extend(children.get(pid, ()))
    found.discard(me)
    return {pid for pid in found if table.get(pid, ("", "", "", "Z"))[3] != "Z"}


def _signal(pids, sig, groups=()):
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def reap_orphans(tracked):
    """Collect zombies re-parented to us (subreaper) that no Popen object waits for."""
    table = _proc_table()
    me = os.getpid()
    for pid, (ppid, _pg, _sid, state) in table.items():
        if ppid == me and state == "Z" and pid not in tracked:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def kill_tree(roots, term_grace_s=2.0, tracked=()):
    """SIGTERM every process of the ranks' trees (their groups and every descendant), then SIGKILL
    whatever is left after term_grace_s. Returns the number of processes still alive (0 normally)."""
    import signal

    roots = [p for p in roots if p]
    pids = tree_pids(roots)
    _signal(pids, signal.SIGTERM, groups=roots)
    deadline = time.monotonic() + term_grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        reap_orphans(tracked)
        pids = tree_pids(roots)
    kill_deadline = time.monotonic() + 5.0
    while pids and time.monotonic() < kill_deadline:
        _signal(pids, signal.SIGKILL, groups=roots)
        time.sleep(0.05)
        reap_orphans(tracked)
        pids = tree_pids(roots)
    return len(pids)
