"""nanoinfra: a tiny data-parallel training stack on torch.distributed."""

from nanoinfra.config import TrainConfig
from nanoinfra.models import TinyMLP
from nanoinfra.parallel import DataParallel
from nanoinfra.trainer import Trainer

__all__ = ["TrainConfig", "TinyMLP", "DataParallel", "Trainer"]
