"""Fixtures for the probes: Megatron's model-parallel state at its defaults (one rank on one GPU),
made once per session through the tests' own Utils, and a factory for a DDP-wrapped bf16 model
with FP32 local accumulation for the given name patterns."""

import sys
from pathlib import Path

import pytest
import torch

REPO_ROOT = next((p for p in Path(__file__).resolve().parents if (p / "megatron").is_dir()), None)
if REPO_ROOT is not None and str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


@pytest.fixture(scope="session")
def model_parallel():
    from megatron.core import parallel_state
    from tests.unit_tests.test_utilities import Utils

    if not parallel_state.model_parallel_is_initialized():
        Utils.initialize_model_parallel()
    yield parallel_state


@pytest.fixture
def make_ddp(model_parallel):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    def make(patterns=(), module=None, **cfg):
        cfg.setdefault("grad_reduce_in_fp32", False)
        cfg.setdefault("average_in_collective", False)
        cfg.setdefault("overlap_grad_reduce", False)
        cfg.setdefault("use_distributed_optimizer", False)
        if patterns is not None:
            cfg["param_name_patterns_for_fp32_local_accumulation"] = tuple(patterns)
        torch.manual_seed(0)
        from fp32acc_models import Net

        module = (module if module is not None else Net()).bfloat16().cuda()
        config = TransformerConfig(num_attention_heads=1, num_layers=1)
        return DistributedDataParallel(config, ddp_config=DistributedDataParallelConfig(**cfg), module=module)

    return make


@pytest.fixture
def ddp_config_cls():
    from megatron.core.distributed import DistributedDataParallelConfig

    return DistributedDataParallelConfig
