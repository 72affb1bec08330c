"""Which collective this rank's main thread is blocked in, for the launcher's desync detector.

Ranks that disagree about the collective they are in (one failed an assertion and went on to the
next test, one issued an extra all-reduce) wait in it until something kills them: on gloo, the
per-test limit (60 s for the bundled tasks). The launcher instead reads this record from every rank
(infradev_launcher/desync.py) and stops the session as soon as every live rank has stayed inside one
collective call for a while (`--desync-after`, 10 s by default) and the calls are not the same
collective instance: no rank can make progress, so nothing is lost by not waiting out the limit.

The record is a 64-byte file per rank (rank{r}.inflight), mapped into memory once, so that a
collective call costs two small stores (a file write per call would not do: a training step issues
hundreds). Written under a sequence lock (an odd version while a write is in progress); the launcher
retries a read that raced a write. Only calls on the main thread (where pytest runs the test) are
recorded: a collective on a helper thread may wait for the main thread's, which is not a deadlock.

What the code under test can do with this file -- it can write it -- decides only how soon its own
session is stopped: a forged record can make the launcher stop a session early (its own tests fail),
or never (the per-test limit applies as before); it cannot change another session's verdict.

Stdlib only: this runs inside the sandbox before any repository code.
"""

import mmap
import os
import struct
import threading

# version (seqlock), depth (main-thread public collective calls in progress), calls (outermost calls
# entered this session), test index (run order, -1 before the first test), calls in this test, op.
LAYOUT = struct.Struct("<QQQqQ24s")
SIZE = LAYOUT.size  # 64
OP_BYTES = 24

_MAIN = threading.main_thread().ident


class Inflight:
    """The writer: one per rank process (the pytest plugin opens it under the launcher)."""

    def __init__(self, fd):
        os.ftruncate(fd, SIZE)
        self._map = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._version = 0
        self._depth = 0
        self._calls = 0
        self._test = -1
        self._test_calls = 0
        self._op = b""
        self._write()

    def _write(self):
        self._version += 1  # odd: a write is in progress
        struct.pack_into("<Q", self._map, 0, self._version)
        LAYOUT.pack_into(self._map, 0, self._version, self._depth, self._calls, self._test, self._test_calls, self._op)
        self._version += 1
        struct.pack_into("<Q", self._map, 0, self._version)

    def begin_test(self, index):
        self._test = -1 if index is None else int(index)
        self._test_calls = 0
        self._write()

    def enter(self, op):
        """A public collective call begins; returns whether it is recorded (leave() must follow)."""
        if threading.get_ident() != _MAIN:
            return False
        self._depth += 1
        if self._depth == 1:
            self._calls += 1
            self._test_calls += 1
            self._op = op.encode("ascii", "replace")[:OP_BYTES]
            self._write()
        return True

    def leave(self):
        self._depth -= 1
        if self._depth == 0:
            self._write()

    def close(self):
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass


def parse(data):
    """(depth, calls, test index, calls in test, op) from a record's bytes, or None when it is
    missing, short or was being written."""
    if data is None or len(data) < SIZE:
        return None
    version, depth, calls, test, test_calls, op = LAYOUT.unpack_from(data, 0)
    if version % 2:
        return None
    return depth, calls, test, test_calls, op.rstrip(b"\0").decode("ascii", "replace")
