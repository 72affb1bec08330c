"""Shared pieces of the weight-sync probes.

The probes never trust the code under test: equality is checked by gathering every rank's raw
parameter bytes over the probe's own process group, and the byte budget of a sync is computed from
the trainer's own record of what it changed (bits compared with a copy the probe took at the
previous sync), then shared with every rank before the sync runs.
"""

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn

from infradev_probe import measure

_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_TEST_GROUP = None


def set_test_group(group) -> None:
    global _TEST_GROUP
    _TEST_GROUP = group


def group():
    return _TEST_GROUP


def world() -> int:
    return dist.get_world_size()


def rank() -> int:
    return dist.get_rank()


def weight_sync(module: nn.Module, src: int = 0):
    """``WeightSync(module, src=src)`` on this probe's own process group (all ranks)."""
    from nanorl.weight_sync import WeightSync

    return WeightSync(module, src=src, process_group=group())


def bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().reshape(-1).view(_BITS[tensor.element_size()])


def raw(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().reshape(-1).view(torch.uint8)


def everyone(ok: bool) -> bool:
    """True when ``ok`` holds on every rank (a collective: ranks stay in step either way)."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=group())
    return bool(flag.item())


def share(value: int, src: int) -> int:
    t = torch.tensor([value], dtype=torch.int64)
    dist.broadcast(t, src=src, group=group())
    return int(t.item())


class Bag(nn.Module):
    """Named parameters of given shape / dtype, filled per rank so that copies start different."""

    def __init__(self, spec: Sequence[Tuple[str, int, torch.dtype, bool]], seed: int) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        for name, numel, dtype, trainable in spec:
            self.register_parameter(name, nn.Parameter(random_tensor(numel, dtype, gen), requires_grad=trainable))


def random_tensor(numel: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    if dtype.is_floating_point:
        return torch.randn(numel, generator=gen).to(dtype)
    wide = dtype == torch.int64  # values beyond 2**53: exact only when no float is involved
    low, high = (-(2 ** 60), 2 ** 60) if wide else (-1000, 1000)
    # Narrow integer dtypes wrap the range around: every bit pattern is fair.
    return torch.randint(low, high, (numel,), generator=gen, dtype=torch.int64).to(dtype)


def mismatches(module: nn.Module, src: int) -> List[str]:
    """Parameters whose bytes differ from rank ``src``'s on some rank (checked on every rank)."""
    params = list(module.named_parameters())
    sizes = torch.tensor([p.numel() * p.element_size() for _, p in params] + [len(params)], dtype=torch.int64)
    gathered = [torch.empty_like(sizes) for _ in range(world())]
    dist.all_gather(gathered, sizes, group=group())
    if not all(torch.equal(g, gathered[src]) for g in gathered):
        return [f"parameter byte sizes differ between ranks: {[g.tolist() for g in gathered]}"]
    bad = []
    for name, param in params:
        mine = raw(param.data).clone()
        copies = [torch.empty_like(mine) for _ in range(world())]
        dist.all_gather(copies, mine, group=group())
        for r, other in enumerate(copies):
            if not torch.equal(other, copies[src]):
                diff = int((other != copies[src]).sum())
                bad.append(f"{name}: rank {r} differs from the trainer (rank {src}) in {diff} bytes")
    return bad


def snapshot(module: nn.Module) -> Dict[str, torch.Tensor]:
    return {name: bits(p.data).clone() for name, p in module.named_parameters()}


def delta_budget(module: nn.Module, last: Optional[Dict[str, torch.Tensor]]) -> int:
    """The prompt's bound for the next sync: 16 * P + 64 header bytes, plus k * (8 + e) for each
    parameter with k changed entries since ``last`` (the bits at the last sync), numel * e for a
    parameter ``last`` does not have. Only meaningful on the trainer."""
    params = list(module.named_parameters())
    total = 16 * len(params) + 64
    for name, p in params:
        e = p.element_size()
        if last is None or name not in last or last[name].numel() != p.numel():
            total += p.numel() * e
        else:
            total += int((bits(p.data) != last[name]).sum()) * (8 + e)
    return total


def header_budget(module: nn.Module) -> int:
    return 16 * len(list(module.parameters())) + 64


def measured_sync(sync) -> int:
    """Runs one sync under measure(); the payload bytes of every collective it issued on this rank."""
    with measure() as m:
        sync.sync()
    return sum(m.bytes.values())


def flip(param: nn.Parameter, index: torch.Tensor) -> None:
    """Changes the bits of the given flat entries (lowest bit flipped: a different bit pattern,
    for any dtype; a float's neighbour)."""
    with torch.no_grad():
        b = bits(param.data)
        b[index] ^= 1


def check_sync(sync, module: nn.Module, src: int, last, label: str, budget_check: bool = False) -> Tuple[List[str], Dict[str, torch.Tensor]]:
    """One measured sync: returns the problems seen on any rank (rollout bits differ, trainer's
    weights changed, and with ``budget_check`` bytes over the prompt's budget) and the new baseline
    snapshot. A probe of one promise checks that promise; the byte budget belongs to the probes of
    the promises that state it."""
    budget = share(delta_budget(module, last) if rank() == src else 0, src)
    before = snapshot(module)
    sent = measured_sync(sync)
    problems = []
    over = budget_check and sent > budget
    if not everyone(not over):
        problems.append(f"{label}: a rank moved more than the budget of {budget} bytes (rank {rank()}: {sent})")
    if rank() == src:
        changed = [n for n, b in snapshot(module).items() if not torch.equal(b, before[n])]
    else:
        changed = []
    if not everyone(not changed):
        problems.append(f"{label}: the sync changed the trainer's weights")
    problems += [f"{label}: {m}" for m in mismatches(module, src)]
    return problems, snapshot(module)
