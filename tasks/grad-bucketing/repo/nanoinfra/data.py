"""Deterministic synthetic regression data, one shard per rank."""

from typing import Iterator, Tuple

import torch

from nanoinfra.config import TrainConfig

Batch = Tuple[torch.Tensor, torch.Tensor]


def _teacher(config: TrainConfig) -> torch.Tensor:
    gen = torch.Generator().manual_seed(config.seed)
    return torch.randn(config.in_features, config.out_features, generator=gen)


def make_batch(config: TrainConfig, step: int, rank: int) -> Batch:
    """The batch rank ``rank`` sees at ``step``: the same on every call, different per rank/step."""
    gen = torch.Generator().manual_seed(config.seed * 1_000_003 + step * 1_009 + rank + 1)
    inputs = torch.randn(config.batch_size, config.in_features, generator=gen)
    noise = 0.01 * torch.randn(config.batch_size, config.out_features, generator=gen)
    return inputs, inputs @ _teacher(config) + noise


def rank_batches(config: TrainConfig, rank: int) -> Iterator[Batch]:
    for step in range(config.steps):
        yield make_batch(config, step, rank)
