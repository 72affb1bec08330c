"""A one-test pytest file for the launcher figures: join the NCCL group the launcher set up through
env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK), all-reduce on this rank's GPU,
and check the probe library counted the payload. Run by bench/gpu_launch_overhead.py."""

import os

import torch
import torch.distributed as dist

from infradev_probe import measure


def test_nccl_all_reduce_counted():
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", init_method="env://")
    try:
        world = dist.get_world_size()
        t = torch.full((1 << 20,), float(dist.get_rank() + 1), device="cuda")
        with measure() as m:
            dist.all_reduce(t)
        assert torch.all(t == world * (world + 1) / 2)
        assert m.calls["all_reduce"] == 1 and m.bytes["all_reduce"] == 4 << 20, dict(m.bytes)
        assert m.memory_kind == "cuda"
    finally:
        dist.destroy_process_group()
