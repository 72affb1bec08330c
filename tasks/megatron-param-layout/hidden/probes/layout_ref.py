"""Our reference for the layout rules of the pre-PR code (megatron/core/distributed/
param_and_grad_buffer.py at base, _ParamAndGradBuffer.__init__), written from its behaviour; plus
the small models and helpers the probes share. Nothing here imports the code under test."""

import math

import torch


def pad(value, divisor):
    return -(-value // divisor) * divisor


def ref_layout(params, bucket_size, dp_size, distopt, pad_high):
    """(param -> (start, end, bucket_id), [(bucket start, end)], [unpadded numel per bucket]) for
    `params` in buffer order (they are laid out in reverse)."""
    index, buckets, unpadded = {}, [], []
    state = {"start": 0, "bucket_start": 0, "bucket_id": 0, "count": 0}

    def finalize(end):
        unpadded.append(end - state["bucket_start"])
        if distopt:
            divisor = math.lcm(dp_size, 128, 2**16) if pad_high else math.lcm(dp_size, 128)
            end = pad(end, divisor)
        buckets.append((state["bucket_start"], end))
        state.update(bucket_start=end, start=end, count=0, bucket_id=state["bucket_id"] + 1)

    end = 0
    for p in list(params)[::-1]:
        if distopt:
            state["start"] = pad(state["start"], 64)
        shared = distopt and getattr(p, "shared_embedding", False)
        if shared and state["count"] > 0:
            finalize(state["start"])
        end = state["start"] + p.data.nelement()
        index[p] = (state["start"], end, state["bucket_id"])
        state["count"] += 1
        if (bucket_size is not None and end - state["bucket_start"] >= bucket_size) or shared:
            finalize(end)
        else:
            state["start"] = end
    if state["count"] > 0:
        finalize(end)
    return index, buckets, unpadded


def ref_groups(params, grad_reduce_in_fp32):
    """[(param_dtype, grad_dtype, is_expert, [params], [param indices])] in the order DDP makes its
    buffers (first appearance), dense and expert-parallel apart, as the pre-PR code grouped them."""
    groups, counters = {}, {}
    for p in params:
        expert = not getattr(p, "allreduce", True)
        grad_dtype = torch.float if grad_reduce_in_fp32 else p.dtype
        key = (p.dtype, grad_dtype, expert)
        entry = groups.setdefault(key, ([], []))
        entry[0].append(p)
        n = counters.get(key, 0)
        counters[key] = n + 1
        entry[1].append(n)
    return [(k[0], k[1], k[2], v[0], v[1]) for k, v in groups.items()]


class ParamNet(torch.nn.Module):
    """Bare parameters of the given shapes and dtypes; forward(weights) returns
    sum_i (p_i * w_i).sum(), so that the gradient of p_i is exactly w_i (in p_i's dtype)."""

    def __init__(self, shapes, dtypes=None, expert=(), shared=(), seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        dtypes = dtypes or [torch.float32] * len(shapes)
        self.ps = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(*s, generator=g).to(dt)) for s, dt in zip(shapes, dtypes)]
        )
        for i in expert:
            self.ps[i].allreduce = False
        for i in shared:
            self.ps[i].shared_embedding = True

    def forward(self, weights):
        total = 0
        for p, w in zip(self.ps, weights):
            total = total + (p * w.to(p.dtype)).float().sum()
        return total


def trainable(module):
    return [p for p in module.parameters() if p.requires_grad]


def describe_buffer(buf):
    return {
        "index": dict(buf.param_index_map),
        "buckets": [tuple(b) for b in buf.bucket_indices],
        "numel": buf.numel,
        "numel_unpadded": buf.numel_unpadded,
    }
