"""Session setup for this folder's tests: one default process group per pytest session.

Runs on every rank (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT from the launcher; one process
without them). Self-contained, and tolerant of a conftest above it that made the group already.
"""

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
# The repository root: the nearest folder above that holds the package (this folder may sit at any
# depth below it).
REPO_ROOT = next((p for p in HERE.parents if (p / "nanoinfra").is_dir()), HERE.parent)
for path in (str(REPO_ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from gb_probe_support import run_device, set_test_group  # noqa: E402

# How long a rank waits in a probe's collective for ranks that fell out of step.
TEST_GROUP_TIMEOUT = timedelta(seconds=15)


def _backend() -> str:
    explicit = os.environ.get("NANOINFRA_BACKEND")
    if explicit:
        return explicit.strip().lower()
    return "nccl" if run_device().type == "cuda" else "gloo"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session", autouse=True)
def dist_session():
    created = False
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:
            os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
            os.environ.setdefault("MASTER_PORT", str(_free_port()))
            os.environ["RANK"] = "0"
            os.environ["WORLD_SIZE"] = "1"
        if run_device().type == "cuda":
            torch.cuda.set_device(run_device())
        dist.init_process_group(_backend(), init_method="env://", timeout=timedelta(seconds=120))
        created = True
    yield dist.group.WORLD
    if created and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def test_group(dist_session):
    """A fresh process group of all ranks for each probe. A submission whose ranks issue different
    collectives fails the probe where that happens; without a group of its own every later probe
    would then be paired with the wrong collectives and hang or read garbage."""
    group = dist.new_group(ranks=list(range(dist.get_world_size())), timeout=TEST_GROUP_TIMEOUT)
    set_test_group(group)
    yield group
    set_test_group(None)


@pytest.fixture
def device() -> torch.device:
    return run_device()
