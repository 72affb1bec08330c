"""Condition probes: frozen parameters, parameters without a gradient, a cap below one parameter."""

import pytest

from gb_probe_support import (
    dp,
    averaged_grads,
    backward_on,
    bucket_names,
    cap_mb,
    float64_copy,
    grad_mismatches,
    make_batch,
    make_net,
    rank,
    trainable_bytes,
    trainable_names,
    world,
)
from infradev_probe import measure

FROZEN = ("mid", "scale")


@pytest.mark.probe(promise="frozen-params", kind="condition")
def test_frozen_parameters_are_left_out(device):
    model = dp(make_net(device, frozen=FROZEN), bucket_cap_mb=cap_mb(1024))
    template = float64_copy(model.module)
    backward_on(model, make_batch(40, rank()), device)
    with measure() as m:
        model.sync_gradients()
    bucketed = [n for b in bucket_names(model) for n in b]
    frozen_grads = [n for n, p in model.module.named_parameters() if not p.requires_grad and p.grad is not None]
    expected = averaged_grads(template, [([make_batch(40, r)], True) for r in range(world())])
    assert sorted(bucketed) == sorted(trainable_names(model.module))
    assert frozen_grads == [], "a sync gave frozen parameters a gradient"
    assert m.bytes["all_reduce"] == trainable_bytes(model.module), dict(m.bytes)
    assert grad_mismatches(model.module, expected) == []


@pytest.mark.probe(promise="missing-grads", kind="condition")
def test_parameter_unused_on_every_rank(device):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    template = float64_copy(model.module)
    backward_on(model, make_batch(50, rank()), device, use_aux=False)
    with measure() as m:
        model.sync_gradients()
    expected = averaged_grads(template, [([make_batch(50, r)], False) for r in range(world())])
    assert m.calls["all_reduce"] == len(model.buckets), dict(m.calls)
    assert grad_mismatches(model.module, expected) == []  # aux.* must read as zeros, not None


@pytest.mark.probe(promise="missing-grads", kind="condition")
def test_parameter_used_on_rank0_only(device):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    template = float64_copy(model.module)
    backward_on(model, make_batch(60, rank()), device, use_aux=rank() == 0)
    with measure() as m:
        model.sync_gradients()
    expected = averaged_grads(template, [([make_batch(60, r)], r == 0) for r in range(world())])
    assert m.calls["all_reduce"] == len(model.buckets), dict(m.calls)
    assert grad_mismatches(model.module, expected) == []


@pytest.mark.probe(promise="missing-grads", kind="condition")
def test_parameter_that_stops_receiving_gradients(device):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    template = float64_copy(model.module)
    backward_on(model, make_batch(70, rank()), device, use_aux=True)
    model.sync_gradients()
    model.zero_grad(set_to_none=True)
    backward_on(model, make_batch(71, rank()), device, use_aux=False)
    model.sync_gradients()
    expected = averaged_grads(template, [([make_batch(71, r)], False) for r in range(world())])
    assert grad_mismatches(model.module, expected) == []


@pytest.mark.probe(promise="oversized-param", kind="condition")
@pytest.mark.parametrize("cap_bytes", [8, 100], ids=["cap-below-every-param", "cap-below-the-weights"])
def test_cap_smaller_than_a_parameter(device, cap_bytes):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(cap_bytes))
    template = float64_copy(model.module)
    sizes = {n: p.numel() * p.element_size() for n, p in model.module.named_parameters()}
    plan = bucket_names(model)
    backward_on(model, make_batch(80, rank()), device)
    with measure() as m:
        model.sync_gradients()
    expected = averaged_grads(template, [([make_batch(80, r)], True) for r in range(world())])
    assert sorted(n for b in plan for n in b) == sorted(sizes), plan
    assert all(len(b) == 1 or sum(sizes[n] for n in b) <= cap_bytes for b in plan), plan
    if cap_bytes < min(sizes.values()):
        assert len(plan) == len(sizes), plan
    assert m.calls["all_reduce"] == len(plan), dict(m.calls)
    assert grad_mismatches(model.module, expected) == []
