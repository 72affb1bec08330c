"""Data parallelism: every rank holds a full replica and gradients are averaged over ranks."""

from typing import Any, Optional

import torch
import torch.distributed as dist
from torch import nn


class DataParallel(nn.Module):
    """Wraps ``module`` for data-parallel training.

    On construction the replicas are made identical (rank 0's parameters and buffers are
    broadcast). After ``backward()`` the training loop calls :meth:`sync_gradients`, which leaves
    every trainable parameter's ``.grad`` equal to the average of the ranks' gradients.
    """

    def __init__(self, module: nn.Module, *, process_group: Optional[Any] = None) -> None:
        super().__init__()
        if not dist.is_initialized():
            raise RuntimeError("DataParallel needs an initialised default process group")
        self.module = module
        self.process_group = process_group
        self._broadcast_from_rank0()

    def _broadcast_from_rank0(self) -> None:
        src = dist.get_global_rank(self.process_group, 0) if self.process_group is not None else 0
        with torch.no_grad():
            for tensor in list(self.module.parameters()) + list(self.module.buffers()):
                dist.broadcast(tensor.data, src=src, group=self.process_group)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def sync_gradients(self) -> None:
        """Average every parameter's gradient over the ranks of the process group."""
        world = dist.get_world_size(self.process_group)
        for param in self.module.parameters():
            if not param.requires_grad or param.grad is None:
                continue
            dist.all_reduce(param.grad, group=self.process_group)
            param.grad.div_(world)
