"""State probes: the trainer's record of the last sync, over many steps, added parameters,
frozen ones, reset() and a trainer that is not rank 0."""

from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from torch import nn

from wsd_probe_support import (
    Bag,
    bits,
    check_sync,
    everyone,
    flip,
    header_budget,
    measured_sync,
    mismatches,
    group,
    rank,
    share,
    weight_sync,
    world,
)


@pytest.mark.probe(promise="baseline-last-sync", kind="state")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_change_sync_change_back_sync(dtype):
    dt = getattr(torch, dtype)
    bag = Bag([("w", 5000, dt, True), ("v", 40, dt, True)], seed=31 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync", budget_check=True)
    index = torch.arange(7, 5000, 50)
    original = bits(bag.w.data)[index].clone()
    if rank() == 0:
        flip(bag.w, index)
    more, last = check_sync(sync, bag, 0, last, "after the change", budget_check=True)
    problems += more
    if rank() == 0:
        bits(bag.w.data)[index] = original  # back to the first sync's bits
    more, last = check_sync(sync, bag, 0, last, "after the change back", budget_check=True)
    problems += more
    more, _ = check_sync(sync, bag, 0, last, "nothing changed since", budget_check=True)
    assert problems + more == []


class _Policy(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Embedding(512, 16, sparse=False)
        self.proj = nn.Linear(16, 16)
        self.frozen = nn.Parameter(torch.randn(64), requires_grad=False)
        self.head = nn.Linear(16, 8).to(torch.bfloat16)

    def forward(self, tokens):
        h = torch.tanh(self.proj(self.embed(tokens)))
        return self.head(h.to(torch.bfloat16)).float()


@pytest.mark.probe(promise="many-steps", kind="state")
@pytest.mark.parametrize("sync_every", [1, 3])
def test_many_optimizer_steps(sync_every):
    policy = _Policy(seed=100 + rank())
    sync = weight_sync(policy)
    problems, last = check_sync(sync, policy, 0, None, "first sync", budget_check=True)
    # Adam would touch every entry; SGD on a few embedding rows keeps most of the table unchanged.
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(5)
    for step in range(12):
        tokens = torch.randint(0, 512, (4, 3), generator=gen)
        if rank() == 0:
            optimizer.zero_grad()
            policy(tokens).pow(2).mean().backward()
            optimizer.step()
        if (step + 1) % sync_every == 0:
            more, last = check_sync(sync, policy, 0, last, f"step {step + 1}", budget_check=True)
            problems += more
    assert problems == []


@pytest.mark.probe(promise="added-params", kind="state")
def test_parameter_registered_after_earlier_syncs():
    bag = Bag([("w", 1000, torch.float32, True)], seed=50 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync", budget_check=True)
    more, last = check_sync(sync, bag, 0, last, "second sync", budget_check=True)
    problems += more
    gen = torch.Generator().manual_seed(500 + rank())
    bag.register_parameter("late", nn.Parameter(torch.randn(3000, generator=gen).to(torch.bfloat16)))
    more, last = check_sync(sync, bag, 0, last, "first sync of the new parameter", budget_check=True)
    problems += more
    if rank() == 0:
        flip(bag.late, torch.tensor([1, 100, 2999]))
    more, last = check_sync(sync, bag, 0, last, "delta of the new parameter", budget_check=True)
    problems += more
    assert problems == []


@pytest.mark.probe(promise="frozen-params", kind="state")
def test_frozen_parameters_are_synced_and_cost_nothing_unchanged():
    spec = [("w", 500, torch.float32, True), ("fz", 4000, torch.float32, False), ("ids", 300, torch.int64, False)]
    bag = Bag(spec, seed=70 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync", budget_check=True)
    if rank() == 0:
        flip(bag.w, torch.arange(0, 500, 10))
    more, last = check_sync(sync, bag, 0, last, "trainable changed, frozen unchanged", budget_check=True)
    problems += more
    if rank() == 0:
        flip(bag.fz, torch.tensor([0, 3999]))
        flip(bag.ids, torch.tensor([17]))
    more, last = check_sync(sync, bag, 0, last, "frozen changed by hand", budget_check=True)
    problems += more
    assert problems == []


@pytest.mark.probe(promise="reset-full", kind="state")
def test_reset_sends_everything_and_repairs_an_overwritten_copy():
    bag = Bag([("w", 3000, torch.float32, True), ("h", 1000, torch.bfloat16, True)], seed=80 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync", budget_check=True)
    if rank() != 0:
        with torch.no_grad():  # a rollout rank reloads something else into its copy
            flip(bag.w, torch.arange(0, 3000, 2))
            bag.h.data.fill_(rank())
    sync.reset()
    more, last = check_sync(sync, bag, 0, None, "sync after reset()", budget_check=True)
    problems += more
    if rank() == 0:
        flip(bag.w, torch.tensor([5, 6, 7]))
    more, last = check_sync(sync, bag, 0, last, "delta after the reset sync", budget_check=True)
    problems += more
    more, _ = check_sync(sync, bag, 0, last, "nothing changed after the reset sync", budget_check=True)
    assert problems + more == []


@pytest.mark.probe(promise="reset-full", kind="state")
def test_after_reset_deltas_are_against_the_reset_sync_not_the_one_before():
    """Prompt 9: "later syncs are deltas against that sync again". The trainer's record must be what
    the reset sync sent: a value changed back to what the sync *before* the reset had sent differs
    from the reset sync's, so it is sent."""
    bag = Bag([("w", 2000, torch.float32, True), ("v", 64, torch.bfloat16, True)], seed=95 + rank())
    sync = weight_sync(bag)
    problems, last = check_sync(sync, bag, 0, None, "first sync")
    moved = torch.tensor([3, 700, 1999])
    if rank() == 0:
        flip(bag.w, moved)  # value A
        flip(bag.v, torch.tensor([1]))
    more, last = check_sync(sync, bag, 0, last, "delta before reset()")
    problems += more
    if rank() == 0:
        flip(bag.w, moved)  # value B (the first sync's), not synced before the reset
        flip(bag.v, torch.tensor([1]))
    sync.reset()
    more, last = check_sync(sync, bag, 0, last, "full sync after reset()")
    problems += more
    if rank() == 0:
        flip(bag.w, moved)  # back to A: what the sync before the reset sent, not what the reset sync did
        flip(bag.v, torch.tensor([1]))
    more, _ = check_sync(sync, bag, 0, last, "delta after the reset sync, to values the pre-reset sync had sent")
    assert problems + more == []


@pytest.mark.probe(promise="reset-full", kind="resource")
def test_reset_sync_sends_every_parameter():
    bag = Bag([("w", 3000, torch.float32, True), ("h", 1000, torch.bfloat16, True)], seed=85)  # same on every rank
    sync = weight_sync(bag)
    sync.sync()
    sync.reset()
    sent = measured_sync(sync)
    full = 3000 * 4 + 1000 * 2
    assert everyone(sent >= full), f"rank {rank()}: the sync after reset() moved {sent} bytes, the parameters are {full}"


@pytest.mark.probe(promise="trainer-rank", kind="condition")
def test_trainer_is_the_last_rank_of_the_group():
    src = world() - 1
    bag = Bag([("w", 2000, torch.float32, True), ("h", 500, torch.float16, True)], seed=120 + rank())
    sync = weight_sync(bag, src=src)
    problems, last = check_sync(sync, bag, src, None, "first sync")
    if rank() == src:
        flip(bag.w, torch.arange(0, 2000, 9))
    more, last = check_sync(sync, bag, src, last, "delta from the last rank")
    problems += more
    assert problems == []
    assert sync.is_trainer() == (rank() == src)


@pytest.mark.probe(promise="trainer-rank", kind="condition")
def test_process_group_of_some_ranks_with_its_last_rank_as_trainer():
    """The trainer is rank ``src`` *of process_group*: with three ranks the group is ranks 1 and 2
    (rank 0 takes no part), with two it is both, and src is the group's last rank either way."""
    from nanorl.weight_sync import WeightSync

    members = list(range(1, world())) if world() > 2 else list(range(world()))
    sub = dist.new_group(ranks=members, timeout=timedelta(seconds=10))
    trainer = members[-1]
    bag = Bag([("w", 2000, torch.float32, True), ("h", 600, torch.bfloat16, True), ("i", 50, torch.int64, False)], seed=150 + rank())
    outsider = {n: p.detach().clone() for n, p in bag.named_parameters()}
    error = None
    if rank() in members:
        try:
            sync = WeightSync(bag, src=len(members) - 1, process_group=sub)
            sync.sync()
            if rank() == trainer:
                flip(bag.w, torch.arange(0, 2000, 13))
                flip(bag.h, torch.tensor([0, 599]))
            sync.sync()
        except Exception as exc:  # noqa: BLE001 - reported below, after the ranks meet again
            error = f"rank {rank()}: {type(exc).__name__}: {exc}"
    ok = everyone(error is None)
    assert ok, error or "another rank failed in its sync"
    problems = []
    for name, param in bag.named_parameters():
        mine = param.detach().reshape(-1).view(torch.uint8).clone()
        copies = [torch.empty_like(mine) for _ in range(world())]
        dist.all_gather(copies, mine, group=group())
        for r in members:
            if not torch.equal(copies[r], copies[trainer]):
                problems.append(f"{name}: group member {r} differs from the trainer (rank {trainer})")
    if rank() not in members:
        problems += [f"{n}: rank {rank()} is not in the group, yet its weights changed" for n, p in bag.named_parameters() if not torch.equal(p, outsider[n])]
    assert problems == []
