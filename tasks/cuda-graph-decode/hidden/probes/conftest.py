"""Fixtures for this folder's probes: the device, a model, counters of graph captures / replays.

Runs under every mode of the task (NANODECODE_CUDA_GRAPHS=0 and =1). Self-contained: it does not
rely on a conftest above it. The device follows NANODECODE_DEVICE like the package does (the task
sets ``cuda``), so the probes that are not about graphs also run on a CPU-only machine; the probes
about graphs ask for the ``cuda`` fixture, which fails (never skips) without a CUDA device.
"""

import collections
import sys
from pathlib import Path

import pytest
import torch

# The repository root: the nearest folder above that holds the package (this folder may sit at any
# depth below it).
REPO_ROOT = next((p for p in Path(__file__).resolve().parents if (p / "nanodecode").is_dir()), Path(__file__).resolve().parent.parent)
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from nanodecode import DecoderConfig, TinyDecoder, resolve_device  # noqa: E402


def _full_float32() -> None:
    # Reference numbers in full float32: TF32 would blur the comparison with the recomputation.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


@pytest.fixture
def cuda() -> torch.device:
    if not torch.cuda.is_available():
        pytest.fail("this probe needs a CUDA device; none is visible")
    _full_float32()
    return torch.device("cuda", torch.cuda.current_device())


@pytest.fixture
def device() -> torch.device:
    found = resolve_device()
    if found.type == "cuda":
        if not torch.cuda.is_available():
            pytest.fail("NANODECODE_DEVICE asks for CUDA and none is visible")
        _full_float32()
    return found


@pytest.fixture
def config() -> DecoderConfig:
    return DecoderConfig(vocab_size=512, d_model=128, n_heads=4, n_layers=4, max_seq_len=64)


@pytest.fixture
def model(config, device) -> TinyDecoder:
    return TinyDecoder(config, seed=1234).to(device).eval()


@pytest.fixture
def token_stream(config):
    """``token_stream(n, batch, seed, device)``: n different (batch,) int64 token tensors."""

    def make(n, batch, seed, device):
        generator = torch.Generator().manual_seed(seed)
        return [torch.randint(0, config.vocab_size, (batch,), generator=generator).to(device) for _ in range(n)]

    return make


@pytest.fixture
def graph_calls(monkeypatch):
    """Counts CUDAGraph captures and replays, and Python-side calls of TinyDecoder.decode_step."""
    counts = collections.Counter()
    graph_cls = torch.cuda.CUDAGraph
    original_begin, original_replay = graph_cls.capture_begin, graph_cls.replay
    original_step = TinyDecoder.decode_step

    def capture_begin(self, *args, **kwargs):
        counts["capture"] += 1
        return original_begin(self, *args, **kwargs)

    def replay(self, *args, **kwargs):
        counts["replay"] += 1
        return original_replay(self, *args, **kwargs)

    def decode_step(self, *args, **kwargs):
        counts["decode_step"] += 1
        return original_step(self, *args, **kwargs)

    monkeypatch.setattr(graph_cls, "capture_begin", capture_begin)
    monkeypatch.setattr(graph_cls, "replay", replay)
    monkeypatch.setattr(TinyDecoder, "decode_step", decode_step)
    return counts
