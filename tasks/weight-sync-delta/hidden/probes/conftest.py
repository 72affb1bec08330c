"""Session setup for the weight-sync probes: one default process group per pytest session, and a
fresh group of all ranks for every probe.

Runs on every rank (RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT from the launcher). Tolerates a
conftest above it that made the default group already.
"""

import os
import socket
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
# The repository root: the nearest folder above that holds the package.
REPO_ROOT = next((p for p in HERE.parents if (p / "nanorl").is_dir()), HERE.parent)
for path in (str(REPO_ROOT), str(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from wsd_probe_support import set_test_group  # noqa: E402

# How long a rank waits in a probe's collective for ranks that fell out of step: a submission whose
# ranks disagree on the collectives fails that probe after this long, not the whole session.
TEST_GROUP_TIMEOUT = timedelta(seconds=10)


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
        backend = os.environ.get("NANORL_BACKEND", "gloo").strip().lower()
        # Short: a submission that talks on the default group where it should use process_group
        # (a probe's group of some ranks) fails that probe after this long instead of hanging.
        dist.init_process_group(backend, init_method="env://", timeout=timedelta(seconds=20))
        created = True
    yield dist.group.WORLD
    if created and dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def test_group(dist_session):
    group = dist.new_group(ranks=list(range(dist.get_world_size())), timeout=TEST_GROUP_TIMEOUT)
    set_test_group(group)
    yield group
    set_test_group(None)
