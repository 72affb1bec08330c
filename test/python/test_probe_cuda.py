"""The probe library on CUDA (skipped without a GPU): allocator peaks and NCCL collectives."""

import os
import subprocess
import sys

import pytest

from conftest import SANDBOX_PY

sys.path.insert(0, SANDBOX_PY)

from infradev_probe import measure  # noqa: E402

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
MiB = 1024 * 1024


def test_cuda_peak_is_the_allocator_peak_of_the_block():
    torch.cuda.init()
    keep = torch.ones(8 * MiB // 4, device="cuda")  # allocated before: not part of the delta
    with measure() as big:
        x = torch.ones(64 * MiB // 4, device="cuda")
        del x
    with measure() as small:
        y = torch.ones(MiB // 4, device="cuda")
        del y
    assert big.memory_kind == "cuda" and big.memory_method == "cuda_allocator"
    assert big.peak_memory_delta_bytes >= 64 * MiB
    assert big.peak_memory_bytes >= 64 * MiB + keep.numel() * 4
    assert big.reserved_memory_bytes >= big.peak_memory_bytes
    assert small.peak_memory_delta_bytes < 2 * MiB
    assert small.peak_memory_bytes < big.peak_memory_bytes
    with measure() as outer:
        z = torch.ones(32 * MiB // 4, device="cuda")
        del z
        with measure() as inner:
            pass
    assert outer.peak_memory_delta_bytes >= 32 * MiB and inner.peak_memory_delta_bytes == 0


def test_cuda_initialised_inside_the_block(tmp_path):
    script = (
        "import sys; sys.path.insert(0, %r)\n"
        "from infradev_probe import measure\n"
        "import torch\n"
        "with measure() as m:\n"
        "    x = torch.ones(16 * 1024 * 1024 // 4, device='cuda')\n"
        "assert m.memory_kind == 'cuda', m\n"
        "assert m.peak_memory_bytes >= 16 * 1024 * 1024, m\n"
        "print('ok')\n" % SANDBOX_PY
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr


NCCL_TEST = '''
import os
import pytest
import torch
import torch.distributed as dist
from infradev_probe import measure


@pytest.fixture(scope="module", autouse=True)
def pg():
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl")
    yield
    dist.barrier()
    dist.destroy_process_group()


def test_nccl_counts():
    n = dist.get_world_size()
    t = torch.ones(1000, device="cuda")
    gathered = torch.empty(1000 * n, device="cuda")
    shard = torch.empty(100, device="cuda")
    with measure() as m:
        dist.all_reduce(t)
        dist.all_gather_into_tensor(gathered, t)
        dist.reduce_scatter_tensor(shard, torch.ones(100 * n, device="cuda"))
    assert m.memory_kind == "cuda"
    assert m.calls["all_reduce"] == 1 and m.bytes["all_reduce"] == 4000
    assert m.calls["all_gather_into_tensor"] == 1 and m.bytes["all_gather_into_tensor"] == 4000
    assert m.calls["reduce_scatter_tensor"] == 1 and m.bytes["reduce_scatter_tensor"] == 400 * n
    assert t[0].item() == n and shard[0].item() == n


def test_plugin_sees_cuda():
    x = torch.ones(4 * 1024 * 1024 // 4, device="cuda")
    dist.all_reduce(x)
'''


def test_nccl_ranks_through_the_launcher(scratch):
    nproc = min(2, torch.cuda.device_count())
    run = scratch({"test_nccl.py": NCCL_TEST}, nproc, "--per-test-timeout", "120")
    assert run.returncode == 0, run.stderr + run.log(0)[-4000:]
    for rank in range(nproc):
        probe = run.probe(rank)
        rec = probe["tests"]["test_nccl.py::test_plugin_sees_cuda"]
        assert probe["memory_kind"] == "cuda" and rec["memory_kind"] == "cuda"
        assert rec["peak_memory_bytes"] >= 4 * MiB and rec["bytes"] == {"all_reduce": 4 * MiB}
