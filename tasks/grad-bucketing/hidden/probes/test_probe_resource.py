"""Resource probes: what one gradient sync puts on the wire, and what it allocates."""

import pytest
import torch
import torch.distributed as dist

from gb_probe_support import (
    dp,
    backward_on,
    bucket_names,
    cap_mb,
    make_batch,
    make_net,
    rank,
    trainable_bytes,
    trainable_names,
)
from infradev_probe import measure
from nanoinfra.config import TrainConfig
from nanoinfra.trainer import Trainer

CAPS = {"one-bucket": 64.0, "several-buckets": cap_mb(1024), "bucket-per-param": cap_mb(16)}


def _synced_once(device, bucket_cap_mb):
    model = dp(make_net(device), bucket_cap_mb=bucket_cap_mb)
    backward_on(model, make_batch(1, rank()), device)
    with measure() as m:
        model.sync_gradients()
    return model, m


@pytest.mark.probe(promise="one-allreduce-per-bucket", kind="resource")
@pytest.mark.parametrize("cap", list(CAPS), ids=list(CAPS))
def test_one_all_reduce_per_bucket(device, cap):
    model, m = _synced_once(device, CAPS[cap])
    assert len(model.buckets) >= 1
    assert m.calls["all_reduce"] == len(model.buckets), dict(m.calls)
    assert sum(m.calls.values()) == m.calls["all_reduce"], f"other collectives in a sync: {dict(m.calls)}"


@pytest.mark.probe(promise="buckets-respect-cap", kind="resource")
def test_bucket_count_follows_the_cap(device):
    names = trainable_names(make_net(device))
    sizes = {n: p.numel() * p.element_size() for n, p in make_net(device).named_parameters()}

    huge = dp(make_net(device), bucket_cap_mb=64.0)
    assert len(huge.buckets) == 1, bucket_names(huge)

    cap = 1024
    medium = dp(make_net(device), bucket_cap_mb=cap_mb(cap))
    plan = bucket_names(medium)
    assert sorted(n for b in plan for n in b) == sorted(names), plan
    for bucket in plan:
        assert len(bucket) == 1 or sum(sizes[n] for n in bucket) <= cap, plan
    assert 1 < len(plan) < len(names), plan


@pytest.mark.probe(promise="bytes-equal-grad-bytes", kind="resource")
@pytest.mark.parametrize("cap", list(CAPS), ids=list(CAPS))
def test_bytes_on_the_wire_equal_gradient_bytes(device, cap):
    model, m = _synced_once(device, CAPS[cap])
    assert m.bytes["all_reduce"] == trainable_bytes(model.module), dict(m.bytes)
    assert sum(m.bytes.values()) == trainable_bytes(model.module), dict(m.bytes)


class _AllReduceRecorder:
    """Holds every tensor handed to all_reduce, so its memory cannot be recycled meanwhile."""

    def __init__(self, monkeypatch):
        self.seen = []
        for module in (dist, dist.distributed_c10d):
            original = module.all_reduce

            def recording(tensor, *args, _original=original, **kwargs):
                self.seen.append(tensor)
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(module, "all_reduce", recording)

    def take(self):
        seen, self.seen = self.seen, []
        return seen


@pytest.mark.probe(promise="buckets-allocated-once", kind="resource")
def test_bucket_buffers_are_reused_across_steps(device, monkeypatch):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    recorder = _AllReduceRecorder(monkeypatch)
    per_step = []
    for step in range(3):
        model.zero_grad(set_to_none=True)
        backward_on(model, make_batch(step, rank()), device)
        model.sync_gradients()
        per_step.append(recorder.take())
    first = [(t.data_ptr(), t.numel()) for t in per_step[0]]
    assert len(first) == len(model.buckets)
    for later in per_step[1:]:
        assert [(t.data_ptr(), t.numel()) for t in later] == first, "a sync communicated freshly allocated tensors"


@pytest.mark.probe(promise="no-sync-no-comm", kind="resource")
def test_no_collectives_inside_no_sync(device):
    model = dp(make_net(device), bucket_cap_mb=cap_mb(1024))
    with measure() as inside:
        with model.no_sync():
            backward_on(model, make_batch(0, rank()), device)
            model.sync_gradients()
            backward_on(model, make_batch(1, rank()), device)
            model.sync_gradients()
    backward_on(model, make_batch(2, rank()), device)
    with measure() as after:
        model.sync_gradients()
    assert sum(inside.calls.values()) == 0, dict(inside.calls)
    assert after.calls["all_reduce"] == len(model.buckets), dict(after.calls)


@pytest.mark.probe(promise="trainer-one-sync-per-step", kind="resource")
def test_trainer_accumulation_syncs_once_per_step(device):
    config = TrainConfig(batch_size=8, grad_accum_steps=4, steps=1, bucket_cap_mb=cap_mb(1024))
    trainer = Trainer(config)
    gen = torch.Generator().manual_seed(31 + rank())
    inputs = torch.randn(8, config.in_features, generator=gen)
    targets = torch.randn(8, config.out_features, generator=gen)
    with measure() as m:
        trainer.train_step(inputs, targets)
    assert m.calls["all_reduce"] == len(trainer.model.buckets), dict(m.calls)
    assert m.bytes["all_reduce"] == trainable_bytes(trainer.model.module), dict(m.bytes)
