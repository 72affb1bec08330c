import torch
import torch.distributed as dist

from nanorl.policy import TinyPolicy
from nanorl.weight_sync import WeightSync


def _all_equal(module) -> bool:
    for _, param in module.named_parameters():
        flat = param.detach().reshape(-1)
        gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, flat)
        if not all(torch.equal(gathered[0], other) for other in gathered):
            return False
    return True


def test_sync_makes_rollout_copies_equal():
    torch.manual_seed(100 + dist.get_rank())  # a different policy on every rank
    policy = TinyPolicy()
    WeightSync(policy).sync()
    assert _all_equal(policy)


def test_trainer_weights_are_not_changed_by_a_sync():
    torch.manual_seed(7 + dist.get_rank())
    policy = TinyPolicy()
    sync = WeightSync(policy)
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    sync.sync()
    if sync.is_trainer():
        for name, param in policy.named_parameters():
            assert torch.equal(param, before[name]), name


def test_delta_sync_after_an_optimizer_step():
    torch.manual_seed(3 + dist.get_rank())
    policy = TinyPolicy()
    sync = WeightSync(policy)
    sync.sync()
    if sync.is_trainer():
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
        policy(torch.tensor([[1, 2, 3]])).sum().backward()
        optimizer.step()
    sync.sync()
    assert _all_equal(policy)


def test_reset_then_sync():
    torch.manual_seed(5 + dist.get_rank())
    policy = TinyPolicy()
    sync = WeightSync(policy)
    sync.sync()
    sync.reset()
    sync.sync()
    assert _all_equal(policy)
