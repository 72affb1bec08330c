"""FP8 and NVFP4 parameters go through the refactor unchanged: they sit in torch.uint8 param
buffers, keep their per-dtype param indices, and an NVFP4 buffer's packed index space (two FP4
values per byte: half the numel in the param buffer, the full numel in the grad buffer) is the one
the pre-PR code made. Plus the all-gather chain of DDP's bucket groups with overlap_param_gather.

Transformer Engine is not on the grading machine, so no real Float8Tensor / NVFP4Tensor exists.
The `lowprec` fixture stands in for TE's type checks: every function object Megatron binds as
`is_float8tensor` / `is_nvfp4tensor` (in any loaded megatron module, however it was imported) is
swapped for one that reads a marker attribute of the parameter, and the two storage re-pointing
helpers that need TE's internals are swapped for recorders. The parameters stay bf16 tensors;
the layout code sees them as FP8 / NVFP4, which is all a layout depends on."""

import importlib
import math
import sys

import pytest
import torch

from layout_ref import ParamNet, pad, ref_layout, trainable

BF16, FP32 = torch.bfloat16, torch.float32
UINT8 = torch.uint8
MARK = "_infradev_probe_lowprec"
LOADED = [
    "megatron.core.fp4_utils",
    "megatron.core.fp8_utils",
    "megatron.core.distributed.param_and_grad_buffer",
    "megatron.core.distributed.distributed_data_parallel",
    "megatron.core.optimizer.distrib_optimizer",
    "megatron.core.optimizer.param_layout",
]


@pytest.fixture
def lowprec(monkeypatch):
    for name in LOADED:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:  # param_layout is the PR's new module: not there before it
            pass
    fp4_utils, fp8_utils = sys.modules["megatron.core.fp4_utils"], sys.modules["megatron.core.fp8_utils"]
    calls = []

    def is_nvfp4(t):
        return getattr(t, MARK, None) == "nvfp4"

    def is_fp8(t):
        return getattr(t, MARK, None) == "fp8"

    def rowwise(param, view):
        calls.append(("nvfp4", param, view))

    def storage(param, view):
        calls.append(("fp8", param, view))

    swap = {id(fp4_utils.is_nvfp4tensor): is_nvfp4, id(fp8_utils.is_float8tensor): is_fp8}
    for helper, recorder in (("modify_nvfp4_rowwise_storage", rowwise), ("modify_underlying_storage", storage)):
        for mod in (fp4_utils, fp8_utils):
            if callable(getattr(mod, helper, None)):
                swap[id(getattr(mod, helper))] = recorder
    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("megatron"):
            continue
        for attr, value in list(vars(mod).items()):
            if id(value) in swap and callable(value):
                monkeypatch.setattr(mod, attr, swap[id(value)])
    return calls


def _mark(module, kinds):
    for i, kind in kinds.items():
        setattr(module.ps[i], MARK, kind)


def _kind(p):
    return getattr(p, MARK, None)


def ref_groups_lowprec(params, fp32):
    """The pre-PR grouping: FP8 / NVFP4 parameters in uint8 param buffers; param indices counted
    among the parameters of the same logical dtype (and grad dtype), dense and expert apart."""
    groups, counters = {}, {}
    for p in params:
        expert = not getattr(p, "allreduce", True)
        grad_dtype = torch.float if fp32 else p.dtype
        key = (UINT8 if _kind(p) else p.dtype, grad_dtype, expert)
        entry = groups.setdefault(key, ([], []))
        entry[0].append(p)
        logical = (p.dtype, grad_dtype, expert)
        entry[1].append(counters.get(logical, 0))
        counters[logical] = counters.get(logical, 0) + 1
    return groups


def ref_packed(index_map, distopt, pad_high, dp=1):
    """The pre-PR NVFP4 packed index space, from the buffer's (full-numel) layout: the same buckets
    and the same rules (64-element param starts and lcm-padded bucket ends with the distributed
    optimizer, nothing without), an NVFP4 parameter taking half its numel."""
    divisor = math.lcm(dp, 128, 2**16) if pad_high else math.lcm(dp, 128)
    end_pad = (lambda v: pad(v, divisor)) if distopt else (lambda v: v)
    order = sorted(index_map, key=lambda p: index_map[p][0])
    packed, buckets = {}, []
    start = bucket_start = 0
    current = 0
    for p in order:
        bucket_id = index_map[p][2]
        if distopt:
            start = pad(start, 64)
        if bucket_id != current:
            bucket_end = end_pad(start)
            buckets.append((bucket_start, bucket_end))
            start = bucket_start = bucket_end
            current = bucket_id
        n = p.data.nelement()
        n = n // 2 if _kind(p) == "nvfp4" else n
        packed[p] = (start, start + n, bucket_id)
        start += n
    buckets.append((bucket_start, end_pad(start)))
    return packed, buckets


# name: (shapes, dtypes or None (all bf16), {index: "fp8" | "nvfp4"}, expert indices, shared indices)
MODELS = {
    "nvfp4-and-plain": ([(8, 8), (7,), (3, 34), (10, 10), (5,), (12, 6), (66,)], None, {0: "nvfp4", 3: "nvfp4", 6: "nvfp4", 2: "fp8", 5: "fp8"}, (), ()),
    "fp8-only": ([(9, 4), (13,), (2, 30), (70,), (6,)], [BF16, BF16, BF16, FP32, BF16], {0: "fp8", 2: "fp8", 4: "fp8"}, (), ()),
    "nvfp4-experts-shared": ([(4, 16), (130,), (10, 10), (2, 64), (31,), (6, 6)], None, {0: "nvfp4", 1: "nvfp4", 2: "nvfp4", 3: "nvfp4", 5: "nvfp4"}, (3, 4), (2,)),
}
CONFIGS = [
    # (distopt, pad_high, overlap_grad_reduce, bucket_size, grad_reduce_in_fp32)
    (False, False, False, None, True),
    (False, False, True, 90, False),
    (True, False, False, None, True),
    (True, False, True, 90, True),
    (True, False, True, 1, False),
    (True, True, True, 200, True),
]


@pytest.mark.probe(promise="lowprec-layout-unchanged", kind="numerical")
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: "distopt%d-high%d-overlap%d-bucket%s-fp32%d" % (c[0], c[1], c[2], c[3], c[4]))
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_fp8_nvfp4_buffers_equal_pre_pr(make_ddp, lowprec, model_name, config):
    distopt, pad_high, overlap, bucket_size, fp32 = config
    shapes, dtypes, kinds, expert, shared = MODELS[model_name]
    module = ParamNet(shapes, dtypes or [BF16] * len(shapes), expert, shared, seed=3)
    _mark(module, kinds)
    ddp = make_ddp(module, use_distributed_optimizer=distopt, pad_buckets_for_high_nccl_busbw=pad_high, overlap_grad_reduce=overlap, bucket_size=bucket_size, grad_reduce_in_fp32=fp32)
    groups = ref_groups_lowprec(trainable(module), fp32)
    buffers = [(b, False) for b in ddp.buffers] + [(b, True) for b in ddp.expert_parallel_buffers]
    assert sorted((str(b.param_dtype), str(b.grad_dtype), e) for b, e in buffers) == sorted((str(k[0]), str(k[1]), k[2]) for k in groups), "buffers (param dtype, grad dtype, expert) differ from the pre-PR grouping (FP8 / NVFP4 parameters belong in uint8 param buffers)"
    recorded = {id(p): (kind, view) for kind, p, view in lowprec}
    for buf, is_expert in buffers:
        what = f"{'expert' if is_expert else 'dense'} {buf.param_dtype}/{buf.grad_dtype}"
        params, indices = groups[(buf.param_dtype, buf.grad_dtype, is_expert)]
        assert list(buf.params) == params, f"{what}: the buffer's parameters or their order differ"
        assert list(buf.param_indices) == indices, f"{what}: param_indices {list(buf.param_indices)}, expected {indices} (counted per logical dtype)"
        index, buckets, unpadded = ref_layout(params, ddp.bucket_size, 1, distopt, pad_high)
        assert dict(buf.param_index_map) == index and [tuple(b) for b in buf.bucket_indices] == buckets, f"{what}: the full-numel layout differs from the pre-PR one"
        # A buffer without NVFP4 parameters has no packed space; what its (unread) packed
        # attributes hold is not a promise (hidden/mutants.yaml, drop-stmt#6).
        if not any(_kind(p) == "nvfp4" for p in params):
            for p in params:
                if _kind(p) == "fp8" and buf.param_data is not None:
                    kind, view = recorded[id(p)]
                    assert view.data_ptr() == buf.param_data.data_ptr() + index[p][0], f"{what}: an FP8 parameter's storage is not at its offset"
            continue
        packed, packed_buckets = ref_packed(dict(buf.param_index_map), distopt, pad_high)
        got_map = dict(buf.nvfp4_packed_param_index_map)
        for p, entry in got_map.items():
            assert all(type(v) is int for v in entry), f"{what}: packed index {entry} is not integral"
        assert got_map == packed, f"{what}: the NVFP4 packed param index map differs from the pre-PR one"
        got_buckets = [tuple(b) for b in buf.nvfp4_packed_bucket_indices]
        assert all(type(v) is int for b in got_buckets for v in b), f"{what}: packed bucket bounds {got_buckets} are not integral"
        assert got_buckets == packed_buckets, f"{what}: packed bucket indices {got_buckets}, expected {packed_buckets}"
        assert buf.nvfp4_packed_numel == packed_buckets[-1][1]
        payload = sum(e - s for s, e, _ in packed.values())
        assert payload <= buf.nvfp4_packed_numel_unpadded <= buf.nvfp4_packed_numel, f"{what}: nvfp4_packed_numel_unpadded {buf.nvfp4_packed_numel_unpadded} is not between the packed payload {payload} and the packed numel {buf.nvfp4_packed_numel}"
        if not distopt:
            assert buf.nvfp4_packed_numel_unpadded == payload, f"{what}: without padding the packed unpadded numel is the payload {payload}, got {buf.nvfp4_packed_numel_unpadded}"
        assert buf.grad_data.numel() == buckets[-1][1], f"{what}: the grad buffer must hold the full numel"
        if buf.param_data is not None:
            assert buf.param_data.numel() == packed_buckets[-1][1], f"{what}: the param buffer must hold the packed numel"
            for p in params:
                kind, view = recorded[id(p)]
                assert view.data_ptr() == buf.param_data.data_ptr() + packed[p][0] * buf.param_data.element_size(), f"{what}: a {kind} parameter's storage is not at its packed offset"
                if kind == "nvfp4":
                    assert view.numel() == p.data.nelement() // 2


@pytest.mark.probe(promise="lowprec-layout-unchanged", kind="condition")
@pytest.mark.parametrize("distopt", [False, True])
def test_odd_nvfp4_parameter_refused(make_ddp, lowprec, distopt):
    module = ParamNet([(4, 8), (5, 7), (6,)], [BF16] * 3, seed=4)
    _mark(module, {0: "nvfp4", 1: "nvfp4"})
    with pytest.raises((AssertionError, ValueError, RuntimeError)):
        make_ddp(module, use_distributed_optimizer=distopt, overlap_grad_reduce=False, bucket_size=None)


@pytest.mark.probe(promise="param-gather-chain", kind="state")
@pytest.mark.parametrize("bucket_size", [1, 120])
def test_param_gather_chain(make_ddp, bucket_size):
    module = ParamNet([(9, 9), (130,), (12, 5), (70,), (150,), (40,), (3, 3)], [FP32] * 7, expert=(1, 4), seed=5)
    ddp = make_ddp(module, use_distributed_optimizer=True, overlap_grad_reduce=True, overlap_param_gather=True, bucket_size=bucket_size)
    for kind, groups in (("dense", ddp.bucket_groups), ("expert", ddp.expert_parallel_bucket_groups)):
        assert len(groups) >= 2, f"{kind}: expected several bucket groups, got {len(groups)}"
        assert groups[0].next_param_gather_bucket_group is None, f"{kind}: the first bucket group gathers nothing after it"
        for i in range(1, len(groups)):
            assert groups[i].next_param_gather_bucket_group is groups[i - 1], f"{kind}: bucket group {i} must chain to group {i - 1}"
    # The hooks find a parameter's bucket group through this map.
    for g in list(ddp.bucket_groups) + list(ddp.expert_parallel_bucket_groups):
        for bucket in g.buckets:
            for p in bucket.params_list:
                assert ddp.param_to_bucket_group.get(p) is g, "param_to_bucket_group does not map a parameter to its bucket group"
    assert len(ddp.param_to_bucket_group) == len(trainable(module))


@pytest.mark.probe(promise="param-gather-chain", kind="state")
@pytest.mark.parametrize("distopt", [False, True])
def test_disable_bucketing_makes_one_bucket_group(make_ddp, distopt):
    """disable_bucketing: one bucket per buffer, and one bucket group holding the buckets of every
    dense buffer (and one for the expert-parallel ones), as before."""
    module = ParamNet([(9, 9), (130,), (12, 5), (70,), (150,), (40,), (3, 3)], [FP32, FP32, BF16, FP32, BF16, BF16, torch.float16], expert=(1, 4), seed=9)
    ddp = make_ddp(module, disable_bucketing=True, use_distributed_optimizer=distopt, overlap_grad_reduce=True, bucket_size=50)
    for kind, buffers, groups in (("dense", ddp.buffers, ddp.bucket_groups), ("expert", ddp.expert_parallel_buffers, ddp.expert_parallel_bucket_groups)):
        assert all(len(b.buckets) == 1 for b in buffers), f"{kind}: disable_bucketing leaves one bucket per buffer"
        assert len(groups) == 1, f"{kind}: disable_bucketing makes one bucket group, got {len(groups)}"
        assert {id(x) for x in groups[0].buckets} == {id(b.buckets[0]) for b in buffers}, f"{kind}: the one bucket group must hold every buffer's bucket"
