"""`measure()`: calls and payload bytes of collectives, peak memory and wall time of one block."""

import collections

from . import _collectives, _memory


class Measurement:
    """What one `with measure() as m:` block saw on this rank.

    calls / bytes are Counters keyed by op name (unknown ops read 0) and fill in while the block runs;
    the other fields are set when the block exits.
    """

    def __init__(self, device=None, memory="auto"):
        if memory not in ("auto", "cuda", "host"):
            raise ValueError("measure(memory=...) must be 'auto', 'cuda' or 'host' (got %r)" % (memory,))
        self._memory = memory
        self.calls = collections.Counter()
        self.bytes = collections.Counter()
        self.wall_time_s = None
        self.peak_memory_bytes = None
        self.peak_memory_delta_bytes = None
        self.reserved_memory_bytes = None
        self.memory_kind = None
        self.memory_method = None
        self._device = device
        self._tracker = None
        self._t0 = None

    def __enter__(self):
        torch = _memory.cuda_module() if self._memory != "host" else None
        if self._memory == "cuda" and torch is None:
            torch = _memory.cuda_module(initialise=True)
        if torch is not None:
            self._tracker = _memory.CudaPeak(torch, self._device)
        else:
            self._tracker = _memory.HostPeak()
        self._tracker.start()
        _collectives.push_recorder(self)
        self._t0 = _memory.now()
        return self

    def __exit__(self, exc_type, exc, tb):
        torch = _memory.cuda_module()
        if torch is not None:
            torch.cuda.synchronize()  # the block's kernels belong to its wall time
        self.wall_time_s = _memory.now() - self._t0
        _collectives.pop_recorder(self)
        tracker = self._tracker
        if tracker.kind == "host_rss" and torch is not None and self._memory == "auto":
            # The block initialised CUDA: its device memory is what matters, not host RSS.
            tracker.stop()
            tracker = _memory.LateCudaPeak(torch)
        peak, delta, reserved = tracker.stop()
        self.peak_memory_bytes = peak
        self.peak_memory_delta_bytes = delta
        self.reserved_memory_bytes = reserved
        self.memory_kind = tracker.kind
        self.memory_method = tracker.method
        return False

    def as_dict(self):
        return {
            "wall_time_s": self.wall_time_s,
            "peak_memory_bytes": self.peak_memory_bytes,
            "peak_memory_delta_bytes": self.peak_memory_delta_bytes,
            "reserved_memory_bytes": self.reserved_memory_bytes,
            "memory_kind": self.memory_kind,
            "memory_method": self.memory_method,
            "calls": dict(self.calls),
            "bytes": dict(self.bytes),
        }

    def __repr__(self):
        return "Measurement(%r)" % (self.as_dict(),)


def measure(device=None, memory="auto"):
    """Context manager: `with measure() as m: ...` then m.calls["all_reduce"], m.bytes["all_reduce"],
    m.peak_memory_bytes, m.peak_memory_delta_bytes, m.wall_time_s, m.memory_kind ("cuda" |
    "host_rss"), m.reserved_memory_bytes (CUDA only).

    device: the CUDA device to watch (default: the current one). memory: "auto" (CUDA allocator when
    this process has initialised CUDA, else host RSS), "host" (host RSS even with CUDA), "cuda"
    (initialise CUDA if needed)."""
    _collectives.install()
    return Measurement(device, memory)
