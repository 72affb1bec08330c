"""The training loop: forward, backward, gradient sync, optimizer step."""

from typing import Iterable, List, Optional

import torch
from torch import nn

from nanoinfra import runtime
from nanoinfra.config import TrainConfig
from nanoinfra.data import Batch, rank_batches
from nanoinfra.models import TinyMLP
from nanoinfra.parallel import DataParallel


class Trainer:
    """Trains a data-parallel replica on this rank's shard of the data.

    The default process group must be initialised (see :func:`nanoinfra.runtime.init_distributed`).
    ``module`` defaults to a :class:`TinyMLP` shaped by ``config``.
    """

    def __init__(self, config: TrainConfig, module: Optional[nn.Module] = None) -> None:
        self.config = config
        self.device = runtime.resolve_device()
        torch.manual_seed(config.seed)
        if module is None:
            module = TinyMLP(config.in_features, config.hidden, config.out_features)
        self.model = DataParallel(module.to(self.device))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=config.lr)
        self.loss_fn = nn.MSELoss()

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """One optimizer step on this rank's batch; returns the local loss."""
        inputs, targets = inputs.to(self.device), targets.to(self.device)
        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss_fn(self.model(inputs), targets)
        loss.backward()
        self.model.sync_gradients()
        self.optimizer.step()
        return loss.item()

    def fit(self, batches: Optional[Iterable[Batch]] = None) -> List[float]:
        """Runs ``config.steps`` steps on this rank's shard (or on ``batches``); returns the losses."""
        if batches is None:
            batches = rank_batches(self.config, runtime.rank())
        return [self.train_step(inputs, targets) for inputs, targets in batches]
