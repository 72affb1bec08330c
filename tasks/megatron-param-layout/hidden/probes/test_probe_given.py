"""A layout handed to DDP is the layout used (offsets, buckets, padding, main_grad views, the
gradients' place), and one that does not match DDP's grouping is refused. A DDP that accepts
`full_param_layout` and ignores it, computing its own, fails these: the layouts given here are not
the ones DDP would compute (another data-parallel size's padding, another bucket split, gaps)."""

import pytest
import torch

from layout_ref import ParamNet, describe_buffer, trainable

BF16, FP32 = torch.bfloat16, torch.float32
SHAPES = [(3, 5), (7,), (33, 2), (1,), (10, 10), (129,)]


def _layouts():
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.core.optimizer.param_layout import FullParamLayout, PerBufferParamLayout

    return DistributedOptimizer, FullParamLayout, PerBufferParamLayout


def _gapped(full, PerBufferParamLayout, FullParamLayout, gap=256, bucket_every=2):
    """The same keys, parameters and param indices, laid out by rules no optimizer has: each
    parameter starts on a multiple of `gap` after a gap, and a bucket ends after every
    `bucket_every` parameters (in layout order), its end padded to a multiple of 512."""
    out = {}
    for key, layout in full.layouts.items():
        order = sorted(layout.param_index_map, key=lambda p: layout.param_index_map[p][0])
        index, buckets, unpadded = {}, [], []
        start = bucket_start = 0
        bucket_id = count = 0
        for p in order:
            start = -(-(start + 1) // gap) * gap if start else gap // 2
            end = start + p.data.nelement()
            index[p] = (start, end, bucket_id)
            count += 1
            start = end
            if count == bucket_every:
                unpadded.append(end - bucket_start)
                bucket_end = -(-end // 512) * 512
                buckets.append((bucket_start, bucket_end))
                start = bucket_start = bucket_end
                bucket_id += 1
                count = 0
        if count:
            unpadded.append(start - bucket_start)
            buckets.append((bucket_start, -(-start // 512) * 512))
        out[key] = PerBufferParamLayout(param_index_map=index, bucket_indices=buckets, per_bucket_numel_unpadded=unpadded, param_indices=list(layout.param_indices))
    return FullParamLayout(layouts=out)


def _assert_buffer_follows(buf, layout, what):
    got = describe_buffer(buf)
    assert got["index"] == dict(layout.param_index_map), f"{what}: param_index_map is not the given layout's"
    assert got["buckets"] == [tuple(b) for b in layout.bucket_indices], f"{what}: bucket_indices {got['buckets']}, given {layout.bucket_indices}"
    assert got["numel"] == layout.bucket_indices[-1][1], f"{what}: numel {got['numel']}, the given layout ends at {layout.bucket_indices[-1][1]}"
    assert got["numel_unpadded"] == sum(layout.per_bucket_numel_unpadded)
    assert buf.grad_data.numel() == layout.bucket_indices[-1][1]
    assert len(buf.buckets) == len(layout.bucket_indices), f"{what}: {len(buf.buckets)} buckets, the layout has {len(layout.bucket_indices)}"
    for bucket in buf.buckets:
        assert all(layout.param_index_map[p][2] == bucket.bucket_id for p in bucket.params_list), f"{what}: bucket {bucket.bucket_id} holds a parameter of another bucket"
    elsize = buf.grad_data.element_size()
    for p, (start, end, _) in layout.param_index_map.items():
        assert p.main_grad.data_ptr() == buf.grad_data.data_ptr() + start * elsize, f"{what}: main_grad of a parameter is not at offset {start}"
        if buf.param_data is not None:
            assert p.data.data_ptr() == buf.param_data.data_ptr() + start * buf.param_data.element_size(), f"{what}: a parameter's data is not at offset {start} of the param buffer"


@pytest.mark.probe(promise="given-layout-is-used", kind="state")
@pytest.mark.parametrize("dp,bucket_size", [(3, None), (7, 64), (1, 1), (5, 300)])
def test_ddp_uses_optimizer_layout_of_another_dp_size(make_ddp, dp, bucket_size):
    DistributedOptimizer, _, _ = _layouts()
    module = ParamNet(SHAPES, [FP32, BF16, FP32, BF16, FP32, FP32], expert=(4,), shared=(2,), seed=6)
    ddp_cfg = dict(use_distributed_optimizer=True, overlap_grad_reduce=True, bucket_size=40_000_000, grad_reduce_in_fp32=True)
    from megatron.core.distributed import DistributedDataParallelConfig

    full = DistributedOptimizer.compute_full_param_layout(trainable(module), bucket_size, dp, DistributedDataParallelConfig(**ddp_cfg), expert_data_parallel_world_size=dp)
    ddp = make_ddp(module, full_param_layout=full, **ddp_cfg)
    buffers = list(ddp.buffers) + list(ddp.expert_parallel_buffers)
    assert len(buffers) == len(full.layouts)
    for buf in buffers:
        key = next(k for k in full.layouts if set(full.layouts[k].param_index_map) == set(buf.params))
        _assert_buffer_follows(buf, full.layouts[key], f"dp {dp}, bucket {bucket_size}, {key}")


@pytest.mark.probe(promise="given-layout-is-used", kind="condition")
@pytest.mark.parametrize("bucket_every", [1, 2, 5])
def test_ddp_uses_a_hand_made_layout(make_ddp, bucket_every):
    DistributedOptimizer, FullParamLayout, PerBufferParamLayout = _layouts()
    module = ParamNet(SHAPES, None, expert=(1,), shared=(), seed=7)
    from megatron.core.distributed import DistributedDataParallelConfig

    cfg = dict(use_distributed_optimizer=True, overlap_grad_reduce=True, bucket_size=40_000_000, grad_reduce_in_fp32=True)
    full = _gapped(DistributedOptimizer.compute_full_param_layout(trainable(module), None, 1, DistributedDataParallelConfig(**cfg)), PerBufferParamLayout, FullParamLayout, bucket_every=bucket_every)
    ddp = make_ddp(module, full_param_layout=full, **cfg)
    for buf in list(ddp.buffers) + list(ddp.expert_parallel_buffers):
        key = next(k for k in full.layouts if set(full.layouts[k].param_index_map) == set(buf.params))
        _assert_buffer_follows(buf, full.layouts[key], f"hand-made layout, a bucket every {bucket_every}, {key}")


@pytest.mark.probe(promise="grads-at-layout-offsets", kind="numerical")
@pytest.mark.parametrize("overlap", [False, True])
@pytest.mark.parametrize("hand_made", [False, True])
def test_grads_land_at_layout_offsets(make_ddp, overlap, hand_made):
    DistributedOptimizer, FullParamLayout, PerBufferParamLayout = _layouts()
    from megatron.core.distributed import DistributedDataParallelConfig

    module = ParamNet(SHAPES, [FP32, BF16, FP32, FP32, BF16, FP32], expert=(3,), shared=(0,), seed=8)
    cfg = dict(use_distributed_optimizer=True, overlap_grad_reduce=overlap, bucket_size=40_000_000 if overlap else None, grad_reduce_in_fp32=True)
    full = DistributedOptimizer.compute_full_param_layout(trainable(module), 100 if overlap else None, 3, DistributedDataParallelConfig(**cfg), expert_data_parallel_world_size=3)
    if hand_made:
        full = _gapped(full, PerBufferParamLayout, FullParamLayout, bucket_every=3)
    ddp = make_ddp(module, full_param_layout=full, **cfg)
    g = torch.Generator().manual_seed(9)
    weights = [torch.randn(p.shape, generator=g).cuda() for p in module.ps]
    for step in range(2):
        ddp.zero_grad_buffer()
        loss = ddp(weights)
        loss.backward()
        ddp.finish_grad_sync()
        for i, (p, w) in enumerate(zip(module.ps, weights)):
            want = w.to(p.dtype).float()
            torch.testing.assert_close(p.main_grad.float(), want, rtol=0, atol=0, msg=lambda m: f"step {step}, param {i}: main_grad is not its gradient: {m}")
        for buf in list(ddp.buffers) + list(ddp.expert_parallel_buffers):
            key = next(k for k in full.layouts if set(full.layouts[k].param_index_map) == set(buf.params))
            layout = full.layouts[key]
            assert buf.grad_data.numel() == layout.bucket_indices[-1][1]
            used = torch.zeros(buf.grad_data.numel(), dtype=torch.bool, device=buf.grad_data.device)
            for p, (start, end, _) in layout.param_index_map.items():
                torch.testing.assert_close(buf.grad_data[start:end].float(), p.main_grad.reshape(-1).float(), rtol=0, atol=0)
                used[start:end] = True
            assert not buf.grad_data[~used].any(), f"step {step}, {key}: the grad buffer's padding is not zero"


@pytest.mark.probe(promise="mismatched-layout-rejected", kind="condition")
@pytest.mark.parametrize("mismatch", ["missing-param", "grad-dtype", "param-indices", "extra-key"])
def test_mismatched_layout_raises(make_ddp, mismatch):
    DistributedOptimizer, FullParamLayout, PerBufferParamLayout = _layouts()
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.optimizer.param_layout import BufferKey

    module = ParamNet(SHAPES, [FP32, BF16, FP32, FP32, BF16, FP32], expert=(5,), shared=(), seed=10)
    cfg = dict(use_distributed_optimizer=True, overlap_grad_reduce=False, grad_reduce_in_fp32=True)
    params = trainable(module)
    if mismatch == "missing-param":
        full = DistributedOptimizer.compute_full_param_layout(params[1:], None, 1, DistributedDataParallelConfig(**cfg))
    elif mismatch == "grad-dtype":
        full = DistributedOptimizer.compute_full_param_layout(params, None, 1, DistributedDataParallelConfig(**{**cfg, "grad_reduce_in_fp32": False}))
    else:
        full = DistributedOptimizer.compute_full_param_layout(params, None, 1, DistributedDataParallelConfig(**cfg))
        if mismatch == "param-indices":
            key = next(k for k in full.layouts if len(full.layouts[k].param_indices) > 1)
            full.layouts[key].param_indices = list(reversed(full.layouts[key].param_indices))
        else:
            extra = ParamNet([(4,)], [torch.float16], seed=11)
            full.layouts[BufferKey(torch.float16, torch.float32, False)] = DistributedOptimizer._compute_per_buffer_param_layout(trainable(extra), None, 1, DistributedDataParallelConfig(**cfg), [0])
    with pytest.raises(Exception):
        make_ddp(module, full_param_layout=full, **cfg)
