"""Starting the N rank processes of one session: built-in (one child per rank) or through torchrun.

Both expose the same small surface to the session monitor: `wait(timeout)`, `exit_codes()`,
`done()`, `signal_pids()` (the pytest process of each rank, for stack dumps) and `roots()` (what to
kill). The built-in one is exact; torchrun hides its workers behind its agent process, so there each
rank runs under infradev_rank_entry.py, which records the rank's pid and exit code in the out dir.
"""

import os
import queue
import subprocess
import threading
import time

from infradev_outputs import PYTEST_PREFIX, rank_file, read_json

from . import procs

ENTRY = os.path.join(procs.HERE, "infradev_rank_entry.py")


def rank_command(python, pytest_args):
    return [python] + PYTEST_PREFIX + list(pytest_args)


def _open_log(out_dir, name, session):
    log = open(os.path.join(out_dir, name), "ab")
    if session > 0:
        log.write(b"\n===== infradev: restart %d (session %d) =====\n" % (session, session))
        log.flush()
    return log


class BuiltinRanks:
    kind = "builtin"

    def __init__(self, cfg, env, session):
        self._exits = queue.Queue()
        self._codes = [None] * cfg.nproc
        self._times = [None] * cfg.nproc
        self.popens = []
        for rank in range(cfg.nproc):
            log = _open_log(cfg.out_dir, "rank%d.log" % rank, session)
            try:
                popen = subprocess.Popen(
                    rank_command(cfg.python, cfg.pytest_args),
                    env=procs.rank_env(env, rank),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own group: killpg takes the rank's whole tree
                )
            except OSError:
                procs.kill_tree(self.roots(), 1.0, self.tracked())
                for started in self.popens:
                    started.wait()
                raise
            finally:
                log.close()
            self.popens.append(popen)
            threading.Thread(target=self._wait_one, args=(rank, popen), daemon=True).start()

    def _wait_one(self, rank, popen):
        code = popen.wait()
        self._times[rank] = time.time()
        self._exits.put((rank, code))

    def wait(self, timeout):
        """Block until a rank exits or `timeout` s pass."""
        try:
            items = [self._exits.get(timeout=timeout)]
        except queue.Empty:
            return
        while True:
            for rank, code in items:
                self._codes[rank] = code
            try:
                items = [self._exits.get_nowait()]
            except queue.Empty:
                return

    def exit_codes(self):
        return list(self._codes)

    def exit_times(self):
        return list(self._times)

    def done(self):
        return all(c is not None for c in self._codes)

    def signal_pids(self):
        return [p.pid if c is None else None for p, c in zip(self.popens, self._codes)]

    def roots(self):
        return [p.pid for p in self.popens]

    def tracked(self):
        return {p.pid for p in self.popens}

    def start_failure(self):
        return None


class TorchrunRanks:
    """torchrun's agent is our only child; the ranks are its workers."""

    kind = "torchrun"

    def __init__(self, cfg, env, session):
        self.cfg = cfg
        self._code = None
        self._done = threading.Event()
        cmd = [
            cfg.python, "-m", "torch.distributed.run",
            "--nnodes", "1", "--nproc_per_node", str(cfg.nproc), "--max_restarts", "0",
            "--master_addr", "127.0.0.1", "--master_port", env["MASTER_PORT"],
            ENTRY, cfg.out_dir, "--",
        ] + list(cfg.pytest_args)
        agent_env = dict(env)
        for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR"):
            agent_env.pop(name, None)
        log = _open_log(cfg.out_dir, "torchrun.log", session)
        try:
            self.agent = subprocess.Popen(
                cmd, env=agent_env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        finally:
            log.close()
        threading.Thread(target=self._wait_agent, daemon=True).start()

    def _wait_agent(self):
        self._code = self.agent.wait()
        self._done.set()

    def wait(self, timeout):
        self._done.wait(timeout)

    def _entry(self, rank, what):
        return read_json(rank_file(self.cfg.out_dir, rank, what + ".json"))

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

    def start_failure(self):
        """A message when torchrun itself died before starting any rank (Debian's torchrun on Python
        3.11 does), else None."""
        if not self._done.is_set() or any(self._entry(r, "entry") for r in range(self.cfg.nproc)):
            return None
        try:
            with open(os.path.join(self.cfg.out_dir, "torchrun.log"), "rb") as f:
                lines = [l for l in f.read().decode("utf-8", "replace").splitlines() if l.strip()]
        except OSError:
            lines = []
        last = lines[-1].strip() if lines else "no output"
        return "torchrun exited with code %s before starting any rank: %s" % (self._code, last)


def start_ranks(cfg, launcher, env, session):
    cls = TorchrunRanks if launcher == "torchrun" else BuiltinRanks
    return cls(cfg, env, session)

