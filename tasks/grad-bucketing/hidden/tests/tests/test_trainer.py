import math

import pytest
import torch
import torch.distributed as dist

from nanoinfra.config import TrainConfig
from nanoinfra.trainer import Trainer


@pytest.mark.parametrize("bucket_cap_mb, grad_accum_steps", [(25.0, 1), (0.0005, 1), (0.0005, 2)])
def test_fit_runs_and_replicas_stay_identical(bucket_cap_mb, grad_accum_steps):
    config = TrainConfig(steps=3, bucket_cap_mb=bucket_cap_mb, grad_accum_steps=grad_accum_steps)
    trainer = Trainer(config)
    losses = trainer.fit()
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    for param in trainer.model.parameters():
        gathered = [torch.empty_like(param) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, param.detach().contiguous())
        assert all(torch.equal(gathered[0], other) for other in gathered)
