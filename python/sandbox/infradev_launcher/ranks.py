"""Starting the N rank processes of one session: built-in (one child per rank) or through torchrun.

Both expose the same small surface to the session monitor: `wait(timeout)`, `exit_codes()`,
`done()`, `signal_pids()` (the pytest process of each rank, for stack dumps) and `roots()` (what to
kill). The built-in one is exact; torchrun hides its workers behind its agent process, so there each
rank runs under infradev_rank_entry.py, which records the rank's pid and exit code in the out dir.

Every rank runs `python -s infradev_rank_boot.py` (see that file): its pytest arguments come in a
spec on its stdin (a sealed memfd), not in argv.

The built-in ranks are started with posix_spawn and watched through pidfds, not with subprocess and
a waiter thread each: everything the launcher imports before the ranks start adds to the wall time
of every run, and subprocess + threading + queue cost about 15 ms of start-up. The rest of the
launcher loads while the ranks import pytest.
"""

import os
import select
import time

from infradev_outputs import RANK_BOOT, SPEC_ENV, SPEC_HEX_ENV, encode_spec, file_size, junit_name, open_append, rank_name, read_json, spec_fd

from . import procs

ENTRY = os.path.join(procs.HERE, "infradev_rank_entry.py")
AUDIT_CHILD_FD = 3
AUDIT_FD_ENV = "INFRADEV_AUDIT_FD"
BOOT = os.path.join(procs.HERE, RANK_BOOT)


def rank_command(python):
    # -s: no user site-packages (a .pth file there would run before the boot); see infradev_rank_boot.py
    return [python, "-s", BOOT]


def rank_spec(cfg, rank, session, skip):
    """The spec of one rank: the run's pytest args + pytest's own JUnit report for this rank and
    session (last, so it wins over one in the run's args); rank None: without it (torchrun's entry
    adds it, knowing its rank)."""
    args = list(cfg.pytest_args)
    if rank is not None:
        args.append("--junitxml=" + os.path.join(cfg.out_dir, junit_name(rank, session)))
    return encode_spec(args, cfg.plugins, sorted(skip), cfg.out_dir, session)


def _open_log(cfg, name, session):
    """(descriptor, size before this session) of a log appended across sessions."""
    fd = open_append(name, cfg.out_fd)
    start = os.fstat(fd).st_size
    if session > 0:
        os.write(fd, b"\n===== infradev: restart %d (session %d) =====\n" % (session, session))
    return fd, start


def _inherited_fds():
    """Descriptors above 2 that a child would inherit: subprocess closes them (close_fds), and so
    do we, so a rank never holds a pipe or socket of whoever started the launcher."""
    fds = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return fds
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    fds.append(fd)
            except OSError:  # the descriptor listdir itself used, closed by now
                pass
    return fds


def spawn(argv, env, log_fd, close_fds, stdin_fd=None, audit_fd=None):
    """Start argv in a new session (its own process group: killpg takes the rank's whole tree),
    stdin from stdin_fd (the rank spec) or /dev/null, stdout and stderr to log_fd, the audit
    channel's write end at fd 3 (infradev_audit.py). Returns the pid."""
    if stdin_fd is None:
        actions = [(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0)]
    else:
        actions = [(os.POSIX_SPAWN_DUP2, stdin_fd, 0)]
    actions += [(os.POSIX_SPAWN_DUP2, log_fd, 1), (os.POSIX_SPAWN_DUP2, log_fd, 2)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in close_fds if fd not in (log_fd, stdin_fd, audit_fd)]
    if audit_fd is not None:
        actions.append((os.POSIX_SPAWN_DUP2, audit_fd, AUDIT_CHILD_FD))
    start = os.posix_spawn if os.sep in argv[0] else os.posix_spawnp
    return start(argv[0], argv, env, file_actions=actions, setsid=True)


def _exit_code(status):
    """Like Popen.returncode: the exit code, or -N for a process killed by signal N."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class BuiltinRanks:
    kind = "builtin"

    def __init__(self, cfg, env, session, skip):
        self._codes = [None] * cfg.nproc
        self._times = [None] * cfg.nproc
        self.pids = []
        self.log_starts = []  # per rank: size of rank{r}.log before this session
        self._pidfds = {}  # pidfd -> rank, while the rank runs
        self._poll = None
        self._audit = []  # per rank: the read end of its audit channel (only the launcher holds it)
        argv = rank_command(cfg.python)
        env = dict(env, **{SPEC_ENV: "fd:0", AUDIT_FD_ENV: str(AUDIT_CHILD_FD)})
        close = _inherited_fds()
        for rank in range(cfg.nproc):
            spec = spec_fd(rank_spec(cfg, rank, session, skip))
            log = None
            audit_r, audit_w = os.pipe()
            os.set_blocking(audit_r, False)
            os.set_blocking(audit_w, False)  # a full channel drops the rank's lines, never blocks it
            self._audit.append(audit_r)
            try:
                log, start = _open_log(cfg, rank_name(rank, "log"), session)
                pid = spawn(argv, procs.rank_env(env, rank), log, close, stdin_fd=spec, audit_fd=audit_w)
            except OSError:
                procs.kill_tree(self.pids, 1.0, set(self.pids))
                for started in self.pids:
                    os.waitpid(started, 0)
                self.close_audit()
                raise
            finally:
                os.close(spec)
                os.close(audit_w)
                if log is not None:
                    os.close(log)
            self.pids.append(pid)
            self.log_starts.append(start)
        self._open_pidfds()

    def _open_pidfds(self):
        """A pidfd per rank turns readable when the rank exits, so wait() sleeps in poll() and wakes
        at once. Without pidfd_open (Linux < 5.3, or a seccomp filter refusing it) wait() polls
        waitpid every few milliseconds instead."""
        if not hasattr(os, "pidfd_open") or os.environ.get("INFRADEV_LAUNCHER_NO_PIDFD"):
            return
        fds = {}
        try:
            for rank, pid in enumerate(self.pids):
                fds[os.pidfd_open(pid)] = rank
        except OSError:
            for fd in fds:
                os.close(fd)
            return
        self._pidfds = fds
        self._poll = select.poll()
        for fd in fds:
            self._poll.register(fd, select.POLLIN)

    def _reap(self):
        """Record every rank that has exited; True if any did."""
        any_exit = False
        for rank, pid in enumerate(self.pids):
            if self._codes[rank] is not None:
                continue
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere (procs.reap_orphans only takes untracked pids)
                done, status = pid, 255 << 8
            if done == pid:
                self._codes[rank] = _exit_code(status)
                self._times[rank] = time.time()
                any_exit = True
        for fd, rank in list(self._pidfds.items()):
            if self._codes[rank] is not None:
                self._poll.unregister(fd)
                os.close(fd)
                del self._pidfds[fd]
        return any_exit

    def wait(self, timeout):
        """Block until a rank exits or `timeout` s pass."""
        deadline = time.monotonic() + timeout
        while not self._reap() and not self.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            if self._poll is not None:
                self._poll.poll(left * 1000.0)
            else:
                time.sleep(min(left, 0.005))

    def exit_codes(self):
        self._reap()
        return list(self._codes)

    def exit_times(self):
        return list(self._times)

    def done(self):
        return all(c is not None for c in self._codes)

    def signal_pids(self):
        return [pid if c is None else None for pid, c in zip(self.pids, self._codes)]

    def roots(self):
        return list(self.pids)

    def tracked(self):
        return set(self.pids)

    def start_failure(self):
        return None

    def audit_reports(self):
        """Each rank's audit channel (infradev_audit.parse_channel), read once its processes are gone."""
        from infradev_audit import CHANNEL_LIMIT, parse_channel

        out = []
        for fd in self._audit:
            chunks, total, overflow = [], 0, False
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    break
                if not chunk:
                    break
                total += len(chunk)
                if total > CHANNEL_LIMIT:
                    overflow = True
                    break
                chunks.append(chunk)
            out.append(parse_channel(b"".join(chunks), overflow))
        self.close_audit()
        return out

    def close_audit(self):
        for fd in self._audit:
            try:
                os.close(fd)
            except OSError:
                pass
        self._audit = []


class TorchrunRanks:
    """torchrun's agent is our only child; the ranks are its workers."""

    kind = "torchrun"

    def __init__(self, cfg, env, session, skip):
        import subprocess
        import threading

        self.cfg = cfg
        self._code = None
        self._done = threading.Event()
        cmd = [
            cfg.python, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc_per_node", str(cfg.nproc), "--max_restarts", "0",
            "--master_addr", "127.0.0.1", "--master_port", env["MASTER_PORT"],
            ENTRY,
        ]
        # torchrun closes every other descriptor of its workers: the spec goes through the agent's
        # environment to the entry, which hands it to its rank boot on a memfd and drops the variable.
        agent_env = dict(env, **{SPEC_HEX_ENV: rank_spec(cfg, None, session, skip).hex()})
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR"):
            agent_env.pop(name, None)
        # The ranks' logs are opened by the entry; their sizes now are where this session's part starts.
        self.log_starts = [file_size(rank_name(rank, "log"), cfg.out_fd) for rank in range(cfg.nproc)]
        log, _start = _open_log(cfg, "torchrun.log", session)
        try:
            self.agent = subprocess.Popen(
                cmd, env=agent_env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            os.close(log)
        threading.Thread(target=self._wait_agent, daemon=True).start()

    def _wait_agent(self):
        self._code = self.agent.wait()
        self._done.set()

    def wait(self, timeout):
        self._done.wait(timeout)

    def _entry(self, rank, what):
        """rank{r}.entry.json / exit.json with only integer fields kept (the ranks can write there)."""
        rec = read_json(rank_name(rank, what + ".json"), dir_fd=self.cfg.out_fd, cap=1 << 16)
        if not isinstance(rec, dict):
            return None
        return {k: v for k, v in rec.items()
                if not isinstance(v, bool) and (isinstance(v, int) or (k == "at" and isinstance(v, float)))}

    def exit_codes(self):
        codes = []
        for rank in range(self.cfg.nproc):
            rec = self._entry(rank, "exit")
            codes.append(rec.get("code") if rec else None)
        return codes

    def exit_times(self):
        return [(self._entry(rank, "exit") or {}).get("at") for rank in range(self.cfg.nproc)]

    def done(self):
        return self._done.is_set()

    def signal_pids(self):
        pids = []
        for rank, code in enumerate(self.exit_codes()):
            rec = self._entry(rank, "entry")
            pids.append(rec.get("pytest_pid") if rec and code is None else None)
        return pids

    def roots(self):
        return [self.agent.pid]

    def tracked(self):
        return {self.agent.pid}

    def audit_reports(self):
        """torchrun closes every descriptor but 0-2 of its workers: no channel (None per rank)."""
        return [None] * self.cfg.nproc

    def start_failure(self):
        """A message when torchrun itself died before starting any rank (Debian's torchrun on Python
        3.11 does), else None."""
        if not self._done.is_set() or any(self._entry(r, "entry") for r in range(self.cfg.nproc)):
            return None
        from infradev_outputs import read_bytes

        text = (read_bytes("torchrun.log", self.cfg.out_fd, cap=65536, tail=True) or b"").decode("utf-8", "replace")
        lines = [l for l in text.splitlines() if l.strip()]
        last = lines[-1].strip() if lines else "no output"
        return "torchrun exited with code %s before starting any rank: %s" % (self._code, last)


def start_ranks(cfg, launcher, env, session, skip):
    cls = TorchrunRanks if launcher == "torchrun" else BuiltinRanks
    return cls(cfg, env, session, skip)

