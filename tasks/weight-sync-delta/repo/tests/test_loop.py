import torch
import torch.distributed as dist

from nanorl import loop


def test_loop_trains_on_the_trainer_only():
    losses = loop.run(steps=3)
    if dist.get_rank() == 0:
        assert len(losses) == 3 and all(isinstance(x, float) for x in losses)
    else:
        assert losses == []
