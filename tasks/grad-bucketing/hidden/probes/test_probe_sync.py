"""Sync probes on exact synthetic gradients: no_sync() in all its uses, missing and frozen
parameters, lock-step collectives, the buffers every sync goes through, dist.all_reduce at call time.
"""

import pytest
import torch

from gb_probe_support import (
    dp,
    AllReduceSpy,
    ParamBag,
    cap_mb,
    exact_mismatches,
    expected_average,
    gather_objects,
    local_snapshot,
    param_bytes,
    rank,
    same_grads,
    signature_of,
    synthetic_backward,
    world,
)
from infradev_probe import measure

F32, F64 = torch.float32, torch.float64
SPEC = [(6, F32), (10, F32), (4, F64), (7, F32), (8, F64), (3, F32)]
CAP = cap_mb(48)  # several buckets of each dtype


def _model(device, spec=SPEC, cap=CAP):
    return dp(ParamBag(spec, device), bucket_cap_mb=cap)


def _avg(model, steps_of_rank):
    return expected_average(model.module, {r: steps_of_rank(r) for r in range(world())})


def _sync_counted(model):
    with measure() as m:
        model.sync_gradients()
    return m


# --- no_sync() -------------------------------------------------------------------------------------


@pytest.mark.probe(promise="no-sync-no-comm", kind="resource")
def test_several_micro_steps_inside_no_sync_send_nothing(device):
    model = _model(device)
    with measure() as inside:
        with model.no_sync():
            for step in range(3):
                synthetic_backward(model, step, rank())
                model.sync_gradients()
    after = _sync_counted(model)
    assert sum(inside.calls.values()) == 0, dict(inside.calls)
    assert after.calls["all_reduce"] == len(model.buckets), dict(after.calls)


@pytest.mark.probe(promise="no-sync-local-untouched", kind="state")
def test_sync_inside_no_sync_leaves_local_grads_bitwise(device):
    model = _model(device)
    changed = []
    with model.no_sync():
        model.sync_gradients()  # before any backward: nothing to touch, None stays None
        changed += same_grads(model.module, {n: None for n, _ in model.module.named_parameters()})
        for step in range(3):
            synthetic_backward(model, 10 + step, rank(), used=["p0", "p2", "p3"] if step == 0 else None)
            snapshot = local_snapshot(model.module)
            model.sync_gradients()
            changed += same_grads(model.module, snapshot)
    assert changed == []


@pytest.mark.probe(promise="no-sync-accumulates", kind="numerical")
@pytest.mark.parametrize("micro_steps", [1, 3])
def test_first_sync_after_no_sync_averages_everything_accumulated(device, micro_steps):
    model = _model(device)
    with model.no_sync():
        for step in range(micro_steps):
            synthetic_backward(model, 20 + step, rank())
            model.sync_gradients()
    synthetic_backward(model, 30, rank())
    model.sync_gradients()
    want = _avg(model, lambda r: [(20 + s, None) for s in range(micro_steps)] + [(30, None)])
    assert exact_mismatches(model.module, want) == []


@pytest.mark.probe(promise="no-sync-nesting", kind="state")
def test_leaving_an_inner_no_sync_keeps_the_outer_one(device):
    model = _model(device)
    with measure() as inside:
        with model.no_sync():
            with model.no_sync():
                synthetic_backward(model, 40, rank())
                model.sync_gradients()
            synthetic_backward(model, 41, rank())
            snapshot = local_snapshot(model.module)
            model.sync_gradients()
            changed = same_grads(model.module, snapshot)
    after = _sync_counted(model)
    assert sum(inside.calls.values()) == 0, dict(inside.calls)
    assert changed == []
    assert after.calls["all_reduce"] == len(model.buckets), dict(after.calls)
    assert exact_mismatches(model.module, _avg(model, lambda r: [(40, None), (41, None)])) == []


@pytest.mark.probe(promise="no-sync-nesting", kind="state")
def test_no_sync_left_by_an_exception_restores_syncing(device):
    model = _model(device)
    with pytest.raises(KeyError):
        with model.no_sync():
            synthetic_backward(model, 50, rank())
            raise KeyError("boom")
    with measure() as nested:
        with model.no_sync():
            with pytest.raises(KeyError):
                with model.no_sync():
                    raise KeyError("inner")
            model.sync_gradients()  # still inside the outer no_sync()
    synthetic_backward(model, 51, rank())
    after = _sync_counted(model)
    assert sum(nested.calls.values()) == 0, dict(nested.calls)
    assert after.calls["all_reduce"] == len(model.buckets), dict(after.calls)
    assert exact_mismatches(model.module, _avg(model, lambda r: [(50, None), (51, None)])) == []


@pytest.mark.probe(promise="no-sync-nesting", kind="state")
def test_no_sync_entered_again_after_a_sync(device):
    model = _model(device)
    calls = []
    for round_ in range(3):
        model.zero_grad(set_to_none=True)
        with model.no_sync():
            synthetic_backward(model, 60 + round_, rank())
            calls.append(sum(_sync_counted(model).calls.values()))
        synthetic_backward(model, 70 + round_, rank())
        calls.append(_sync_counted(model).calls["all_reduce"])
        bad = exact_mismatches(model.module, _avg(model, lambda r: [(60 + round_, None), (70 + round_, None)]))
        assert bad == [], (round_, bad)
    assert calls == [0, len(model.buckets)] * 3


# --- missing gradients, lock-step ------------------------------------------------------------------


def _used(names, pattern, r):
    if pattern == "none-anywhere":
        return []
    if pattern == "first-missing-on-rank0":
        return [n for n in names if not (n == names[0] and r == 0)]
    if pattern == "alternating-by-rank":
        return [n for i, n in enumerate(names) if (i + r) % 2 == 0]
    if pattern == "only-last-rank":
        return names if r == world() - 1 else []
    raise AssertionError(pattern)


PATTERNS = ["none-anywhere", "first-missing-on-rank0", "alternating-by-rank", "only-last-rank"]


@pytest.mark.probe(promise="missing-grads", kind="condition")
@pytest.mark.parametrize("pattern", PATTERNS)
def test_missing_grads_contribute_zeros(device, pattern):
    model = _model(device)
    names = [n for n, _ in model.module.named_parameters()]
    synthetic_backward(model, 80, rank(), used=_used(names, pattern, rank()))
    m = _sync_counted(model)
    assert m.calls["all_reduce"] == len(model.buckets), dict(m.calls)
    assert sum(m.calls.values()) == len(model.buckets), dict(m.calls)
    assert m.bytes["all_reduce"] == param_bytes(model.module, names), dict(m.bytes)
    want = _avg(model, lambda r: [(80, _used(names, pattern, r))])
    assert exact_mismatches(model.module, want) == []


@pytest.mark.probe(promise="lock-step", kind="condition")
@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_rank_issues_the_same_collectives(device, pattern, monkeypatch):
    model = _model(device)
    names = [n for n, _ in model.module.named_parameters()]
    spy = AllReduceSpy(monkeypatch)
    synthetic_backward(model, 81, rank(), used=_used(names, pattern, rank()))
    model.sync_gradients()
    synthetic_backward(model, 82, rank(), used=_used(names, pattern, (rank() + 1) % world()))
    model.sync_gradients()
    spy.active = False
    sequences = gather_objects(signature_of(spy.take()))
    assert all(seq == sequences[0] for seq in sequences), sequences
    assert len(sequences[0]) == 2 * len(model.buckets), sequences[0]


@pytest.mark.probe(promise="reduction-order", kind="condition")
@pytest.mark.parametrize("pattern", PATTERNS)
def test_buckets_are_reduced_in_the_order_of_buckets(device, pattern, monkeypatch):
    model = _model(device)
    names = [n for n, _ in model.module.named_parameters()]
    spy = AllReduceSpy(monkeypatch)
    synthetic_backward(model, 83, rank(), used=_used(names, pattern, rank()))
    model.sync_gradients()
    sent = [(t.data_ptr(), t.numel(), t.dtype) for t in spy.take()]
    assert sent == [(b.buffer.data_ptr(), b.buffer.numel(), b.buffer.dtype) for b in model.buckets]


# --- frozen parameters -----------------------------------------------------------------------------


def _freeze(bag, names):
    for n, p in bag.named_parameters():
        if n in names:
            p.requires_grad_(False)
    return bag


@pytest.mark.probe(promise="frozen-params", kind="condition")
@pytest.mark.parametrize("frozen", [("p0",), ("p2", "p3"), ("p5",), ("p0", "p1", "p2", "p3", "p4", "p5")],
                         ids=["first", "middle", "last", "all"])
def test_frozen_parameters_are_not_bucketed_or_sent(device, frozen):
    model = dp(_freeze(ParamBag(SPEC, device), frozen), bucket_cap_mb=CAP)
    trainable = [n for n, p in model.module.named_parameters() if p.requires_grad]
    assert sorted(n for b in model.buckets for n in b.param_names) == sorted(trainable)
    synthetic_backward(model, 90, rank())
    m = _sync_counted(model)
    assert m.calls["all_reduce"] == len(model.buckets), dict(m.calls)
    assert sum(m.calls.values()) == len(model.buckets), dict(m.calls)
    assert m.bytes["all_reduce"] == param_bytes(model.module, trainable), dict(m.bytes)
    frozen_grads = [n for n, p in model.module.named_parameters() if n in frozen and p.grad is not None]
    assert frozen_grads == []
    assert exact_mismatches(model.module, _avg(model, lambda r: [(90, None)])) == []


@pytest.mark.probe(promise="frozen-params", kind="condition")
def test_a_frozen_parameters_own_grad_is_left_as_it_was(device):
    model = dp(_freeze(ParamBag(SPEC, device), ("p1", "p4")), bucket_cap_mb=CAP)
    mine = torch.full_like(model.module.p4, 3.0 + rank())  # a gradient someone set by hand
    model.module.p4.grad = mine
    synthetic_backward(model, 92, rank())
    model.sync_gradients()
    assert model.module.p1.grad is None
    assert model.module.p4.grad is mine and torch.equal(mine, torch.full_like(mine, 3.0 + rank()))


@pytest.mark.probe(promise="frozen-params", kind="condition")
def test_parameter_unfrozen_after_wrapping_stays_out(device):
    """Frozen "when the wrapper is built": unfreezing later does not put it on the wire."""
    model = dp(_freeze(ParamBag(SPEC, device), ("p1",)), bucket_cap_mb=CAP)
    trainable = [n for n, p in model.module.named_parameters() if p.requires_grad]
    model.module.p1.requires_grad_(True)
    synthetic_backward(model, 91, rank())
    local = model.module.p1.grad.detach().clone()
    m = _sync_counted(model)
    assert m.bytes["all_reduce"] == param_bytes(model.module, trainable), dict(m.bytes)
    assert torch.equal(model.module.p1.grad, local)


# --- allocation, freshness, call-time lookup -------------------------------------------------------


@pytest.mark.probe(promise="buckets-allocated-once", kind="resource")
def test_every_sync_goes_through_the_buffers_built_with_the_wrapper(device, monkeypatch):
    model = _model(device)
    built = [(b.buffer.data_ptr(), b.buffer.numel()) for b in model.buckets]  # before any sync
    spy = AllReduceSpy(monkeypatch)
    names = [n for n, _ in model.module.named_parameters()]
    seen = []
    for step in range(4):
        model.zero_grad(set_to_none=step % 2 == 0)
        with model.no_sync():
            synthetic_backward(model, 100 + step, rank(), used=_used(names, "alternating-by-rank", rank() + step))
            model.sync_gradients()
        synthetic_backward(model, 110 + step, rank())
        model.sync_gradients()
        seen.append([(t.data_ptr(), t.numel()) for t in spy.take()])
    assert seen == [built] * 4
    assert [(b.buffer.data_ptr(), b.buffer.numel()) for b in model.buckets] == built


@pytest.mark.probe(promise="fresh-buckets-each-step", kind="state")
@pytest.mark.parametrize("set_to_none", [True, False], ids=["grads-set-to-none", "grads-zeroed"])
def test_each_step_depends_only_on_its_own_gradients(device, set_to_none):
    model = _model(device)
    names = [n for n, _ in model.module.named_parameters()]
    failures = {}
    patterns = [None, "alternating-by-rank", "none-anywhere", "first-missing-on-rank0", None]
    for step, pattern in enumerate(patterns):
        model.zero_grad(set_to_none=set_to_none)
        used = (lambda r: None) if pattern is None else (lambda r: _used(names, pattern, r))
        synthetic_backward(model, 120 + step, rank(), used=used(rank()))
        model.sync_gradients()
        bad = exact_mismatches(model.module, _avg(model, lambda r: [(120 + step, used(r))]))
        if bad:
            failures[step] = bad
    assert failures == {}


@pytest.mark.probe(promise="all-reduce-call-time", kind="resource")
def test_sync_calls_dist_all_reduce_as_looked_up_now(device, monkeypatch):
    model = _model(device)
    spy = AllReduceSpy(monkeypatch)
    synthetic_backward(model, 130, rank())
    with measure() as m:
        model.sync_gradients()
    assert len(spy.take()) == len(model.buckets) == m.calls["all_reduce"], dict(m.calls)
    assert sum(m.calls.values()) == len(model.buckets), dict(m.calls)
