"""get_model (megatron/training/training.py) hands DDP the optimizer's layout. The data-parallel
sizes it reads are patched to distinct values (3 with context parallelism, 5 without, 7 for the
experts) so that which size went where shows in the buffers' padding; the layout call is spied on."""

import sys

import pytest
import torch

from layout_ref import ParamNet, trainable


@pytest.fixture
def megatron_args(monkeypatch, model_parallel):
    from megatron.training import global_vars
    from megatron.training.arguments import parse_args

    monkeypatch.setattr(sys, "argv", ["probe"])
    args = parse_args(ignore_unknown_args=True)
    for name, value in dict(
        use_distributed_optimizer=True, overlap_grad_reduce=True, ddp_bucket_size=300, ddp_num_buckets=None,
        accumulate_allreduce_grads_in_fp32=True, fp16=False, bf16=False, use_torch_fsdp2=False,
        use_megatron_fsdp=False, init_model_with_meta_device=False, data_parallel_random_init=False,
        overlap_param_gather_with_optimizer_step=False, virtual_pipeline_model_parallel_size=None, load=None,
        use_cpu_initialization=False,
    ).items():
        setattr(args, name, value)
    monkeypatch.setattr(global_vars, "_GLOBAL_ARGS", args)
    yield args


def _provider(seed, dtypes=None):
    from megatron.core.transformer import TransformerConfig

    def provide(*_, **__):
        net = ParamNet([(9, 9), (13,), (12, 5), (70,), (6,)], dtypes, expert=(1, 3), shared=(), seed=seed)
        net.config = TransformerConfig(num_attention_heads=1, num_layers=1)
        return net

    return provide


@pytest.mark.probe(promise="get-model-passes-layouts", kind="condition")
@pytest.mark.parametrize("case", ["bucketed", "gather-with-optimizer-step", "later-pipeline-stage", "no-distributed-optimizer", "two-model-chunks"])
def test_get_model_passes_the_optimizers_layout(megatron_args, monkeypatch, case):
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer
    from megatron.training import training

    calls = []
    real = getattr(DistributedOptimizer, "compute_full_param_layout", None)

    def spy(params, bucket_size, data_parallel_world_size, ddp_config, expert_data_parallel_world_size=None):
        calls.append((list(params), bucket_size, data_parallel_world_size, expert_data_parallel_world_size))
        return real(params, bucket_size, data_parallel_world_size, ddp_config, expert_data_parallel_world_size=expert_data_parallel_world_size)

    monkeypatch.setattr(DistributedOptimizer, "compute_full_param_layout", staticmethod(spy), raising=False)
    monkeypatch.setattr(training.mpu, "get_data_parallel_world_size", lambda *a, with_context_parallel=False, **k: 3 if with_context_parallel else 5)
    monkeypatch.setattr(training.mpu, "get_expert_data_parallel_world_size", lambda *a, **k: 7)
    if case == "gather-with-optimizer-step":
        megatron_args.overlap_param_gather_with_optimizer_step = True
    if case == "later-pipeline-stage":
        monkeypatch.setattr(training.mpu, "get_pipeline_model_parallel_rank", lambda *a, **k: 1)
    if case == "no-distributed-optimizer":
        megatron_args.use_distributed_optimizer = False
    chunks = 1
    if case == "two-model-chunks":
        # Virtual pipeline parallelism: get_model builds one model chunk per virtual stage when the
        # pipeline group has 2+ ranks; its size is patched to 2 (one GPU has one rank).
        from megatron.core import parallel_state

        chunks = 2
        megatron_args.virtual_pipeline_model_parallel_size = 2
        pp_group = parallel_state.get_pipeline_model_parallel_group()
        real_size = training.get_pg_size
        monkeypatch.setattr(training, "get_pg_size", lambda g, *a, **k: 2 if g is pp_group else real_size(g, *a, **k))

    # Two model chunks: two parameter dtypes, so two buffers per kind, which one bucket group joins
    # only with bucketing disabled.
    dtypes = [torch.float32, torch.bfloat16, torch.bfloat16, torch.float32, torch.float32] if chunks == 2 else None
    model = training.get_model(_provider(12, dtypes), wrap_with_ddp=True)
    assert isinstance(model, list) and len(model) == chunks and all(isinstance(m, DistributedDataParallel) for m in model), f"get_model returned {[type(m) for m in model] if isinstance(model, list) else model}"
    if chunks == 2:
        assert len(calls) == 2, f"get_model called compute_full_param_layout {len(calls)} times for two model chunks"
        assert [c[1] for c in calls] == [300, None], f"bucket sizes {[c[1] for c in calls]}: the first chunk's is the DDP config's, a later chunk's none (one bucket)"
        for ddp, call in zip(model, calls):
            assert call[0] == trainable(ddp.module), "a chunk's layout was computed for another chunk's parameters"
        later = model[1]
        for kind, buffers, groups in (("dense", later.buffers, later.bucket_groups), ("expert", later.expert_parallel_buffers, later.expert_parallel_bucket_groups)):
            assert all(len(b.bucket_indices) == 1 for b in buffers), f"the second chunk's {kind} buffers must have one bucket"
            assert len(buffers) == 2, f"the second chunk has two {kind} dtypes: {len(buffers)} buffers"
            assert len(groups) == 1, f"the second chunk is wrapped with bucketing disabled: one {kind} bucket group for its {len(buffers)} buffers, got {len(groups)}"
        return
    ddp = model[0]
    buffers = list(ddp.buffers) + list(ddp.expert_parallel_buffers)
    if case == "no-distributed-optimizer":
        assert calls == [], "get_model computed an optimizer layout without the distributed optimizer"
        assert all(b.numel == b.numel_unpadded for b in buffers), "a buffer is padded without the distributed optimizer"
        return
    assert len(calls) == 1, f"get_model called compute_full_param_layout {len(calls)} times for one model chunk"
    params, bucket_size, dp, edp = calls[0]
    assert params == trainable(ddp.module), "the layout was computed for other parameters (or another order)"
    assert dp == 3, f"data_parallel_world_size {dp}: expected the size with context parallelism (3 here)"
    assert edp == 7, f"expert_data_parallel_world_size {edp}: expected the expert data-parallel size (7 here)"
    want_bucket = 300 if case == "bucketed" else None
    assert bucket_size == want_bucket, f"bucket_size {bucket_size}, expected {want_bucket}"
    for buf in buffers:
        expert = buf in ddp.expert_parallel_buffers
        divisor = 896 if expert else 384  # lcm(7, 128), lcm(3, 128)
        assert all(end % divisor == 0 for _, end in buf.bucket_indices), f"{'expert' if expert else 'dense'} buffer: bucket ends {buf.bucket_indices} are not the given layout's (multiples of {divisor})"
        if want_bucket is None:
            assert len(buf.bucket_indices) == 1, f"bucketing is off, yet {len(buf.bucket_indices)} buckets"
