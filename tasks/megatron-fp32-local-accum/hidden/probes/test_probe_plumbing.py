"""The command-line flag: `--ddp-param-name-patterns-for-fp32-local-accumulation` parses (nargs='+',
empty by default). (A probe that get_model hands it to DDP's config failed on gold on the H200 on
2026-12-02 for a reason the run did not bring back; it was removed rather than left wrong, and the
get_model mutant it was written for survives: bench/gpu_issue25_run3.json.)"""

import sys

import pytest


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
