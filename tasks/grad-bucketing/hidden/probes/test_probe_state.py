"""State probes: what one sync leaves behind must not leak into the next one."""

import pytest

from gb_probe_support import (
    dp,
    averaged_grads,
    backward_on,
    cap_mb,
    float64_copy,
    grad_mismatches,
    local_grads,
    make_batch,
    make_net,
    rank,
    world,
)


@pytest.mark.probe(promise="fresh-buckets-each-step", kind="state")
@pytest.mark.parametrize("set_to_none", [True, False], ids=["grads-set-to-none", "grads-zeroed"])
def test_three_steps_with_different_data_are_each_averaged(device, set_to_none):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    template = float64_copy(model.module)
    failures = {}
    for step in range(3):
        model.zero_grad(set_to_none=set_to_none)
        backward_on(model, make_batch(10 + step, rank()), device)
        model.sync_gradients()
        expected = averaged_grads(template, [([make_batch(10 + step, r)], True) for r in range(world())])
        bad = grad_mismatches(model.module, expected)
        if bad:
            failures[step] = bad
    assert failures == {}


@pytest.mark.probe(promise="no-sync-accumulates", kind="state")
def test_no_sync_accumulates_locally_then_one_sync_averages(device):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    template = float64_copy(model.module)
    first, second = make_batch(20, rank()), make_batch(21, rank())
    with model.no_sync():
        backward_on(model, first, device)
        model.sync_gradients()
        local_after_no_sync = grad_mismatches(model.module, local_grads(template, [first]))
    backward_on(model, second, device)
    model.sync_gradients()
    expected = averaged_grads(
        template, [([make_batch(20, r), make_batch(21, r)], True) for r in range(world())]
    )
    assert local_after_no_sync == [], "inside no_sync() the local gradients changed"
    assert grad_mismatches(model.module, expected) == []


@pytest.mark.probe(promise="no-sync-accumulates", kind="state")
def test_no_sync_is_reentrant_and_restores_syncing(device):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    template = float64_copy(model.module)
    with model.no_sync():
        with model.no_sync():
            backward_on(model, make_batch(30, rank()), device)
            model.sync_gradients()
        backward_on(model, make_batch(31, rank()), device)
        model.sync_gradients()
    model.sync_gradients()
    expected = averaged_grads(
        template, [([make_batch(30, r), make_batch(31, r)], True) for r in range(world())]
    )
    assert grad_mismatches(model.module, expected) == []
