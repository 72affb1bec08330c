"""Numerical probes: synced gradients are the float64 average of the ranks' local gradients."""

import pytest
import torch

from gb_probe_support import (
    dp,
    averaged_grads,
    backward_on,
    cap_mb,
    float64_copy,
    grad_mismatches,
    make_batch,
    make_net,
    rank,
    world,
)
from nanoinfra.config import TrainConfig
from nanoinfra.trainer import Trainer

CAPS = {"one-bucket": 64.0, "several-buckets": cap_mb(1024), "bucket-per-param": cap_mb(16)}


@pytest.mark.probe(promise="averaged-gradients", kind="numerical")
@pytest.mark.parametrize("cap", list(CAPS), ids=list(CAPS))
def test_synced_grads_equal_float64_average(device, cap):
    model = dp(make_net(device, seed=100 + rank()), bucket_cap_mb=CAPS[cap])
    template = float64_copy(model.module)
    backward_on(model, make_batch(0, rank()), device)
    model.sync_gradients()
    expected = averaged_grads(template, [([make_batch(0, r)], True) for r in range(world())])
    assert grad_mismatches(model.module, expected) == []


@pytest.mark.probe(promise="trainer-full-batch-update", kind="numerical")
def test_trainer_step_with_accumulation_matches_float64_sgd(device):
    config = TrainConfig(
        in_features=8, hidden=12, out_features=3, batch_size=8, lr=0.1, steps=1,
        seed=5, bucket_cap_mb=cap_mb(200), grad_accum_steps=2,
    )
    trainer = Trainer(config)
    template = float64_copy(trainer.model.module)
    batches = []
    for r in range(world()):
        gen = torch.Generator().manual_seed(700 + r)
        batches.append((torch.randn(8, 8, generator=gen), torch.randn(8, 3, generator=gen)))
    trainer.train_step(*batches[rank()])

    # Full-batch float64 gradient of every rank, averaged; the trainer's loss is MSELoss (mean).
    grads = None
    for x, y in batches:
        net = float64_copy(template)
        torch.nn.functional.mse_loss(net(x.double()), y.double()).backward()
        local = {n: p.grad for n, p in net.named_parameters()}
        grads = local if grads is None else {n: grads[n] + local[n] for n in grads}
    bad = []
    for name, param in trainer.model.module.named_parameters():
        want = dict(template.named_parameters())[name].detach() - config.lr * grads[name] / world()
        got = param.detach().to("cpu", torch.float64)
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-6):
            bad.append(f"{name}: max abs error {(got - want).abs().max().item():.3g}")
    assert bad == []
