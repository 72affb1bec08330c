"""Where the engine runs: the device from the environment, like the big serving stacks."""

import os
from typing import Optional, Union

import torch


def resolve_device(device: Optional[Union[str, torch.device]] = None) -> torch.device:
    """An explicit device wins; else ``NANODECODE_DEVICE`` (``cpu`` | ``cuda``); else CUDA when present."""
    if device is not None:
        return torch.device(device)
    kind = os.environ.get("NANODECODE_DEVICE", "").strip().lower()
    if not kind:
        kind = "cuda" if torch.cuda.is_available() else "cpu"
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"NANODECODE_DEVICE must be 'cpu' or 'cuda' (got {kind!r})")
    if kind == "cuda":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
