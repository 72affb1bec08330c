"""A minimal trainer / rollout loop: the trainer takes policy-gradient steps on rollouts, the
rollout ranks sample with the weights of the last sync."""

from typing import List

import torch
import torch.distributed as dist

from nanorl.policy import TinyPolicy
from nanorl.weight_sync import WeightSync


def run(steps: int = 4, sync_every: int = 1, lr: float = 0.05, seed: int = 0) -> List[float]:
    """Every rank calls this. Returns the trainer's losses (empty on rollout ranks)."""
    torch.manual_seed(seed)
    policy = TinyPolicy()
    sync = WeightSync(policy)
    sync.sync()
    optimizer = torch.optim.SGD(policy.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed + dist.get_rank())
    losses: List[float] = []
    for step in range(steps):
        prompts = torch.randint(0, 64, (8, 4), generator=gen)
        actions = policy.act(prompts, gen)
        if sync.is_trainer():
            logp = torch.log_softmax(policy(prompts)[:, -1, :], dim=-1).gather(1, actions)
            reward = (actions.float() - 32.0) / 32.0
            loss = -(reward * logp).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss))
        if (step + 1) % sync_every == 0:
            sync.sync()
    return losses
