import math

import torch
import torch.distributed as dist

from nanoinfra.config import TrainConfig
from nanoinfra.trainer import Trainer


def test_fit_runs_and_replicas_stay_identical():
    trainer = Trainer(TrainConfig(steps=3))
    losses = trainer.fit()
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    for param in trainer.model.parameters():
        gathered = [torch.empty_like(param) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, param.detach().contiguous())
        assert all(torch.equal(gathered[0], other) for other in gathered)
