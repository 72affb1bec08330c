"""The command-line flag and its plumbing: `--ddp-param-name-patterns-for-fp32-local-accumulation`
parses (nargs='+', empty by default) and get_model hands it to DDP's config as a tuple, so that a
matching parameter of the model get_model builds gets its FP32 .main_grad."""

import sys

import pytest
import torch

from fp32acc_models import Net


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


@pytest.mark.probe(promise="flag-and-plumbing", kind="condition")
# get_model wraps a bf16 model in Float16Module before DDP, so DDP sees "module.head.weight": the
# patterns start with "*".
@pytest.mark.parametrize("patterns", [("*head.weight",), ("*layers.1.*", "*head.weight")])
def test_get_model_passes_the_patterns_to_ddp(model_parallel, monkeypatch, patterns):
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.transformer import TransformerConfig
    from megatron.training import global_vars, training

    args = _parse(["--ddp-param-name-patterns-for-fp32-local-accumulation", *patterns])
    for name, value in dict(
        use_distributed_optimizer=False, overlap_grad_reduce=False, ddp_bucket_size=None, ddp_num_buckets=None,
        accumulate_allreduce_grads_in_fp32=False, fp16=False, bf16=True, use_torch_fsdp2=False,
        use_megatron_fsdp=False, init_model_with_meta_device=False, data_parallel_random_init=False,
        overlap_param_gather_with_optimizer_step=False, virtual_pipeline_model_parallel_size=None, load=None,
        use_cpu_initialization=False,
    ).items():
        setattr(args, name, value)
    monkeypatch.setattr(global_vars, "_GLOBAL_ARGS", args)

    def provide(*_, **__):
        torch.manual_seed(0)
        net = Net()
        net.config = TransformerConfig(num_attention_heads=1, num_layers=1)
        return net

    model = training.get_model(provide, wrap_with_ddp=True)
    assert isinstance(model, list) and len(model) == 1 and isinstance(model[0], DistributedDataParallel), f"get_model returned {model!r}"
    ddp = model[0]
    got = ddp.ddp_config.param_name_patterns_for_fp32_local_accumulation
    assert tuple(got) == tuple(patterns), f"DDP's config got {got!r}"
    seen = 0
    for name, p in ddp.module.named_parameters():
        if not hasattr(p, "main_grad"):
            continue
        seen += 1
        chosen = any(__import__("fnmatch").fnmatch(name, pat) for pat in patterns)
        want = torch.float32 if chosen else torch.bfloat16
        assert p.main_grad.dtype == want, f"{name}: main_grad {p.main_grad.dtype}, expected {want}"
    assert seen > 0, "no parameter of the wrapped model has a .main_grad"
