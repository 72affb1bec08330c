"""Nothing else moves: with a selection, the gradient buffer (its dtype, size, every parameter's
offset, the buckets) is the one built without it; an unselected parameter's .main_grad is still
the buffer's slice at its offset; a selected one's main_grad_copy_in_grad_buffer is that slice and
its FP32 .main_grad lives outside the buffer, costing 4 bytes per selected element and no more."""

import pytest
import torch


def storage_bytes(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.nbytes() if hasattr(s, "nbytes") else s.size() * t.element_size()


def storage_ptr(t):
    s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return s.data_ptr()


def layout(ddp):
    out = []
    for buf in ddp.buffers:
        names = {p: n for n, p in ddp.module.named_parameters()}
        out.append({
            "grad_dtype": buf.grad_dtype,
            "numel": buf.numel,
            "grad_numel": buf.grad_data.numel(),
            "index": {names[p]: tuple(v) for p, v in buf.param_index_map.items()},
            "buckets": [(b.offset, b.grad_data.numel(), sorted(names[p] for p in b.params)) for b in buf.buckets],
        })
    return out


CFGS = [
    pytest.param(dict(), id="plain"),
    pytest.param(dict(use_distributed_optimizer=True), id="distopt"),
    pytest.param(dict(bucket_size=700), id="buckets"),
    pytest.param(dict(use_distributed_optimizer=True, bucket_size=700, overlap_grad_reduce=True), id="distopt-buckets"),
]


@pytest.mark.probe(promise="unselected-unchanged", kind="state")
@pytest.mark.parametrize("cfg", CFGS)
def test_buffer_layout_unchanged(make_ddp, cfg):
    plain = layout(make_ddp(patterns=(), **cfg))
    for patterns in (("layers.1.*",), ("all",), ("*.bias", "head.weight")):
        assert layout(make_ddp(patterns=patterns, **cfg)) == plain, f"patterns {patterns}: the grad buffer's layout differs from the one built without patterns"


@pytest.mark.probe(promise="unselected-unchanged", kind="state")
@pytest.mark.parametrize("cfg", CFGS)
def test_views_into_the_buffer(make_ddp, cfg):
    ddp = make_ddp(patterns=("layers.1.*", "head.weight"), **cfg)
    (buf,) = ddp.buffers
    base = buf.grad_data.data_ptr()
    esz = buf.grad_data.element_size()
    for name, p in ddp.module.named_parameters():
        start, end, _ = buf.param_index_map[p]
        view = p.main_grad_copy_in_grad_buffer if (name.startswith("layers.1.") or name == "head.weight") else p.main_grad
        assert view.dtype == buf.grad_dtype == torch.bfloat16, f"{name}: the buffer slice is {view.dtype}"
        assert view.data_ptr() == base + start * esz and view.numel() == end - start, f"{name}: not the grad buffer's slice at [{start}, {end})"
        assert tuple(view.shape) == tuple(p.shape)


@pytest.mark.probe(promise="extra-memory-only-for-selected", kind="resource")
@pytest.mark.parametrize("patterns", [("layers.1.*",), ("head.weight", "*.bias"), ("all",)], ids=["one-layer", "mixed", "all"])
def test_fp32_copies_cost_only_the_selected(make_ddp, patterns):
    import fnmatch

    ddp = make_ddp(patterns=patterns, bucket_size=700)
    (buf,) = ddp.buffers
    selected = [p for n, p in ddp.module.named_parameters() if any(x == "all" or fnmatch.fnmatch(n, x) for x in patterns)]
    grad_storage = storage_ptr(buf.grad_data)
    storages = {}
    for p in selected:
        assert p.main_grad.dtype == torch.float32
        assert storage_ptr(p.main_grad) != grad_storage, "a selected parameter's FP32 .main_grad shares the communication buffer's storage"
        storages[storage_ptr(p.main_grad)] = storage_bytes(p.main_grad)
    want = 4 * sum(p.numel() for p in selected)
    got = sum(storages.values())
    assert got <= want + 512 * len(storages), f"the FP32 .main_grad storages hold {got} bytes for {want // 4} selected elements ({want} bytes)"
    assert buf.grad_data.numel() == buf.numel and buf.grad_data.dtype == torch.bfloat16
