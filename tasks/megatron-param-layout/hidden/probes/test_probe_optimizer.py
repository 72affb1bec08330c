"""compute_full_param_layout itself: the optimizer's rules for shapes, bucket sizes, data-parallel
sizes and shared embeddings the PR's tests do not try; expert padding; purity. No GPU needed."""

import random

import pytest
import torch

from layout_ref import ParamNet, ref_groups, ref_layout, trainable

BF16, FP32 = torch.bfloat16, torch.float32


def _config(ddp_config_cls, pad_high, fp32=True):
    return ddp_config_cls(use_distributed_optimizer=True, pad_buckets_for_high_nccl_busbw=pad_high, grad_reduce_in_fp32=fp32, overlap_grad_reduce=True, bucket_size=1000)


def _random_model(rng):
    n = rng.randint(1, 9)
    shapes = [tuple(rng.choice([1, 2, 3, 7, 63, 64, 65, 127, 200]) for _ in range(rng.randint(1, 2))) for _ in range(n)]
    dtypes = [rng.choice([BF16, FP32]) for _ in range(n)]
    expert = tuple(i for i in range(n) if rng.random() < 0.25)
    shared = tuple(i for i in range(n) if rng.random() < 0.25)
    return ParamNet(shapes, dtypes, expert, shared, seed=rng.randint(0, 99))


def _check_layout(full, params, bucket_size, dp, edp, pad_high, fp32, what):
    groups = ref_groups(params, fp32)
    assert len(full.layouts) == len(groups), f"{what}: {len(full.layouts)} buffer keys, expected {len(groups)}"
    for param_dtype, grad_dtype, expert, group, indices in groups:
        key = next((k for k in full.layouts if (k.param_dtype, k.grad_dtype, k.is_expert_parallel) == (param_dtype, grad_dtype, expert)), None)
        assert key is not None, f"{what}: no layout for {(param_dtype, grad_dtype, expert)}"
        layout = full.layouts[key]
        index, buckets, unpadded = ref_layout(group, bucket_size, edp if expert else dp, True, pad_high)
        assert [tuple(b) for b in layout.bucket_indices] == buckets, f"{what} {key}: bucket_indices {layout.bucket_indices}, expected {buckets}"
        assert dict(layout.param_index_map) == index, f"{what} {key}: param_index_map differs from the optimizer's rules"
        assert list(layout.per_bucket_numel_unpadded) == unpadded, f"{what} {key}: per_bucket_numel_unpadded {layout.per_bucket_numel_unpadded}, expected {unpadded}"
        assert list(layout.param_indices) == indices, f"{what} {key}: param_indices {layout.param_indices}, expected {indices}"


@pytest.mark.probe(promise="optimizer-rules", kind="numerical")
@pytest.mark.parametrize("seed", range(6))
def test_random_models_follow_the_rules(ddp_config_cls, seed):
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    rng = random.Random(seed)
    for trial in range(12):
        module = _random_model(rng)
        bucket_size = rng.choice([None, 1, 64, 100, 333, 5000])
        dp = rng.choice([1, 2, 3, 5, 8, 12, 129])
        pad_high = rng.random() < 0.3
        fp32 = rng.random() < 0.7
        cfg = _config(ddp_config_cls, pad_high, fp32)
        params = trainable(module)
        full = DistributedOptimizer.compute_full_param_layout(params, bucket_size, dp, cfg, expert_data_parallel_world_size=dp)
        _check_layout(full, params, bucket_size, dp, dp, pad_high, fp32, f"seed {seed} trial {trial} (dp {dp}, bucket {bucket_size}, high {pad_high})")


@pytest.mark.probe(promise="expert-padding", kind="numerical")
@pytest.mark.parametrize("dp,edp", [(3, 5), (1, 6), (16, 2)])
@pytest.mark.parametrize("pass_edp", [True, False])
def test_expert_buffers_padded_by_expert_dp(ddp_config_cls, dp, edp, pass_edp):
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    module = ParamNet([(9, 9), (13,), (12, 5), (70,), (6,)], [BF16, BF16, BF16, BF16, BF16], expert=(1, 3, 4), shared=(), seed=4)
    params = trainable(module)
    cfg = _config(ddp_config_cls, False)
    kwargs = {"expert_data_parallel_world_size": edp} if pass_edp else {}
    full = DistributedOptimizer.compute_full_param_layout(params, None, dp, cfg, **kwargs)
    _check_layout(full, params, None, dp, edp if pass_edp else dp, False, True, f"dp {dp} edp {edp if pass_edp else '(not given)'}")


@pytest.mark.probe(promise="optimizer-rules", kind="state")
def test_layout_is_pure(ddp_config_cls):
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    module = ParamNet([(7, 3), (65,), (2,), (40, 2)], [FP32, BF16, FP32, BF16], expert=(2,), shared=(1,), seed=5)
    params = trainable(module)
    before = [(p.data_ptr(), p.detach().clone(), sorted(vars(p))) for p in params]
    cfg = _config(ddp_config_cls, True)
    a = DistributedOptimizer.compute_full_param_layout(params, 50, 4, cfg, expert_data_parallel_world_size=2)
    b = DistributedOptimizer.compute_full_param_layout(params, 50, 4, cfg, expert_data_parallel_world_size=2)
    assert set(a.layouts) == set(b.layouts)
    for k in a.layouts:
        assert dict(a.layouts[k].param_index_map) == dict(b.layouts[k].param_index_map) and list(a.layouts[k].bucket_indices) == list(b.layouts[k].bucket_indices), f"{k}: a second call gave another layout"
    for p, (ptr, value, attrs) in zip(params, before):
        assert p.data_ptr() == ptr and torch.equal(p.detach(), value) and sorted(vars(p)) == attrs, "compute_full_param_layout changed a parameter"
    _check_layout(a, params, 50, 4, 2, True, True, "after two calls")
