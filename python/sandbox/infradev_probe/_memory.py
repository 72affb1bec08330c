"""Peak-memory trackers for one measured block: the CUDA caching allocator, or host RSS.

Host RSS: Linux keeps a high-water mark (VmHWM in /proc/self/status) that writing "5" to
/proc/self/clear_refs resets (Linux >= 4.0). That is exact and costs nothing while the block runs, so
it is preferred; where the reset is refused (old kernel, locked-down /proc), a background thread
samples /proc/self/statm every 5 ms instead (a peak shorter than that can be missed). Either way the
reset also resets getrusage()'s ru_maxrss for this process.

Both resets are process-wide, so nesting works by folding: before a tracker resets the counter it
hands the peak seen so far to every tracker already active, and each tracker's result is the max of
what was folded into it and what the counter says at its end.
"""

import os
import sys
import threading
import time

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_lock = threading.Lock()
_active_host = []
_active_cuda = []
_clear_refs_works = None  # None: not tried yet


def _read_status_kb(field):
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def current_rss():
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def host_method():
    """"vmhwm" when the kernel lets us reset the RSS high-water mark, else "statm_sampling"."""
    global _clear_refs_works
    forced = os.environ.get("INFRADEV_PROBE_RSS_METHOD")
    if forced in ("vmhwm", "statm_sampling"):
        return forced
    if _clear_refs_works is None:
        _clear_refs_works = _read_status_kb(b"VmHWM:") is not None and _reset_hwm()
    return "vmhwm" if _clear_refs_works else "statm_sampling"


class HostPeak:
    kind = "host_rss"

    def __init__(self):
        self.method = host_method()
        self.start_bytes = 0
        self.folded = 0
        self._sampler = None
        self._stop = None

    def start(self):
        with _lock:
            if self.method == "vmhwm":
                before = _read_status_kb(b"VmHWM:") or 0
                for outer in _active_host:
                    outer.folded = max(outer.folded, before)
                _reset_hwm()
            _active_host.append(self)
        self.start_bytes = current_rss()
        self.folded = self.start_bytes
        if self.method == "statm_sampling":
            self._stop = threading.Event()
            self._sampler = threading.Thread(target=self._sample, name="infradev-rss-sampler", daemon=True)
            self._sampler.start()

    def _sample(self):
        while not self._stop.wait(0.005):
            rss = current_rss()
            if rss > self.folded:
                self.folded = rss

    def stop(self):
        """Returns (peak bytes, peak - start bytes, None)."""
        if self._sampler is not None:
            self._stop.set()
            self._sampler.join()
        end = current_rss()
        with _lock:
            if self in _active_host:
                _active_host.remove(self)
            hwm = _read_status_kb(b"VmHWM:") if self.method == "vmhwm" else None
        peak = max(self.folded, end, hwm or 0)
        return peak, peak - self.start_bytes, None


def cuda_module(initialise=False):
    """torch, when this process has initialised CUDA (or, with initialise, can); None otherwise.
    Never imports torch unless initialise is asked for."""
    if initialise:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("measure(memory='cuda'): no CUDA device is available")
        torch.cuda.init()
        return torch
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch if torch.cuda.is_initialized() else None
    except Exception:
        return None


def _cuda_stats(cuda, device):
    """(allocated now, allocated peak, reserved peak) from one read of the allocator's statistics:
    max_memory_allocated() and friends each rebuild the whole flattened stats dict (~170 us each on
    an H200 host), the nested dict is built once."""
    stats = cuda.memory_stats_as_nested_dict(device)
    allocated = stats.get("allocated_bytes", {}).get("all", {})
    reserved = stats.get("reserved_bytes", {}).get("all", {})
    return allocated.get("current", 0), allocated.get("peak", 0), reserved.get("peak", 0)


class CudaPeak:
    kind = "cuda"
    method = "cuda_allocator"

    def __init__(self, torch, device=None):
        self.torch = torch
        self.device = torch.cuda.current_device() if device is None else device
        self.start_bytes = 0
        self.folded = 0
        self.folded_reserved = 0

    def start(self):
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        with _lock:
            current, peak, reserved = _cuda_stats(cuda, self.device)
            for outer in _active_cuda:
                if outer.device == self.device:
                    outer.folded = max(outer.folded, peak)
                    outer.folded_reserved = max(outer.folded_reserved, reserved)
            cuda.reset_peak_memory_stats(self.device)
            _active_cuda.append(self)
        self.start_bytes = current

    def stop(self):
        """Returns (peak bytes, peak - start bytes, peak reserved bytes)."""
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        with _lock:
            if self in _active_cuda:
                _active_cuda.remove(self)
            _current, peak, reserved = _cuda_stats(cuda, self.device)
        peak = max(self.folded, peak)
        return peak, peak - self.start_bytes, max(self.folded_reserved, reserved)


class LateCudaPeak:
    """CUDA was initialised inside the block: the allocator's whole history is this block's."""

    kind = "cuda"
    method = "cuda_allocator"

    def __init__(self, torch):
        self.torch = torch
        self.device = torch.cuda.current_device()

    def stop(self):
        cuda = self.torch.cuda
        cuda.synchronize(self.device)
        _current, peak, reserved = _cuda_stats(cuda, self.device)
        return peak, peak, reserved


def now():
    return time.perf_counter()
