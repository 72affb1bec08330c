"""Workloads for the grad-bucketing differential (hidden/differential.yaml): golden's DataParallel and
the submission's over the same generated modules, gradients and edits.

A workload is JSON: parameters (shape, float32 / float64, frozen or not, tied to an earlier one,
placed in nested blocks or an expert list), the bucket cap (a fraction of the trainable gradient
bytes, or exactly the bytes of the first k parameters, or a cap above everything), and steps: a
real backward (each rank its own coefficients; some parameters unused on some ranks, so their
.grad stays None), .grad edited between backward and sync (scaled, cleared, replaced, zeroed on
some ranks), micro-steps under no_sync(), a sync, zero_grad, a second wrapper over the same module.

Recorded per sync: every parameter's .grad on every rank (compared with golden's to a float
tolerance: the order of additions is the submission's to choose), and per rank the collectives and
bytes of the sync with facts from the submission's own buckets: how many there are, the trainable
gradient bytes, buckets over the cap, consecutive buckets of one dtype that would fit together,
parameters not in exactly one bucket, buckets of mixed dtype, buffers that moved since the last sync.
"""

import torch
from torch import nn

DTYPES = ["float32", "float32", "float32", "float64"]
MB = 1024 * 1024


def generate(rng, index, count, world_size):
    scale = (index + 1) / count
    n_params = max(1, int(rng.choice([1, 2, 3, 5, 9, 14, 25, 50, 100, 200]) * min(1.0, scale * 1.5)))
    params = []
    for i in range(n_params):
        shape = [rng.randint(1, 12), rng.randint(1, 40)] if rng.random() < 0.3 else [rng.choice([1, 2, 3, 5, 16, 64, 100, 257, 1000, 4000])]
        frozen = rng.random() < 0.15
        tie = rng.randrange(i) if i and rng.random() < 0.08 else -1
        params.append([shape, rng.choice(DTYPES), frozen, tie])
    cap = rng.choice([["frac", rng.choice([0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.8])], ["prefix", rng.randint(1, max(1, n_params))], ["all"], ["above"]])
    steps = []
    for _ in range(rng.randint(2, 5)):
        kind = rng.choice(["plain", "plain", "edit", "nosync", "zero", "rewrap"])
        if kind == "nosync":
            steps.append(["nosync", rng.randint(1, 3), rng.randrange(1 << 30)])
        elif kind == "zero":
            steps.append(["zero", rng.random() < 0.5])
        elif kind == "rewrap":
            steps.append(["rewrap"])
        steps.append(["backward", rng.randrange(1 << 30), rng.choice([0.0, 0.0, 0.2, 0.5])])
        if kind == "edit":
            steps.append(["edit", rng.randrange(1 << 30), rng.choice(["scale", "clear", "assign", "zero"])])
        steps.append("sync")
    return {"seed": rng.randrange(1 << 30), "params": params, "cap": cap, "steps": steps}


def shrink(workload):
    steps = workload["steps"]
    syncs = [i for i, s in enumerate(steps) if s == "sync"]
    for j in syncs[:-1]:  # shorter runs first: everything after an earlier sync dropped
        yield dict(workload, steps=steps[: j + 1])
    for i in range(len(steps) - 1, -1, -1):
        if steps[i] != "sync":
            yield dict(workload, steps=steps[:i] + steps[i + 1:])
    params = workload["params"]
    for i, (shape, dtype, frozen, tie) in enumerate(params):
        if any(s > 1 for s in shape):
            yield dict(workload, params=params[:i] + [[[max(1, s // 2) for s in shape], dtype, frozen, tie]] + params[i + 1:])


def build(workload):
    gen = torch.Generator().manual_seed(workload["seed"])
    root = nn.Module()
    blocks = [nn.Module() for _ in range(3)]
    for k, b in enumerate(blocks):
        root.add_module("block%d" % k, b)
    root.add_module("experts", nn.ModuleList([nn.Module() for _ in range(2)]))
    made, uses = [], []
    for i, (shape, dtype, frozen, tie) in enumerate(workload["params"]):
        holder = root.experts[i % 2] if i % 5 == 4 else blocks[i % 3]
        if 0 <= tie < len(made):
            holder.register_parameter("tied%d" % i, made[tie])
            uses.append(made[tie])
            continue
        p = nn.Parameter(torch.randn(shape, generator=gen).to(getattr(torch, dtype)), requires_grad=not frozen)
        holder.register_parameter(("frozen%d" if frozen else "p%d") % i, p)
        made.append(p)
        uses.append(p)
    return root, uses


def cap_mb(workload, module):
    trainable = [p for p in module.parameters() if p.requires_grad]
    sizes = [p.numel() * p.element_size() for p in trainable]
    total = sum(sizes) or 1
    mode = workload["cap"]
    if mode[0] == "frac":
        nbytes = max(1, int(total * mode[1]))
    elif mode[0] == "prefix":
        nbytes = sum(sizes[: mode[1]]) or 1
    elif mode[0] == "all":
        nbytes = total
    else:
        nbytes = total * 4
    return nbytes / MB, nbytes


def backward(uses, step, rank):
    """One backward: this rank's coefficients; a share of the parameters unused on this rank."""
    gen = torch.Generator().manual_seed(step[1] * 31 + rank)
    loss = None
    for p in uses:
        if not p.requires_grad:
            continue
        if torch.rand(1, generator=gen).item() < step[2]:
            continue
        c = torch.randn(p.shape, generator=gen).to(p.dtype)
        term = (p * c).sum().double()
        loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()


def edit(module, step, rank, world):
    """.grad changed between backward and sync on some ranks: a design that captured gradients in
    autograd hooks instead of reading .grad at sync time sees a different gradient."""
    gen = torch.Generator().manual_seed(step[1])
    ranks = [r for r in range(world) if torch.rand(1, generator=gen).item() < 0.6] or [0]
    params = [p for p in module.parameters() if p.requires_grad]
    chosen = [p for p in params if torch.rand(1, generator=gen).item() < 0.5] or params[:1]
    if rank not in ranks:
        return
    with torch.no_grad():
        for p in chosen:
            how = step[2]
            if how == "clear":
                p.grad = None
            elif p.grad is None:
                continue
            elif how == "scale":
                p.grad.mul_(3)
            elif how == "zero":
                p.grad.zero_()
            else:
                p.grad = torch.full_like(p.grad, 0.25 + rank)


def bucket_facts(dp, module, cap_bytes, buffers_before):
    names = {n: p for n, p in module.named_parameters()}
    trainable = [n for n, p in names.items() if p.requires_grad]
    buckets = list(dp.buckets)
    over = mixed = mergeable = 0
    seen = {}
    last_of_dtype = {}
    for b in buckets:
        members = list(b.param_names)
        nbytes = sum(names[n].numel() * names[n].element_size() for n in members if n in names)
        if len(members) > 1 and nbytes > cap_bytes:
            over += 1
        if any(n in names and names[n].dtype != b.buffer.dtype for n in members):
            mixed += 1
        key = b.buffer.dtype
        if key in last_of_dtype and last_of_dtype[key] + nbytes <= cap_bytes:
            mergeable += 1
        last_of_dtype[key] = nbytes
        for n in members:
            seen[n] = seen.get(n, 0) + 1
    membership = sum(1 for n in trainable if seen.get(n, 0) != 1) + sum(1 for n in seen if n not in trainable)
    moved = sum(1 for b, ptr in zip(buckets, buffers_before) if b.buffer.data_ptr() != ptr) if buffers_before else 0
    grad_bytes = sum(names[n].numel() * names[n].element_size() for n in trainable)
    return dict(n_buckets=len(buckets), grad_bytes=grad_bytes, over_cap=over, mixed=mixed, mergeable=mergeable,
                membership=membership, moved=moved)


def record_grads(rec, label, module):
    for name, p in module.named_parameters():
        g = p.grad
        rec.value("%s:%s" % (label, name), g if g is not None else torch.empty(0, dtype=torch.int8))


def run(impl, workload, rec):
    DataParallel = impl.module("nanoinfra.parallel").DataParallel
    module, uses = build(workload)
    mb, cap_bytes = cap_mb(workload, module)
    dp = DataParallel(module, bucket_cap_mb=mb, process_group=rec.group)
    buffers = [b.buffer.data_ptr() for b in dp.buckets]
    for i, step in enumerate(workload["steps"]):
        if step == "sync":
            with rec.call("sync%d" % i) as facts:
                dp.sync_gradients()
            facts.update(bucket_facts(dp, module, cap_bytes, buffers))
            buffers = [b.buffer.data_ptr() for b in dp.buckets]
            record_grads(rec, "sync%d" % i, module)
        elif step[0] == "backward":
            backward(uses, step, rec.rank)
        elif step[0] == "edit":
            edit(module, step, rec.rank, rec.world_size)
        elif step[0] == "nosync":
            for k in range(step[1]):
                with dp.no_sync():
                    backward(uses, ["backward", step[2] + k, 0.3], rec.rank)
                    with rec.call("nosync%d.%d" % (i, k)):
                        dp.sync_gradients()
                record_grads(rec, "nosync%d.%d" % (i, k), module)
        elif step[0] == "zero":
            module.zero_grad(set_to_none=step[1])
        elif step[0] == "rewrap":
            dp = DataParallel(module, bucket_cap_mb=mb, process_group=rec.group)
            buffers = [b.buffer.data_ptr() for b in dp.buckets]
