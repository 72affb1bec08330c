"""Shared fixtures: the device (NANODECODE_DEVICE, else CUDA when present) and a small model."""

import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from nanodecode import DecoderConfig, TinyDecoder, resolve_device  # noqa: E402


@pytest.fixture
def device() -> torch.device:
    return resolve_device()


@pytest.fixture
def config() -> DecoderConfig:
    return DecoderConfig(vocab_size=64, d_model=32, n_heads=4, n_layers=2, max_seq_len=32)


@pytest.fixture
def model(config, device) -> TinyDecoder:
    return TinyDecoder(config, seed=0).to(device).eval()
