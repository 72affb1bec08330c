"""Where a rank runs: device and process-group backend from the environment.

Like the big frameworks, nothing here is hard-coded to one machine:
``NANORL_DEVICE`` picks the device type (``cpu`` by default, ``cuda`` on GPU nodes, where the
device index comes from ``LOCAL_RANK``), ``NANORL_BACKEND`` overrides the process-group backend
(``nccl`` for CUDA, ``gloo`` otherwise).
"""

import os
import socket
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist


def resolve_device() -> torch.device:
    kind = os.environ.get("NANORL_DEVICE", "cpu").strip().lower()
    if kind == "cuda":
        index = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    if kind != "cpu":
        raise ValueError(f"NANORL_DEVICE must be 'cpu' or 'cuda' (got {kind!r})")
    return torch.device("cpu")


def resolve_backend(device: Optional[torch.device] = None) -> str:
    explicit = os.environ.get("NANORL_BACKEND")
    if explicit:
        return explicit.strip().lower()
    device = device if device is not None else resolve_device()
    return "nccl" if device.type == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_distributed(timeout_sec: float = 300.0) -> bool:
    """Join the default process group from the ``env://`` variables.

    Without ``WORLD_SIZE`` this starts a one-rank group on a free local port, so the same code runs
    in a single process. Returns True when this call created the group (the caller then owns it).
    """
    if dist.is_initialized():
        return False
    if "WORLD_SIZE" not in os.environ:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(_free_port()))
        os.environ["RANK"] = "0"
        os.environ["WORLD_SIZE"] = "1"
    dist.init_process_group(
        backend=resolve_backend(),
        init_method="env://",
        timeout=timedelta(seconds=timeout_sec),
    )
    return True


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0
