"""Bucket-plan probes: the cap (in MiB) at its boundaries, dtype mixes, the GradBucket attributes.

Only what prompt.md fixes is checked: membership, one dtype/device per bucket, the byte cap, a bucket
of its own for an oversized parameter, one bucket per dtype when the cap holds everything. Which
parameters share a bucket otherwise, and in what order, is the designer's choice.
"""

import inspect

import pytest
import torch

from gb_probe_support import (
    dp,
    AllReduceSpy,
    MIB,
    ParamBag,
    cap_mb,
    exact_mismatches,
    expected_average,
    rank,
    synthetic_backward,
    world,
)
from infradev_probe import measure
from nanoinfra.bucketing import GradBucket
from nanoinfra.parallel import DataParallel

F32, F64 = torch.float32, torch.float64
# Interleaved dtypes: a plan must still give one bucket per dtype when the cap holds everything.
MIXED = [(10, F32), (6, F64), (7, F32), (3, F64), (20, F32), (9, F64), (1, F32)]
SINGLE = [(16, F32), (5, F32), (24, F32), (3, F32), (12, F32), (1, F32)]
MANY = [(1 + (7 * i) % 13, F64 if i % 5 == 2 else F32) for i in range(70)]  # many small, two dtypes


def _sizes(bag):
    return {n: p.numel() * p.element_size() for n, p in bag.named_parameters()}


def _plan_errors(model, cap_bytes):
    """Every way the plan of ``model`` breaks the prompt's bucket rules at ``cap_bytes``."""
    bag = model.module
    params = dict(bag.named_parameters())
    sizes = _sizes(bag)
    errors = []
    names = [n for b in model.buckets for n in b.param_names]
    trainable = sorted(n for n, p in params.items() if p.requires_grad)
    if sorted(names) != trainable:
        errors.append(f"bucketed {sorted(names)} != trainable {trainable}")
    for i, b in enumerate(model.buckets):
        members = [params[n] for n in b.param_names if n in params]
        if not isinstance(b, GradBucket):
            errors.append(f"bucket {i} is a {type(b).__name__}, not a GradBucket")
        if len({(p.dtype, p.device) for p in members}) != 1:
            errors.append(f"bucket {i} mixes {sorted({str(p.dtype) for p in members})}")
            continue
        total = sum(sizes[n] for n in b.param_names)
        if len(b.param_names) > 1 and total > cap_bytes:
            errors.append(f"bucket {i} holds {total} bytes > cap {cap_bytes}: {b.param_names}")
        buf = b.buffer
        if buf.dim() != 1 or buf.dtype != members[0].dtype or buf.device != members[0].device:
            errors.append(f"bucket {i} buffer is {buf.dtype} {tuple(buf.shape)} on {buf.device}")
        if buf.numel() != sum(p.numel() for p in members):
            errors.append(f"bucket {i} buffer has {buf.numel()} elements for {sum(p.numel() for p in members)}")
    return errors


def _sync_is_exact(model, cap_bytes):
    """One sync: one all_reduce per bucket, exact averages, no other collective."""
    spy_free_expected = expected_average(model.module, {r: [(3, None)] for r in range(world())})
    synthetic_backward(model, 3, rank())
    with measure() as m:
        model.sync_gradients()
    assert m.calls["all_reduce"] == len(model.buckets), dict(m.calls)
    assert sum(m.calls.values()) == len(model.buckets), dict(m.calls)
    assert m.bytes["all_reduce"] == sum(_sizes(model.module).values()), dict(m.bytes)
    assert exact_mismatches(model.module, spy_free_expected) == []


@pytest.mark.probe(promise="cap-is-filled", kind="condition")
@pytest.mark.parametrize("spec", [SINGLE, MIXED, MANY], ids=["float32", "float32+float64", "70-params"])
@pytest.mark.parametrize("slack", [0, 1, 10 * MIB], ids=["cap-equals-all-gradients", "one-byte-more", "huge"])
def test_cap_holding_everything_gives_one_bucket_per_dtype(device, spec, slack):
    bag = ParamBag(spec, device)
    dtypes = {p.dtype for p in bag.parameters()}
    cap_bytes = sum(_sizes(bag).values()) + slack

    model = dp(bag, bucket_cap_mb=cap_mb(cap_bytes))
    assert _plan_errors(model, cap_bytes) == []
    assert len(model.buckets) == len(dtypes), [b.param_names for b in model.buckets]
    _sync_is_exact(model, cap_bytes)


@pytest.mark.probe(promise="cap-in-mib", kind="condition")
def test_cap_one_byte_below_all_gradients_splits(device):
    """1 MB = 1024 * 1024 bytes: a cap of exactly all gradients' bytes holds them, one byte less does not."""
    bag = ParamBag([(2 * 1024, F32), (2 * 1024, F32), (1024, F32)], device)
    total = sum(_sizes(bag).values())  # 20 KiB
    exact = dp(bag, bucket_cap_mb=total / MIB)
    assert len(exact.buckets) == 1, [b.param_names for b in exact.buckets]
    below = dp(bag, bucket_cap_mb=(total - 1) / MIB)
    assert len(below.buckets) >= 2 and _plan_errors(below, total - 1) == []
    # 0.01953125 MB is 20 KiB exactly; in units of 10^6 bytes it would be 19531 bytes.
    decimal = dp(bag, bucket_cap_mb=0.01953125)
    assert len(decimal.buckets) == 1, [b.param_names for b in decimal.buckets]


@pytest.mark.probe(promise="buckets-respect-cap", kind="condition")
@pytest.mark.parametrize(
    "spec, cap_bytes",
    [
        ([(4, F32)] * 16, 64),                      # many small params fill the cap exactly
        ([(4, F32)] * 16, 63),                      # ... or not quite
        ([(10, F64)] * 6 + [(10, F32)] * 6, 160),  # float64 counts 8 bytes per element
        (MIXED, 48),
        (MIXED, 100),
    ],
    ids=["16x16B-cap64", "16x16B-cap63", "f64-f32-cap160", "mixed-cap48", "mixed-cap100"],
)
def test_bucket_bytes_never_exceed_the_cap(device, spec, cap_bytes):
    model = dp(ParamBag(spec, device), bucket_cap_mb=cap_mb(cap_bytes))
    assert _plan_errors(model, cap_bytes) == []
    _sync_is_exact(model, cap_bytes)


@pytest.mark.probe(promise="oversized-param", kind="condition")
@pytest.mark.parametrize("where", [0, 2, 4], ids=["first", "middle", "last"])
def test_parameter_over_the_cap_gets_its_own_bucket(device, where):
    spec = [(4, F32)] * 5
    spec[where] = (17, F32)  # 68 bytes, cap 64
    spec.insert(0 if where else 1, (16, F32))  # a parameter exactly at the cap
    model = dp(ParamBag(spec, device), bucket_cap_mb=cap_mb(64))
    sizes = _sizes(model.module)
    assert _plan_errors(model, 64) == []
    big = [n for n, s in sizes.items() if s > 64]
    for b in model.buckets:
        if set(big) & set(b.param_names):
            assert b.param_names == big, [x.param_names for x in model.buckets]
    _sync_is_exact(model, 64)


@pytest.mark.probe(promise="bucket-single-dtype-device", kind="condition")
@pytest.mark.parametrize("cap_bytes", [10 * MIB, 100, 40], ids=["one-per-dtype", "cap100", "cap40"])
def test_dtype_mix_never_shares_a_bucket(device, cap_bytes, monkeypatch):
    model = dp(ParamBag(MIXED, device), bucket_cap_mb=cap_mb(cap_bytes))
    assert _plan_errors(model, cap_bytes) == []
    params = dict(model.module.named_parameters())
    spy = AllReduceSpy(monkeypatch)
    synthetic_backward(model, 4, rank())
    model.sync_gradients()
    sent = spy.take()
    # Each bucket goes on the wire in its parameters' dtype, through its own buffer.
    assert [t.dtype for t in sent] == [params[b.param_names[0]].dtype for b in model.buckets]
    assert exact_mismatches(model.module, expected_average(model.module, {r: [(4, None)] for r in range(world())})) == []


@pytest.mark.probe(promise="bucket-attributes", kind="condition")
def test_bucket_attributes_name_the_wrapped_parameters(device):
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = ParamBag([(6, F32), (3, F64)], device)
            self.tail = torch.nn.Linear(3, 2).to(device)

    model = dp(Outer(), bucket_cap_mb=cap_mb(40))
    names = [n for n, _ in model.module.named_parameters()]
    got = [n for b in model.buckets for n in b.param_names]
    assert sorted(got) == sorted(names), got  # "inner.p0", not "module.inner.p0" or "p0"
    assert _plan_errors(model, 40) == []


@pytest.mark.probe(promise="default-cap", kind="condition")
def test_default_cap_is_25_mib(device):
    assert inspect.signature(DataParallel.__init__).parameters["bucket_cap_mb"].default == 25.0
    quarter = 25 * MIB // 4 // 4  # float32 elements in a quarter of 25 MiB
    exact = ParamBag([(quarter, F32)] * 4, device)
    assert len(dp(exact).buckets) == 1
    over = ParamBag([(quarter, F32)] * 4 + [(1, F32)], device)
    assert len(dp(over).buckets) >= 2


@pytest.mark.probe(promise="param-in-one-bucket", kind="condition")
@pytest.mark.parametrize("cap_bytes", [1, 16, 40, 64, 100, 10 * MIB])
def test_every_trainable_parameter_is_in_exactly_one_bucket(device, cap_bytes):
    bag = ParamBag(MIXED + [(16, F32), (2, F64)], device)
    bag.p3.requires_grad_(False)
    model = dp(bag, bucket_cap_mb=cap_mb(cap_bytes))
    names = [n for b in model.buckets for n in b.param_names]
    trainable = [n for n, p in bag.named_parameters() if p.requires_grad]
    assert sorted(names) == sorted(trainable), names  # each exactly once, none frozen
    assert sum(b.buffer.numel() for b in model.buckets) == sum(bag.get_parameter(n).numel() for n in trainable)
