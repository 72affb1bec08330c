"""Fixtures for the probes: one process group (NCCL, the launcher's world) and Megatron's model
parallel state at its defaults, made once per session; DDP configs and a DDP factory."""

import os
import socket
import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = next((p for p in Path(__file__).resolve().parents if (p / "megatron").is_dir()), None)
if REPO_ROOT is not None and str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def model_parallel():
    from megatron.core import parallel_state

    if not torch.distributed.is_initialized():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        if "MASTER_ADDR" in os.environ:
            torch.distributed.init_process_group(backend="nccl", world_size=int(os.environ.get("WORLD_SIZE", "1")), rank=int(os.environ.get("RANK", "0")))
        else:
            torch.distributed.init_process_group(backend="nccl", init_method=f"tcp://127.0.0.1:{_free_port()}", world_size=1, rank=0)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel()
    yield parallel_state


@pytest.fixture
def make_ddp(model_parallel):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    def make(module, full_param_layout=None, pass_layout=False, disable_bucketing=False, model_config=None, **cfg):
        cfg.setdefault("grad_reduce_in_fp32", True)
        cfg.setdefault("average_in_collective", False)
        ddp_config = DistributedDataParallelConfig(**cfg)
        kwargs = {"full_param_layout": full_param_layout} if (pass_layout or full_param_layout is not None) else {}
        if disable_bucketing:
            kwargs["disable_bucketing"] = True
        config = TransformerConfig(num_attention_heads=1, num_layers=1, **(model_config or {}))
        return DistributedDataParallel(config, ddp_config=ddp_config, module=module.cuda(), **kwargs)

    return make


@pytest.fixture
def ddp_config_cls():
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig
