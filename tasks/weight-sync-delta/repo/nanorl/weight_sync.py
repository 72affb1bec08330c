"""Keeping the rollout ranks' copy of the policy equal to the trainer's.

One rank of the process group is the trainer (``src``); it changes the parameters with its
optimizer. Every other rank is a rollout rank holding a copy. After optimizer steps every rank
calls :meth:`WeightSync.sync` (it is a collective) and the rollout copies become the trainer's.
"""

from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import nn


def wire_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's storage as flat uint8, a view that shares memory with it.

    gloo cannot broadcast bfloat16, bool or int16 tensors, and a bitwise copy must not go through
    a float conversion anyway; raw bytes move every dtype exactly.
    """
    return tensor.detach().reshape(-1).view(torch.uint8)


class WeightSync:
    """Sends the trainer's parameters to the rollout ranks.

    Every sync broadcasts every parameter of ``module`` (trainable or frozen) in full from the
    trainer rank, in ``module.named_parameters()`` order; the rollout ranks receive in place.
    """

    def __init__(self, module: nn.Module, *, src: int = 0, process_group: Optional[Any] = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("WeightSync needs an initialised default process group")
        self.module = module
        self.src = src
        self.process_group = process_group

    def _global_src(self) -> int:
        if self.process_group is None:
            return self.src
        return dist.get_global_rank(self.process_group, self.src)

    def is_trainer(self) -> bool:
        return dist.get_rank(self.process_group) == self.src

    def sync(self) -> None:
        """Collective: afterwards every rank's parameters equal the trainer's."""
        src = self._global_src()
        with torch.no_grad():
            for _, param in self.module.named_parameters():
                dist.broadcast(wire_bytes(param.data), src=src, group=self.process_group)
