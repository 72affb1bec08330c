"""The desync detector: stop a session whose ranks are stuck in different collectives at once, not
after the per-test limit.

Every rank's main thread records the public torch.distributed call it is inside (rank{r}.inflight,
infradev_inflight.py): how many outermost calls it has entered, the test (run order) and the
call's number within that test, and the op. The launcher polls those records; when every rank is
alive and running a test, has been inside one and the same call (its count unchanged) for at least
`--desync-after` seconds, and the calls are not all one collective instance (same test, same number
within it, same op), no rank can return: each waits for peers that are inside other calls. The session
is then stopped as a hang, blaming the test the per-test limit would have blamed (the earliest any
rank is running), with the calls each rank is in named in the event.

Why this is sound: a rank blocked inside a collective returns only when its peers take part in the
same instance. Ranks that are all blocked in *the same* instance may be slow (a large transfer on a
loaded machine), so that case is left to the per-test limit. Ranks blocked in different instances
can be transiently so (a rank that finished a broadcast's send went on to the next collective while
its peer still receives), but then the peer returns within the time a transfer takes; after
`--desync-after` seconds (default 10, far beyond any transfer the CPU tasks make over loopback) with
no rank's count moving, none will. Async work (a handle waited on later), collectives on helper
threads and calls the Python wrappers do not see (DDP's C++ reducer, NCCL's stream-ordered calls)
are not "inside" a call here: such a session waits for the per-test limit as before. A rank that is
not inside a collective (computing, sleeping, between tests) never counts as stuck here either.

The records are written by processes the code under test runs in: a forged one can make the launcher
stop that session early (its own tests are then killed) or not at all (the per-test limit applies).
The decision only ever stops a session; it never marks a test passed.
"""

import infradev_inflight as _inflight
from infradev_outputs import STATE_RUNNING, rank_name, read_bytes

_READ_TRIES = 3


def read_record(cfg, rank):
    """One rank's parsed record, or None (missing, torn by a concurrent write, malformed)."""
    name = rank_name(rank, "inflight")
    for _ in range(_READ_TRIES):
        first = read_bytes(name, cfg.out_fd, cap=_inflight.SIZE)
        second = read_bytes(name, cfg.out_fd, cap=_inflight.SIZE)
        if first is not None and first == second:
            return _inflight.parse(first)
    return None


class DesyncWatch:
    """Polled by the session's watch loop; `check()` returns (rank to blame, test, detail, ranks) once
    the ranks are stuck in different collectives, else None."""

    def __init__(self, cfg, after_s, reader=read_record):
        self.cfg = cfg
        self.after_s = after_s
        self.reader = reader
        self.seen = {}  # rank -> (calls count, wall clock when first seen inside that call)

    def check(self, states, codes, now):
        if self.cfg.nproc < 2:
            return None
        calls = {}
        for rank, (state, code) in enumerate(zip(states, codes)):
            record = self.reader(self.cfg, rank) if code is None and state and state.get("state") == STATE_RUNNING else None
            if record is None or record[0] <= 0:
                self.seen.clear()
                return None
            depth, count, test, test_calls, op = record
            previous = self.seen.get(rank)
            if previous is None or previous[0] != count:
                self.seen[rank] = (count, now)
            calls[rank] = (test, test_calls, op, state.get("nodeid"), state.get("index"))
        stuck_for = now - max(since for _count, since in self.seen.values())
        if stuck_for < self.after_s:
            return None
        if len({c[:3] for c in calls.values()}) == 1:
            return None  # one instance, maybe slow: the per-test limit decides
        # Blame what the per-test limit would: the earliest test (run order) a rank is running.
        order = sorted(calls, key=lambda r: (calls[r][4] if isinstance(calls[r][4], int) else 1 << 30, r))
        blamed_rank = order[0]
        test = calls[blamed_rank][3]
        where = "; ".join(
            "rank %d in %s (call %d of %s)" % (r, c[2] or "?", c[1], c[3] if c[3] == test else "later test %s" % c[3])
            for r, c in sorted(calls.items())
        )
        detail = (
            "%s: ranks desynchronised, every rank blocked in a different collective call for %.0f s "
            "(stopped before the per-test limit of %g s): %s" % (test, stuck_for, self.cfg.per_test_timeout or 0, where)
        )
        stuck = sorted(r for r, c in calls.items() if c[3] == test)
        return blamed_rank, test, detail, stuck, stuck_for

