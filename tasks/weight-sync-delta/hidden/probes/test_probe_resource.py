"""Resource probes: what a sync puts on the wire, counted by infradev_probe.measure() on every rank,
against the prompt's budget (16 * P + 64 header bytes, k * (8 + e) per changed parameter)."""

import pytest
import torch

from wsd_probe_support import (
    Bag,
    check_sync,
    everyone,
    flip,
    header_budget,
    measured_sync,
    mismatches,
    rank,
    weight_sync,
)

WIDE = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int64": torch.int64}


@pytest.mark.probe(promise="bytes-scale", kind="resource")
@pytest.mark.parametrize("dtype", list(WIDE), ids=list(WIDE))
def test_655_changed_of_65536_send_about_655(dtype):
    dt = WIDE[dtype]
    bag = Bag([("table", 65_536, dt, dt.is_floating_point), ("bias", 256, dt, dt.is_floating_point)], seed=3 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync", budget_check=True)
    if rank() == 0:
        gen = torch.Generator().manual_seed(77)
        flip(bag.table, torch.randperm(65_536, generator=gen)[:655])
    more, _ = check_sync(sync, bag, 0, last, "655 of 65,536 changed", budget_check=True)
    assert problems + more == []


@pytest.mark.probe(promise="bytes-scale", kind="resource")
def test_mixed_dtypes_some_parameters_unchanged():
    spec = [
        ("a", 4096, torch.float32, True),
        ("b", 2048, torch.bfloat16, True),
        ("c", 1000, torch.float16, True),
        ("d", 512, torch.float64, True),
        ("e", 300, torch.int32, False),
        ("f", 4096, torch.float32, True),
    ]
    bag = Bag(spec, seed=21 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync", budget_check=True)
    if rank() == 0:
        flip(bag.a, torch.arange(0, 4096, 97))
        flip(bag.b, torch.arange(5, 2048, 211))
        flip(bag.d, torch.tensor([0, 511]))
        flip(bag.e, torch.tensor([3]))
    more, _ = check_sync(sync, bag, 0, last, "sparse changes in four of six parameters", budget_check=True)
    assert problems + more == []


@pytest.mark.probe(promise="bytes-scale", kind="resource")
def test_first_sync_sends_values_in_their_own_size():
    bag = Bag([("h", 8192, torch.bfloat16, True), ("g", 4096, torch.float16, True)], seed=8 + rank())
    problems, _ = check_sync(weight_sync(bag), bag, 0, None, "first sync", budget_check=True)
    assert problems == []


@pytest.mark.probe(promise="nothing-changed", kind="resource")
@pytest.mark.parametrize("contents", ["plain", "nan-and-signed-zero"])
def test_no_change_sends_only_a_header(contents):
    bag = Bag([("w", 20_000, torch.float32, True), ("h", 3000, torch.bfloat16, True), ("i", 100, torch.int64, False)], seed=13 + rank())
    if contents != "plain" and rank() == 0:
        with torch.no_grad():
            bag.w.data[:500] = float("nan")
            bag.w.data[500:1000] = -0.0
            bag.h.data[:100] = float("nan")
            bag.h.data[100:200] = -0.0
    sync = weight_sync(bag)
    sync.sync()
    budget = header_budget(bag)
    sent = [measured_sync(sync) for _ in range(3)]
    ok = everyone(all(s <= budget for s in sent))
    assert ok, f"rank {rank()}: syncs with nothing changed moved {sent} bytes (header budget {budget} on every rank)"
    assert mismatches(bag, 0) == []
