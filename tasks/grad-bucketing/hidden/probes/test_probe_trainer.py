"""Trainer and config probes: accumulation equals one full-batch SGD step, k equal micro-batches
with communication only after the last, the step's loss, the configured cap, validation messages."""

import copy
import math

import pytest
import torch
import torch.distributed as dist

from gb_probe_support import AllReduceSpy, MIB, float64_copy, rank, trainable_bytes, world
from infradev_probe import measure
from nanoinfra import runtime
from nanoinfra.config import TrainConfig
from nanoinfra.models import TinyMLP
from nanoinfra.parallel import DataParallel
from nanoinfra.trainer import Trainer


def _rank_batch(step, r, rows, config):
    gen = torch.Generator().manual_seed(4_000 + 101 * step + r)
    return torch.randn(rows, config.in_features, generator=gen), torch.randn(rows, config.out_features, generator=gen)


def _reference_step(template, batches, lr):
    """float64 full-batch SGD on every rank's batch, gradients averaged; returns (new params, losses)."""
    grads, losses = None, []
    for x, y in batches:
        net = copy.deepcopy(template)
        loss = torch.nn.functional.mse_loss(net(x.double()), y.double())
        loss.backward()
        losses.append(loss.item())
        local = {n: p.grad for n, p in net.named_parameters()}
        grads = local if grads is None else {n: grads[n] + local[n] for n in grads}
    new = {n: p.detach() - lr * grads[n] / len(batches) for n, p in template.named_parameters()}
    return new, losses


def _param_errors(module, want):
    bad = []
    for name, param in module.named_parameters():
        got = param.detach().to("cpu", torch.float64)
        if not torch.allclose(got, want[name], rtol=1e-5, atol=1e-6):
            bad.append(f"{name}: max abs error {(got - want[name]).abs().max().item():.3g}")
    return bad


@pytest.mark.probe(promise="trainer-full-batch-update", kind="numerical")
@pytest.mark.parametrize("batch, k", [(12, 1), (12, 3), (12, 4), (10, 5), (6, 6)])
def test_accumulated_update_equals_one_full_batch_sgd_step(batch, k):
    config = TrainConfig(in_features=5, hidden=7, out_features=3, batch_size=batch, lr=0.2, steps=2,
                         seed=3, bucket_cap_mb=300 / MIB, grad_accum_steps=k)
    trainer = Trainer(config)
    bad = {}
    for step in range(2):  # the second step must not carry anything of the first
        template = float64_copy(trainer.model.module)
        batches = [_rank_batch(step, r, batch, config) for r in range(world())]
        trainer.train_step(*batches[rank()])
        want, _ = _reference_step(template, batches, config.lr)
        errors = _param_errors(trainer.model.module, want)
        if errors:
            bad[step] = errors
    assert bad == {}


@pytest.mark.probe(promise="trainer-returns-step-loss", kind="numerical")
@pytest.mark.parametrize("k", [1, 2, 4])
def test_train_step_returns_the_loss_of_the_whole_batch(k):
    config = TrainConfig(in_features=5, hidden=7, out_features=3, batch_size=8, lr=0.2, seed=4,
                         grad_accum_steps=k)
    trainer = Trainer(config)
    template = float64_copy(trainer.model.module)
    batches = [_rank_batch(9, r, 8, config) for r in range(world())]
    got = trainer.train_step(*batches[rank()])
    _, losses = _reference_step(template, batches, config.lr)
    assert isinstance(got, float) and math.isclose(got, losses[rank()], rel_tol=1e-5, abs_tol=1e-7), (got, losses)


class _Recording(torch.nn.Module):
    """Wraps a module; logs the rows of every forward into a shared timeline."""

    def __init__(self, inner, timeline):
        super().__init__()
        self.inner = inner
        self.timeline = timeline

    def forward(self, x):
        self.timeline.append(("forward", x.shape[0]))
        return self.inner(x)


@pytest.mark.probe(promise="trainer-micro-batches", kind="state")
@pytest.mark.parametrize("batch, k, rows", [(12, 3, 12), (8, 2, 8), (9, 1, 9), (8, 8, 8), (4, 2, 10)])
def test_k_equal_micro_batches_and_communication_after_the_last(batch, k, rows, monkeypatch):
    """``rows``: the batch handed to train_step; it is split, whatever config.batch_size says."""
    config = TrainConfig(in_features=4, hidden=6, out_features=2, batch_size=batch, seed=1,
                         bucket_cap_mb=100 / MIB, grad_accum_steps=k)
    timeline = []
    torch.manual_seed(config.seed)
    trainer = Trainer(config, module=_Recording(TinyMLP(4, 6, 2), timeline))
    spy = AllReduceSpy(monkeypatch)
    spy_seen = spy.seen

    class _Marker(list):
        def append(self, tensor):
            timeline.append(("all_reduce", tensor.numel()))
            super().append(tensor)

    spy.seen = _Marker(spy_seen)
    x, y = _rank_batch(0, rank(), rows, config)
    timeline.clear()
    trainer.train_step(x, y)
    buckets = len(trainer.model.buckets)
    forwards = [e for e in timeline if e[0] == "forward"]
    assert forwards == [("forward", rows // k)] * k, timeline
    # One sync's worth of all-reduces, all of them after the last micro-batch's forward.
    assert [e[0] for e in timeline] == ["forward"] * k + ["all_reduce"] * buckets, timeline


@pytest.mark.probe(promise="trainer-one-sync-per-step", kind="resource")
@pytest.mark.parametrize("k", [1, 2, 4])
def test_one_sync_per_optimizer_step(k):
    config = TrainConfig(batch_size=8, grad_accum_steps=k, steps=3, bucket_cap_mb=1024 / MIB)
    trainer = Trainer(config)
    for step in range(2):
        x, y = _rank_batch(step, rank(), 8, config)
        with measure() as m:
            trainer.train_step(x, y)
        assert m.calls["all_reduce"] == len(trainer.model.buckets), dict(m.calls)
        assert sum(m.calls.values()) == len(trainer.model.buckets), dict(m.calls)
        assert m.bytes["all_reduce"] == trainable_bytes(trainer.model.module), dict(m.bytes)


@pytest.mark.probe(promise="trainer-cap", kind="condition")
@pytest.mark.parametrize("cap_bytes", [64, 1000, 100 * MIB])
def test_trainer_builds_the_wrapper_with_the_configured_cap(cap_bytes):
    config = TrainConfig(in_features=6, hidden=10, out_features=3, bucket_cap_mb=cap_bytes / MIB)
    trainer = Trainer(config)
    assert isinstance(trainer.model, DataParallel)
    torch.manual_seed(config.seed)
    same = DataParallel(TinyMLP(6, 10, 3).to(runtime.resolve_device()), bucket_cap_mb=cap_bytes / MIB)
    assert [list(b.param_names) for b in trainer.model.buckets] == [list(b.param_names) for b in same.buckets]
    sizes = {n: p.numel() * p.element_size() for n, p in trainer.model.module.named_parameters()}
    for b in trainer.model.buckets:
        assert len(b.param_names) == 1 or sum(sizes[n] for n in b.param_names) <= cap_bytes


@pytest.mark.probe(promise="runs-anywhere", kind="condition")
def test_buffers_live_on_the_parameters_device_from_the_environment():
    trainer = Trainer(TrainConfig(bucket_cap_mb=200 / MIB))
    where = runtime.resolve_device()
    assert {p.device for p in trainer.model.parameters()} == {where}
    assert trainer.model.buckets and all(b.buffer.device == where for b in trainer.model.buckets)
    assert dist.get_world_size() == world() and runtime.world_size() == world()


@pytest.mark.probe(promise="config-bucket-cap", kind="condition")
@pytest.mark.parametrize("value", [0, 0.0, -1e-9, -3, -25.0])
def test_non_positive_bucket_cap_is_rejected_naming_the_field(value):
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        TrainConfig(bucket_cap_mb=value)


@pytest.mark.probe(promise="config-bucket-cap", kind="condition")
@pytest.mark.parametrize("value", [1e-6, 0.5, 1, 25.0, 4096.0])
def test_positive_bucket_caps_are_accepted(value):
    assert TrainConfig(bucket_cap_mb=value).bucket_cap_mb == value
    assert TrainConfig().bucket_cap_mb == 25.0


@pytest.mark.probe(promise="config-grad-accum", kind="condition")
@pytest.mark.parametrize("batch, k", [(8, 0), (8, -1), (8, 3), (6, 4), (4, 8), (9, 2)])
def test_bad_accumulation_is_rejected_naming_the_field(batch, k):
    with pytest.raises(ValueError, match="grad_accum_steps"):
        TrainConfig(batch_size=batch, grad_accum_steps=k)


@pytest.mark.probe(promise="config-grad-accum", kind="condition")
@pytest.mark.parametrize("batch, k", [(8, 1), (8, 8), (12, 3), (12, 4), (1, 1)])
def test_dividing_accumulation_is_accepted(batch, k):
    assert TrainConfig(batch_size=batch, grad_accum_steps=k).grad_accum_steps == k
    assert TrainConfig().grad_accum_steps == 1
