"""Rank > 0 connects to rank 0's rendezvous store only once rank 0 listens.

torch's TCPStore client (torch 1.13) retries a refused connection once a second: when rank 1 reaches
`init_process_group` a few milliseconds before rank 0 has started its store, rank 1 sleeps a whole
second and rank 0 waits for it — up to a second of every multi-rank session, paid on every grade.
This wraps `init_process_group` (on torch.distributed and distributed_c10d, once) so that a rank other
than 0, rendezvousing through the environment (`env://`) on this host, first waits until MASTER_PORT
is listening — read from /proc/net/tcp{,6} every few milliseconds, no connection made, so the store
sees nothing it would not see anyway — then calls the original with the same arguments. Anything
else (another init method, a store given, a remote master, no /proc) calls the original at once, and
so does a wait that runs out (WAIT_S): the original then retries as it always does.
"""

import functools
import os
import time

WAIT_S = 30.0
POLL_S = 0.005
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column
_LOCAL = ("127.0.0.1", "localhost", "::1", "0.0.0.0")


def listening(port):
    """Whether some socket of this network namespace listens on TCP `port` (None: cannot tell)."""
    seen = False
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, "rb") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        seen = True
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == _LISTEN.encode() and int(fields[1].rsplit(b":", 1)[1], 16) == port:
                return True
    return False if seen else None


def _rank(args, kwargs):
    """The rank init_process_group will use: its `rank` argument, else RANK."""
    rank = kwargs.get("rank", args[4] if len(args) > 4 else -1)
    if isinstance(rank, int) and rank >= 0:
        return rank
    try:
        return int(os.environ.get("RANK", "-1"))
    except ValueError:
        return -1


def wait_for_master(args, kwargs):
    """Before rank > 0 rendezvouses on this host through the environment: until rank 0 listens (or WAIT_S)."""
    init_method = kwargs.get("init_method", args[1] if len(args) > 1 else None)
    store = kwargs.get("store", args[5] if len(args) > 5 else None)
    if store is not None or init_method not in (None, "env://") or _rank(args, kwargs) <= 0:
        return
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or os.environ.get("MASTER_ADDR") not in _LOCAL:
        return
    try:
        port = int(os.environ.get("MASTER_PORT", ""))
    except ValueError:
        return
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        state = listening(port)
        if state is not False:  # listening, or no /proc to tell
            return
        time.sleep(POLL_S)


def wrap(original):
    @functools.wraps(original)
    def init_process_group(*args, **kwargs):
        wait_for_master(args, kwargs)
        return original(*args, **kwargs)

    init_process_group._infradev_rendezvous = True
    return init_process_group


def install(modules):
    """Wrap init_process_group on each module that has it (the same wrapper for the same original)."""
    made = {}
    for mod in modules:
        current = getattr(mod, "init_process_group", None)
        if current is None or getattr(current, "_infradev_rendezvous", False):
            continue
        wrapper = made.get(id(current))
        if wrapper is None:
            wrapper = made[id(current)] = wrap(current)
        setattr(mod, "init_process_group", wrapper)
