"""Workloads for the weight-sync differential (hidden/differential.yaml): WeightSync of golden and
of the submission over the same generated modules and the same trainer edits.

A workload is JSON: a module (parameters with shape, dtype, frozen or not, tied to an earlier one,
placed in nested blocks or an expert list), the trainer rank, and a list of steps between syncs:
sparse / dense / row-wise / NaN and signed-zero edits, nothing, a revert to the values of the sync
before last, reset() after the rollout copies were overwritten, a parameter registered late, a
second WeightSync over the same module. After every sync each rank records its parameters' bits
(compared bitwise with golden's), whether its parameters are still the same objects and storage,
and per rank the bytes the sync put on the wire with the prompt's budget as facts (P and the
allowance of the parameters that changed).
"""

import torch
import torch.distributed as dist
from torch import nn

DTYPES = ["float32", "float16", "bfloat16", "float64", "int64", "int32", "int8", "uint8"]
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
EDITS = ["sparse", "dense", "rows", "special", "frozen", "none", "revert", "reset", "add", "second"]


def generate(rng, index, count, world_size):
    """Workload `index` of `count`: parameter counts grow with the index (1 … ~300), a large
    parameter (past 32,768 entries) now and then, every dtype, frozen and tied parameters."""
    scale = (index + 1) / count
    n_params = max(1, int(rng.choice([1, 2, 3, 5, 9, 12, 20, 40, 80, 150, 300]) * min(1.0, scale * 1.5)))
    params = []
    for i in range(n_params):
        dtype = rng.choice(DTYPES)
        if rng.random() < 0.3:
            shape = [rng.randint(1, 24), rng.randint(1, 64)]
        else:
            shape = [rng.choice([1, 2, 3, 7, 16, 64, 100, 257, 1000, 3000])]
        frozen = not dtype.startswith(("float", "bfloat")) or rng.random() < 0.15
        tie = rng.randrange(i) if i and rng.random() < 0.08 else -1
        params.append([shape, dtype, frozen, tie])
    if rng.random() < 0.35:
        params.append([[rng.choice([33000, 40000, 65536, 70000])], rng.choice(["float32", "bfloat16", "int8"]), False, -1])
    steps = ["sync"]
    for _ in range(rng.randint(2, 5)):
        edit = rng.choice(EDITS)
        if edit in ("sparse", "dense", "rows", "special"):
            steps.append([edit, rng.randrange(1 << 30), round(rng.choice([0.001, 0.02, 0.1, 0.2, 0.3, 0.45, 0.7]), 3)])
        elif edit == "add":
            steps.append(["add", [rng.choice([1, 5, 300])], rng.choice(DTYPES[:4])])
        elif edit == "frozen":
            steps.append(["frozen", rng.randrange(1 << 30)])
        elif edit != "none":
            steps.append([edit])
        steps.append("sync")
    return {"seed": rng.randrange(1 << 30), "src": rng.randrange(world_size), "params": params, "steps": steps}


def shrink(workload):
    """Shorter runs first (everything after an earlier sync dropped), fewer steps, then fewer and
    smaller parameters."""
    steps = workload["steps"]
    for j in [i for i, s in enumerate(steps) if s == "sync"][:-1]:
        yield dict(workload, steps=steps[: j + 1])
    for i in range(len(steps) - 1, 0, -1):
        if steps[i] != "sync":
            yield dict(workload, steps=steps[:i] + steps[i + 1:])
    for i in range(len(steps) - 1, 0, -1):
        if steps[i] == "sync" and i + 1 < len(steps):
            yield dict(workload, steps=steps[:i] + steps[i + 1:])
    params = workload["params"]
    for i, (shape, dtype, frozen, tie) in enumerate(params):
        numel = 1
        for s in shape:
            numel *= s
        if numel > 1:
            smaller = [max(1, s // 2) for s in shape]
            yield dict(workload, params=params[:i] + [[smaller, dtype, frozen, tie]] + params[i + 1:])
    if workload["src"] != 0:
        yield dict(workload, src=0)


def _tensor(shape, dtype, gen):
    dt = getattr(torch, dtype)
    if dt.is_floating_point:
        return torch.randn(shape, generator=gen).to(dt)
    if dt == torch.uint8:
        return torch.randint(0, 256, shape, generator=gen, dtype=torch.int64).to(dt)
    return torch.randint(-(2 ** 31), 2 ** 31, shape, generator=gen, dtype=torch.int64).to(dt)


def build(workload, rank):
    """The module on this rank: values differ per rank (the first sync must copy them)."""
    gen = torch.Generator().manual_seed(workload["seed"] * 7 + rank)
    root = nn.Module()
    blocks = [nn.Module() for _ in range(4)]
    experts = nn.ModuleList([nn.Module() for _ in range(3)])
    for k, b in enumerate(blocks):
        root.add_module("block%d" % k, b)
    root.add_module("experts", experts)
    made = []
    for i, (shape, dtype, frozen, tie) in enumerate(workload["params"]):
        holder = experts[i % 3] if i % 5 == 4 else blocks[i % 4]
        if 0 <= tie < len(made):
            holder.register_parameter("tied%d" % i, made[tie])  # the same Parameter under a second name
            made.append(made[tie])
            continue
        p = nn.Parameter(_tensor(shape, dtype, gen), requires_grad=not frozen and getattr(torch, dtype).is_floating_point)
        holder.register_parameter(("frozen%d" if not p.requires_grad else "p%d") % i, p)
        made.append(p)
    return root


def bits(t):
    return t.detach().reshape(-1).view(BITS[t.element_size()])


def _edit(module, step, rank, src):
    """The trainer's edit of one step (the other ranks leave their copies alone)."""
    kind = step[0]
    if rank != src:
        return
    gen = torch.Generator().manual_seed(step[1])
    params = [p for _, p in module.named_parameters()]
    with torch.no_grad():
        if kind == "frozen":
            frozen = [p for p in params if not p.requires_grad]
            for p in frozen[: 3]:
                b = bits(p.data)
                b[torch.randint(0, b.numel(), (1,), generator=gen)] ^= 1
            return
        frac = step[2]
        chosen = [p for p in params if torch.rand(1, generator=gen).item() < 0.6] or params[:1]
        for p in chosen:
            b = bits(p.data)
            n = b.numel()
            if kind == "sparse":
                k = max(1, int(n * frac))
                idx = torch.randperm(n, generator=gen)[:k]
                b[idx] ^= 1
            elif kind == "dense":
                k = max(1, int(n * frac))
                start = int(torch.randint(0, n - k + 1, (1,), generator=gen))
                b[start:start + k] ^= 1
            elif kind == "rows":
                if p.dim() == 2 and p.shape[1] > 1:
                    rows = torch.randperm(p.shape[0], generator=gen)[: max(1, int(p.shape[0] * 0.5))]
                    cols = torch.randint(0, p.shape[1], (rows.numel(),), generator=gen)
                    b[rows * p.shape[1] + cols] ^= 1
                else:
                    b[torch.randint(0, n, (1,), generator=gen)] ^= 1
            elif kind == "special" and p.dtype.is_floating_point:
                flat = p.data.reshape(-1)
                idx = torch.randperm(n, generator=gen)[: max(1, int(n * frac))]
                half = idx.numel() // 2
                flat[idx[:half]] = float("nan")
                # 0.0 -> -0.0 is a change of bits; -0.0 -> 0.0 too
                flat[idx[half:]] = torch.where(bits(flat[idx[half:]].clone()) == bits(torch.zeros(1, dtype=p.dtype))[0],
                                               torch.tensor(-0.0, dtype=p.dtype), torch.tensor(0.0, dtype=p.dtype))


def _allowance(module, last, full):
    """The prompt's budget beyond the header: numel * e for a parameter sent in full (first sync,
    after reset, new), k * (8 + e) for one with k entries changed since the last sync."""
    total = 0
    for name, p in module.named_parameters():
        e = p.element_size()
        if full or name not in last or last[name].numel() != p.numel():
            total += p.numel() * e
        else:
            total += int((bits(p.data) != last[name]).sum()) * (8 + e)
    return total


def _share(value, src, group):
    t = torch.tensor([value], dtype=torch.int64)
    dist.broadcast(t, src=src, group=group)
    return int(t.item())


def run(impl, workload, rec):
    WeightSync = impl.module("nanorl.weight_sync").WeightSync
    rank, src, group = rec.rank, workload["src"], rec.group
    module = build(workload, rank)
    sync = WeightSync(module, src=src, process_group=group)
    held = {name: (p, p.data.data_ptr()) for name, p in module.named_parameters()}
    last = {}  # the trainer's bits at the last sync (the driver's own record)
    history = []
    tag = "first"
    for i, step in enumerate(workload["steps"]):
        if step == "sync":
            names = [n for n, _ in module.named_parameters()]
            allowance = _share(_allowance(module, last, tag in ("first", "reset", "second")) if rank == src else 0, src, group)
            if tag == "delta" and rank == src and all(name in last and torch.equal(bits(p.data), last[name]) for name, p in module.named_parameters()):
                tag = "unchanged"
            tag = ["delta", "unchanged"][_share(1 if tag == "unchanged" else 0, src, group)] if tag in ("delta", "unchanged") else tag
            with rec.call("sync%d:%s" % (i, tag), P=len(names), allowance=allowance):
                sync.sync()
            for name, p in module.named_parameters():
                rec.value("sync%d:%s:src%d:%s" % (i, tag, src, name), p.data)
            same = all(p is held[n][0] and p.data.data_ptr() == held[n][1] for n, p in module.named_parameters() if n in held)
            rec.value("inplace:sync%d" % i, torch.tensor([int(same)]))
            if rank == src:
                history.append({name: bits(p.data).clone() for name, p in module.named_parameters()})
                last = history[-1]
            tag = "delta"
            continue
        kind = step[0]
        if kind == "none":
            continue
        if kind == "revert":
            if rank == src and len(history) >= 2:
                with torch.no_grad():
                    for name, p in module.named_parameters():
                        old = history[-2].get(name)
                        if old is not None and old.numel() == p.numel():
                            bits(p.data).copy_(old)
            tag = "revert" if tag == "delta" else tag
        elif kind == "reset":
            sync.reset()
            if rank != src:  # a rollout copy reloaded from elsewhere: reset's full sync repairs it
                with torch.no_grad():
                    for _, p in module.named_parameters():
                        bits(p.data).bitwise_xor_(1)
            tag = "reset"
        elif kind == "second":
            sync = WeightSync(module, src=src, process_group=group)
            if rank != src:  # a new WeightSync's first sync is full: rollout copies that differ are repaired
                with torch.no_grad():
                    for _, p in module.named_parameters():
                        bits(p.data).bitwise_xor_(1)
            tag = "second"
        elif kind == "add":
            gen = torch.Generator().manual_seed(workload["seed"] + 1000 * i + rank)
            p = nn.Parameter(_tensor(step[1], step[2], gen))
            module.register_parameter("added%d" % i, p)
            held["added%d" % i] = (p, p.data.data_ptr())
        else:
            _edit(module, step, rank, src)
