"""Process groups: a wrapper built on a process group averages over that group's ranks only."""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from gb_probe_support import ParamBag, expected_average, exact_mismatches, rank, synthetic_backward, world
from nanoinfra.parallel import DataParallel

# As the per-test groups of conftest.py: a rank out of step fails this probe, not every later one.
GROUP_TIMEOUT = timedelta(seconds=15)


def halves():
    """Consecutive groups of max(1, world // 2) ranks: {0} at 1 rank, {0} {1} at 2, {0,1} {2,3} at 4."""
    size = max(1, world() // 2)
    return [list(range(start, min(start + size, world()))) for start in range(0, world(), size)]


@pytest.mark.probe(promise="process-group-respected", kind="numerical")
def test_sync_averages_over_its_process_group_only(device):
    groups = halves()
    # Every rank creates every group, in the same order (torch.distributed requires it).
    made = [dist.new_group(ranks=g, timeout=GROUP_TIMEOUT) for g in groups]
    index = next(i for i, g in enumerate(groups) if rank() in g)
    bag = ParamBag([(6, torch.float32), (5, torch.float64), (8, torch.float32)], device)
    model = DataParallel(bag, process_group=made[index], bucket_cap_mb=64.0)
    for step in (0, 1):
        bag.zero_grad(set_to_none=True)
        synthetic_backward(model, step, rank())
        model.sync_gradients()
        expected = expected_average(bag, {r: [(step, None)] for r in groups[index]})
        assert exact_mismatches(bag, expected) == [], f"step {step}, group {groups[index]}"
