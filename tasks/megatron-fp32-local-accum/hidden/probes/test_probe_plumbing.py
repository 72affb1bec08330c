"""The command-line flag and its plumbing: `--ddp-param-name-patterns-for-fp32-local-accumulation`
parses (nargs='+', empty by default) and get_model hands it to the DistributedDataParallelConfig it
builds. (The first get_model probe built a bf16 model through Float16Module with args.bf16 set but the
model config's bf16 unset; Float16Module refuses that, so it failed on gold on the H200 on 2026-12-02.
This one keeps the model fp32 and records the config get_model hands the DDP wrapper.)"""

import sys

import pytest
import torch


def _parse(argv):
    from megatron.training.arguments import parse_args

    saved = sys.argv
    sys.argv = ["probe", *argv]
    try:
        return parse_args(ignore_unknown_args=True)
    finally:
        sys.argv = saved


@pytest.mark.probe(promise="flag-and-plumbing", kind="condition")
@pytest.mark.parametrize("argv,expected", [([], []), (["--ddp-param-name-patterns-for-fp32-local-accumulation", "layers.0.*"], ["layers.0.*"]), (["--ddp-param-name-patterns-for-fp32-local-accumulation", "head.weight", "all"], ["head.weight", "all"])])
def test_the_flag_parses(argv, expected):
    args = _parse(argv)
    got = getattr(args, "ddp_param_name_patterns_for_fp32_local_accumulation", "missing")
    assert got != "missing", "parse_args has no ddp_param_name_patterns_for_fp32_local_accumulation"
    assert list(got or []) == expected


class _RecordingDDP(torch.nn.Module):
    """Stands in for DDP inside get_model: keeps the ddp_config get_model built, wraps nothing."""

    configs = []

    def __init__(self, config, ddp_config, module, **_):
        super().__init__()
        type(self).configs.append(ddp_config)
        self.module = module


@pytest.mark.probe(promise="flag-and-plumbing", kind="condition")
@pytest.mark.parametrize("patterns", [("head.weight",), ("layers.1.*", "head.weight")])
def test_get_model_hands_the_patterns_to_the_ddp_config(model_parallel, monkeypatch, patterns):
    # get_model builds DistributedDataParallelConfig from the parsed args; what it hands the wrapper is
    # what selects the FP32 parameters. fp32 model (no Float16Module: it requires config.bf16/fp16 to
    # match the args, which is what made the first version of this probe fail on gold on the H200).
    from megatron.core.transformer import TransformerConfig
    from megatron.training import global_vars, training

    from fp32acc_models import Net

    args = _parse(["--ddp-param-name-patterns-for-fp32-local-accumulation", *patterns])
    for name, value in dict(
        use_distributed_optimizer=False, overlap_grad_reduce=False, ddp_bucket_size=None, ddp_num_buckets=None,
        fp16=False, bf16=False, use_torch_fsdp2=False, use_megatron_fsdp=False, init_model_with_meta_device=False,
        data_parallel_random_init=False, overlap_param_gather_with_optimizer_step=False,
        virtual_pipeline_model_parallel_size=None, load=None, use_cpu_initialization=False,
    ).items():
        setattr(args, name, value)
    monkeypatch.setattr(global_vars, "_GLOBAL_ARGS", args)
    _RecordingDDP.configs = []
    monkeypatch.setattr(training, "DDP", _RecordingDDP)

    def provide(*_, **__):
        net = Net()
        net.config = TransformerConfig(num_attention_heads=1, num_layers=1)
        return net

    training.get_model(provide, wrap_with_ddp=True)
    assert len(_RecordingDDP.configs) == 1, f"get_model built {len(_RecordingDDP.configs)} DDP wrappers, expected 1"
    got = _RecordingDDP.configs[0].param_name_patterns_for_fp32_local_accumulation
    assert tuple(got) == tuple(patterns), f"get_model handed DDP's config {got!r} for --ddp-param-name-patterns-for-fp32-local-accumulation {' '.join(patterns)}"
