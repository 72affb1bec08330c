"""Session setup shared by every test: one default process group per pytest session.

The launcher starts the same pytest session on every rank with RANK / WORLD_SIZE / MASTER_ADDR /
MASTER_PORT set. Without WORLD_SIZE the tests run as a one-rank group on a free local port.
"""

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _device() -> torch.device:
    if os.environ.get("NANORL_DEVICE", "cpu").strip().lower() == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _backend() -> str:
    explicit = os.environ.get("NANORL_BACKEND")
    if explicit:
        return explicit.strip().lower()
    return "nccl" if _device().type == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def process_group():
    created = False
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            os.environ["RANK"] = "0"
            os.environ["WORLD_SIZE"] = "1"
        if _device().type == "cuda":
            torch.cuda.set_device(_device())
        dist.init_process_group(_backend(), init_method="env://", timeout=timedelta(seconds=120))
        created = True
    yield dist.group.WORLD
    if created and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def device() -> torch.device:
    return _device()
