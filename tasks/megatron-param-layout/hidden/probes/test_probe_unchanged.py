"""A refactor: for configs the PR's tests leave out, DDP's buffers are what the pre-PR code made
(layout_ref.ref_layout is our statement of those rules). These pass on base by design; they fail a
patch that changes a padding, an alignment, a bucket boundary or a grouping."""

import pytest
import torch

from layout_ref import ParamNet, describe_buffer, ref_groups, ref_layout, trainable

BF16, FP32, FP16 = torch.bfloat16, torch.float32, torch.float16

# name: (shapes, dtypes or None, expert indices, shared indices)
MODELS = {
    "odd-fp32": ([(3, 5), (7,), (33, 2), (1,), (10, 10), (129,)], None, (), ()),
    "shared-middle": ([(8, 9), (65,), (4, 4), (300,), (2,)], None, (), (2,)),
    "shared-first-and-last": ([(50,), (6, 7), (64,), (3,)], None, (), (0, 3)),
    "shared-adjacent": ([(31,), (40,), (2, 33), (5,)], None, (), (1, 2)),
    "mixed-dtypes": ([(3, 5), (7,), (33, 2), (1,), (10, 10), (17, 3)], [BF16, FP32, BF16, FP16, FP32, BF16], (), ()),
    "experts": ([(9, 9), (13,), (12, 5), (70,), (6,)], None, (1, 3, 4), ()),
    "experts-mixed-shared": ([(9, 9), (13,), (12, 5), (70,), (6,), (3, 3)], [BF16, BF16, FP32, BF16, FP32, BF16], (1, 4), (2,)),
    "expert-first": ([(5, 6), (13,), (12, 5), (7, 7), (33,)], [BF16, FP32, BF16, BF16, FP32], (0, 3), ()),
}
CONFIGS = [
    # (distopt, pad_high, overlap_grad_reduce, bucket_size, grad_reduce_in_fp32)
    (False, False, False, None, True),
    (False, False, True, 100, True),
    (False, False, True, 1, False),
    (True, False, False, None, True),
    (True, False, True, 100, True),
    (True, False, True, 1, False),
    (True, True, True, 250, True),
    (True, True, False, None, False),
]


def _expect(ddp, module, distopt, pad_high, fp32):
    groups = ref_groups(trainable(module), fp32)
    dense = [g for g in groups if not g[2]]
    expert = [g for g in groups if g[2]]
    return dense, expert


@pytest.mark.probe(promise="layout-unchanged", kind="numerical")
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "distopt%d-high%d-overlap%d-bucket%s-fp32%d" % (c[0], c[1], c[2], c[3], c[4]))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_buffers_equal_pre_pr_layout(make_ddp, model_name, config):
    distopt, pad_high, overlap, bucket_size, fp32 = config
    shapes, dtypes, expert, shared = MODELS[model_name]
    module = ParamNet(shapes, dtypes, expert, shared, seed=1)
    ddp = make_ddp(module, use_distributed_optimizer=distopt, pad_buckets_for_high_nccl_busbw=pad_high, overlap_grad_reduce=overlap, bucket_size=bucket_size, grad_reduce_in_fp32=fp32)
    dense, expert_groups = _expect(ddp, module, distopt, pad_high, fp32)
    for kind, buffers, groups in (("dense", ddp.buffers, dense), ("expert", ddp.expert_parallel_buffers, expert_groups)):
        assert len(buffers) == len(groups), f"{kind}: {len(buffers)} buffers, the pre-PR code makes {len(groups)}"
        for buf, (param_dtype, grad_dtype, _, params, indices) in zip(buffers, groups):
            assert (buf.param_dtype, buf.grad_dtype) == (param_dtype, grad_dtype), f"{kind}: buffer dtypes {(buf.param_dtype, buf.grad_dtype)}, expected {(param_dtype, grad_dtype)}"
            assert list(buf.params) == params, f"{kind} {param_dtype}: the buffer's parameters or their order differ"
            assert list(buf.param_indices) == indices, f"{kind} {param_dtype}: param_indices {list(buf.param_indices)}, expected {indices}"
            index, buckets, unpadded = ref_layout(params, ddp.bucket_size, 1, distopt, pad_high)
            got = describe_buffer(buf)
            assert got["buckets"] == buckets, f"{kind} {param_dtype}: bucket_indices {got['buckets']}, expected {buckets}"
            assert got["index"] == index, f"{kind} {param_dtype}: param_index_map differs from the pre-PR layout"
            assert got["numel"] == buckets[-1][1] and got["numel_unpadded"] == sum(unpadded), f"{kind} {param_dtype}: numel {got['numel']}/{got['numel_unpadded']}, expected {buckets[-1][1]}/{sum(unpadded)}"
            assert len(buf.buckets) == len(buckets)
            for i, bucket in enumerate(buf.buckets):
                want = [p for p in params[::-1] if index[p][2] == i]
                assert list(bucket.params_list) == want, f"{kind} {param_dtype}: bucket {i} holds other parameters"
                assert bucket.numel_unpadded == unpadded[i], f"{kind} {param_dtype}: bucket {i} numel_unpadded {bucket.numel_unpadded}, expected {unpadded[i]}"


@pytest.mark.probe(promise="ddp-computes-layout-without-one", kind="state")
@pytest.mark.parametrize("pad_high", [False, True])
@pytest.mark.parametrize("bucket_size", [None, 150])
def test_ddp_without_layout_computes_optimizers(make_ddp, pad_high, bucket_size):
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    shapes, dtypes, expert, shared = MODELS["experts-mixed-shared"]
    module = ParamNet(shapes, dtypes, expert, shared, seed=2)
    ddp = make_ddp(module, use_distributed_optimizer=True, pad_buckets_for_high_nccl_busbw=pad_high, overlap_grad_reduce=bucket_size is not None, bucket_size=bucket_size)
    full = DistributedOptimizer.compute_full_param_layout(trainable(module), ddp.bucket_size, 1, ddp.ddp_config, expert_data_parallel_world_size=1)
    buffers = list(ddp.buffers) + list(ddp.expert_parallel_buffers)
    assert len(buffers) == len(full.layouts)
    for buf in buffers:
        key = next(k for k in full.layouts if k.param_dtype == buf.param_dtype and k.grad_dtype == buf.grad_dtype and k.is_expert_parallel == (buf in ddp.expert_parallel_buffers))
        layout = full.layouts[key]
        assert dict(buf.param_index_map) == dict(layout.param_index_map), f"{key}: DDP's own layout differs from compute_full_param_layout's"
        assert [tuple(b) for b in buf.bucket_indices] == [tuple(b) for b in layout.bucket_indices]
        index, buckets, _ = ref_layout(list(buf.params), ddp.bucket_size, 1, True, pad_high)
        assert [tuple(b) for b in buf.bucket_indices] == buckets and dict(buf.param_index_map) == index, f"{key}: not the optimizer's padded layout"


@pytest.mark.probe(promise="process-groups-unchanged", kind="state")
@pytest.mark.parametrize("distopt", [False, True])
@pytest.mark.parametrize("model_name", ["experts", "experts-mixed-shared", "expert-first"])
def test_buffers_reduce_over_their_groups(make_ddp, model_name, distopt):
    """Dense buffers reduce over DDP's data-parallel group (with context parallelism), expert
    buffers over its expert data-parallel group, and each bucket group over its buffers' group.
    On one GPU both groups have one rank, but they are two different groups."""
    shapes, dtypes, expert, shared = MODELS[model_name]
    ddp = make_ddp(ParamNet(shapes, dtypes, expert, shared, seed=8), use_distributed_optimizer=distopt, overlap_grad_reduce=True, bucket_size=100)
    dense_group, expert_group = ddp.intra_dp_cp_group, ddp.intra_expt_dp_group
    assert dense_group is not expert_group
    assert ddp.buffers and ddp.expert_parallel_buffers
    for buf in ddp.buffers:
        assert buf.data_parallel_group is dense_group, f"a dense buffer ({buf.param_dtype}) does not reduce over the data-parallel group"
    for buf in ddp.expert_parallel_buffers:
        assert buf.data_parallel_group is expert_group, f"an expert-parallel buffer ({buf.param_dtype}) does not reduce over the expert data-parallel group"
    for buf in list(ddp.buffers) + list(ddp.expert_parallel_buffers):
        assert buf.gradient_scaling_factor == 1.0, f"gradient_scaling_factor {buf.gradient_scaling_factor}: 1 / data-parallel size is 1 here"
    for kind, groups, want in (("dense", ddp.bucket_groups, dense_group), ("expert", ddp.expert_parallel_bucket_groups, expert_group)):
        for g in groups:
            got = g.intra_distributed_optimizer_instance_group if distopt else g.data_parallel_group
            assert got is want, f"a {kind} bucket group reduces over another group"


@pytest.mark.probe(promise="process-groups-unchanged", kind="condition")
@pytest.mark.parametrize("average_in_collective,per_token_loss", [(False, False), (True, False), (False, True)])
def test_gradient_scaling_configs(make_ddp, average_in_collective, per_token_loss):
    """DDP builds with every gradient-scaling choice it built with before (averaging in the
    collective, per-token loss), dense and expert buffers alike; at data-parallel size 1 every
    scaling factor is 1 (1 / dp, edp / dp, or 1 with per-token loss)."""
    shapes, dtypes, expert, shared = MODELS["expert-first"]
    ddp = make_ddp(ParamNet(shapes, dtypes, expert, shared, seed=10), model_config={"calculate_per_token_loss": per_token_loss},
                   use_distributed_optimizer=True, overlap_grad_reduce=True, bucket_size=100, average_in_collective=average_in_collective)
    buffers = list(ddp.buffers) + list(ddp.expert_parallel_buffers)
    assert ddp.buffers and ddp.expert_parallel_buffers
    assert all(b.gradient_scaling_factor == 1.0 for b in buffers), [b.gradient_scaling_factor for b in buffers]
