"""Numerical probes: after every sync the rollout copies are the trainer's weights, bit for bit."""

import pytest
import torch

from wsd_probe_support import Bag, bits, check_sync, flip, mismatches, rank, weight_sync, world

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
}
# Per element size: a quiet NaN with a payload, -0.0 and +0.0 as raw bits.
SPECIAL = {
    2: {"nan": 0x7E01, "nan2": 0x7E02, "neg0": -0x8000, "pos0": 0},
    4: {"nan": 0x7FC00001, "nan2": 0x7FC00002, "neg0": -0x80000000, "pos0": 0},
    8: {"nan": 0x7FF8000000000001, "nan2": 0x7FF8000000000002, "neg0": -0x8000000000000000, "pos0": 0},
}


def _bag(dtype, seed):
    trainable = dtype.is_floating_point
    return Bag([("w", 300, dtype, trainable), ("b", 7, dtype, trainable)], seed)


@pytest.mark.probe(promise="bitwise-equal", kind="numerical")
@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
def test_rollout_bits_equal_trainer_after_every_sync(dtype):
    dt = DTYPES[dtype]
    bag = _bag(dt, seed=40 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync")
    for step in range(3):
        if rank() == 0:
            flip(bag.w, torch.arange(step, 300, 37))
            flip(bag.b, torch.tensor([step]))
        more, last = check_sync(sync, bag, 0, last, f"sync {step + 2}")
        problems += more
    assert problems == []


@pytest.mark.probe(promise="bitwise-equal", kind="numerical")
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_signed_zero_and_nan_payloads_are_synced(dtype):
    dt = DTYPES[dtype]
    bag = _bag(dt, seed=60 + rank())
    special = SPECIAL[bag.w.element_size()]
    sync = weight_sync(bag)
    if rank() == 0:
        b = bits(bag.w.data)
        b[0:10] = special["pos0"]
        b[10:20] = special["neg0"]
        b[20:30] = special["nan"]
    problems, last = check_sync(sync, bag, 0, None, "first sync")
    if rank() == 0:
        b = bits(bag.w.data)
        b[0:5] = special["neg0"]      # +0.0 -> -0.0
        b[10:15] = special["pos0"]    # -0.0 -> +0.0
        b[20:25] = special["nan2"]    # one NaN payload -> another
    more, last = check_sync(sync, bag, 0, last, "after the sign and payload changes")
    assert problems + more == []


@pytest.mark.probe(promise="first-sync-full", kind="numerical")
def test_first_sync_repairs_copies_that_start_different():
    spec = [("a", 513, torch.float32, True), ("h", 64, torch.bfloat16, True), ("i", 9, torch.int64, False)]
    bag = Bag(spec, seed=90 + rank())
    sync = weight_sync(bag)
    problems, _ = check_sync(sync, bag, 0, None, "first sync")
    assert problems == []


@pytest.mark.probe(promise="in-place", kind="state")
def test_rollout_parameters_are_updated_in_place():
    bag = Bag([("w", 200, torch.float32, True), ("h", 50, torch.float16, True)], seed=5 + rank())
    before = {n: (p, p.data_ptr(), p.dtype, tuple(p.shape)) for n, p in bag.named_parameters()}
    view = bag.w.data[:10]  # a reference the rollout code holds
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync")
    if rank() == 0:
        flip(bag.w, torch.arange(0, 200, 3))
        flip(bag.h, torch.arange(0, 50, 7))
    more, last = check_sync(sync, bag, 0, last, "second sync")
    problems += more
    for name, p in bag.named_parameters():
        obj, ptr, dtype, shape = before[name]
        if p is not obj or p.data_ptr() != ptr or p.dtype != dtype or tuple(p.shape) != shape:
            problems.append(f"rank {rank()}: {name} is not the same parameter / storage / dtype / shape")
    if not torch.equal(view, bag.w.data[:10]):
        problems.append(f"rank {rank()}: a view of w taken before the syncs does not see the new weights")
    assert problems == []
