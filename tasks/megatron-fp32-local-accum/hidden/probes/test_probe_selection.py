"""The selection: which parameters get an FP32 .main_grad. Patterns are fnmatch patterns matched
against the whole name the wrapped module gives the parameter (named_parameters()); a parameter is
selected when any pattern matches; 'all' selects every parameter wherever it appears; a pattern
matching nothing changes nothing. And the config's rule: patterns together with
grad_reduce_in_fp32 are refused."""

import fnmatch

import pytest
import torch

from fp32acc_models import Net


def expected(names, patterns):
    return {n for n in names if any(p == "all" or fnmatch.fnmatch(n, p) for p in patterns)}


def promoted(ddp):
    return {n for n, p in ddp.module.named_parameters() if p.main_grad.dtype == torch.float32}


CASES = [
    pytest.param(("layers.0.*", "*.bias"), id="two-patterns-or"),
    pytest.param(("*.bias", "layers.2.weight", "head.*"), id="three-patterns"),
    pytest.param(("*.bias", "all"), id="all-not-first"),
    pytest.param(("layers.[02].weight",), id="char-class"),
    pytest.param(("layers.?.bias",), id="question-mark"),
    pytest.param(("*",), id="star-matches-dots"),
    pytest.param(("weight",), id="whole-name-not-substring"),
    pytest.param(("layers.0",), id="module-name-not-param"),
    pytest.param(("head.weight",), id="exact-name"),
]


@pytest.mark.probe(promise="selection-by-name-patterns", kind="state")
@pytest.mark.parametrize("patterns", CASES)
def test_selection(make_ddp, patterns):
    ddp = make_ddp(patterns=patterns)
    names = [n for n, _ in ddp.module.named_parameters()]
    want = expected(names, patterns)
    assert promoted(ddp) == want, f"patterns {patterns}: FP32 .main_grad for {sorted(promoted(ddp))}, expected {sorted(want)}"
    in_buckets = set()
    for buf in ddp.buffers:
        for bucket in buf.buckets:
            in_buckets |= set(bucket.params_with_extra_main_grads)
    assert in_buckets == {p for n, p in ddp.module.named_parameters() if n in want}, f"patterns {patterns}: the buckets' params_with_extra_main_grads do not list exactly the selected parameters"


@pytest.mark.probe(promise="selection-by-name-patterns", kind="state")
def test_pattern_matching_nothing_changes_nothing(make_ddp):
    ddp = make_ddp(patterns=("no.such.*", "LAYERS.0.weight"))
    assert promoted(ddp) == set()
    for buf in ddp.buffers:
        assert len(buf.extra_main_grads) == 0
        for bucket in buf.buckets:
            assert list(bucket.params_with_extra_main_grads) == []


@pytest.mark.probe(promise="selection-by-name-patterns", kind="state")
def test_names_of_nested_modules(make_ddp):
    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = Net(dim=16, layers=2)
            self.final_norm = torch.nn.LayerNorm(16)

    ddp = make_ddp(patterns=("decoder.layers.1.*", "final_norm.weight"), module=Outer())
    names = [n for n, _ in ddp.module.named_parameters()]
    want = expected(names, ("decoder.layers.1.*", "final_norm.weight"))
    assert want == {"decoder.layers.1.weight", "decoder.layers.1.bias", "final_norm.weight"}
    assert promoted(ddp) == want


@pytest.mark.probe(promise="selection-by-name-patterns", kind="state")
def test_expert_parallel_params_are_selected_too(make_ddp):
    net = Net(dim=16, layers=2)
    for p in net.layers[1].parameters():
        p.allreduce = False  # expert-parallel: its own buffer, reduced over the expert dp group
    ddp = make_ddp(patterns=("layers.1.weight", "layers.0.bias"), module=net)
    assert len(ddp.expert_parallel_buffers) == 1
    assert promoted(ddp) == {"layers.1.weight", "layers.0.bias"}
    (ebuf,) = ddp.expert_parallel_buffers
    assert {p for b in ebuf.buckets for p in b.params_with_extra_main_grads} == {net.layers[1].weight}


@pytest.mark.probe(promise="config-rule", kind="condition")
@pytest.mark.parametrize("patterns", [("all",), ("*.weight",), ("a", "b")], ids=["all", "one", "two"])
def test_patterns_with_grad_reduce_in_fp32_refused(ddp_config_cls, patterns):
    with pytest.raises(AssertionError):
        ddp_config_cls(grad_reduce_in_fp32=True, param_name_patterns_for_fp32_local_accumulation=patterns)


@pytest.mark.probe(promise="config-rule", kind="condition")
def test_config_defaults_and_allowed(ddp_config_cls):
    assert tuple(ddp_config_cls().param_name_patterns_for_fp32_local_accumulation) == ()
    ddp_config_cls(grad_reduce_in_fp32=True)  # no patterns: fine
    cfg = ddp_config_cls(grad_reduce_in_fp32=False, param_name_patterns_for_fp32_local_accumulation=("all",))
    assert tuple(cfg.param_name_patterns_for_fp32_local_accumulation) == ("all",)
