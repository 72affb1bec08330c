"""The differential runner's pure parts: rule parsing and evaluation, value comparison, shrinking,
and golden's private import (hand-computed expectations; one process, no ranks)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python", "host"))

import infradev_differential as d  # noqa: E402


def call(nbytes=None, calls=None, **facts):
    return {"bytes": nbytes or {}, "calls": calls or {}, "peak_memory": None, "facts": facts}


def rule(text, metric="bytes", calls=None):
    r = {"id": "r", "promise": "p", "metric": metric, "rule": text}
    if calls:
        r["calls"] = calls
    return d.prepare_rules([r])[0]


def test_formula_from_the_prompt_holds_at_the_bound_and_fails_one_byte_above():
    r = rule("<= 16 * P + 64 + allowance")
    # P = 9: 16 * 9 + 64 = 208 header bytes, plus an allowance of 120: bound 328
    ok = {"sync1:delta": call({"broadcast": 328}, {"broadcast": 3}, P=9, allowance=120)}
    bad = {"sync1:delta": call({"broadcast": 300, "all_gather": 29}, {"broadcast": 3}, P=9, allowance=120)}
    gold = {"sync1:delta": call({"broadcast": 200}, {"broadcast": 2}, P=9, allowance=120)}
    assert d.check_resource_rule(r, ok, gold) is None
    msg = d.check_resource_rule(r, bad, gold)
    assert "329" in msg and "328" in msg and "sync1:delta" in msg


def test_golden_relative_rules():
    gold = {"s": call({"all_reduce": 1000}, {"all_reduce": 4})}
    assert d.check_resource_rule(rule("<= golden * (1 + 0.1)"), {"s": call({"all_reduce": 1100})}, gold) is None
    assert d.check_resource_rule(rule("<= golden * (1 + 0.1)"), {"s": call({"all_reduce": 1101})}, gold) is not None
    assert d.check_resource_rule(rule("== golden", "collectives"), {"s": call(calls={"all_reduce": 4})}, gold) is None
    assert d.check_resource_rule(rule("== golden", "collectives"), {"s": call(calls={"all_reduce": 5})}, gold) is not None
    # per op: 4 all_reduce + 1 broadcast is 5 collectives, 4 of them all_reduce
    mixed = {"s": call(calls={"all_reduce": 4, "broadcast": 1})}
    assert d.check_resource_rule(rule("== golden", "collectives:all_reduce"), mixed, gold) is None
    assert d.check_resource_rule(rule("<= golden", "collectives"), mixed, gold) is not None


def test_calls_filter_and_a_call_golden_made_that_the_submission_did_not():
    r = rule("<= 64", calls=["sync*:unchanged"])
    gold = {"sync1:first": call({"broadcast": 999}), "sync2:unchanged": call({"broadcast": 8})}
    assert d.check_resource_rule(r, {"sync1:first": call({"broadcast": 5000}), "sync2:unchanged": call({"broadcast": 64})}, gold) is None
    assert "did not" in d.check_resource_rule(r, {"sync1:first": call({"broadcast": 5000})}, gold)


def test_fact_metric_and_min_max():
    r = rule("== 0", metric="fact:over_cap")
    assert d.check_resource_rule(r, {"s": call(over_cap=0)}, {"s": call(over_cap=0)}) is None
    assert "fact:over_cap = 2" in d.check_resource_rule(r, {"s": call(over_cap=2)}, {"s": call(over_cap=0)})
    r2 = rule("<= max(golden, 10) - min(3, 4) // 2")  # max(8, 10) - 1 = 9
    g = {"s": call({"x": 8})}
    assert d.check_resource_rule(r2, {"s": call({"x": 9})}, g) is None
    assert d.check_resource_rule(r2, {"s": call({"x": 10})}, g) is not None


@pytest.mark.parametrize("text", ["16 * P", "<= ", "<= __import__('os')", "<= a.b", "<= x ** 2", "<= [1]"])
def test_bad_rules_are_spec_errors(text):
    with pytest.raises(d.SpecError):
        d.parse_rule(text)


def test_a_name_the_call_did_not_record_is_a_spec_error():
    with pytest.raises(d.SpecError, match="did not record"):
        d.check_resource_rule(rule("<= 16 * P"), {"s": call({"b": 1})}, {"s": call({"b": 1})})


def test_values_bitwise_tells_minus_zero_and_nan_payloads_apart():
    r = {"metric": "values", "values": ["sync*"]}
    a = torch.tensor([0.0, 1.0, float("nan")])
    assert d.compare_values(r, {"sync1:w": a.clone()}, {"sync1:w": a.clone()}) is None
    b = a.clone()
    b[0] = -0.0
    msg = d.compare_values(r, {"sync1:w": b}, {"sync1:w": a})
    assert "1 of 3 entries differ bitwise" in msg and "flat index 0" in msg
    c = a.clone()
    c.view(torch.int32)[2] ^= 1  # another NaN payload
    assert "flat index 2" in d.compare_values(r, {"sync1:w": c}, {"sync1:w": a})
    # a dtype change is a difference even when the numbers agree
    assert "float64" in d.compare_values(r, {"sync1:w": a.double()}, {"sync1:w": a})
    # values the rule does not name are not compared; values golden has and the submission lacks are
    assert d.compare_values(r, {"other": b}, {"other": a, "sync1:w": a}) is not None
    assert d.compare_values(r, {"other": b, "sync1:w": a}, {"other": a, "sync1:w": a}) is None


def test_values_with_tolerance():
    r = {"metric": "values", "compare": "tolerance", "rtol": 1e-5, "atol": 1e-6}
    g = torch.tensor([1.0, 100.0])
    assert d.compare_values(r, {"v": torch.tensor([1.000001, 100.0009])}, {"v": g}) is None
    assert "beyond" in d.compare_values(r, {"v": torch.tensor([1.0, 100.01])}, {"v": g})


def test_generic_shrink_makes_lists_shorter_and_integers_smaller():
    w = {"seed": 7, "params": [1, 2, 3, 4], "n": 6}
    got = list(d.generic_shrink(w))
    assert {"seed": 7, "params": [1, 2], "n": 6} in got
    assert {"seed": 7, "params": [1, 2, 4], "n": 6} in got
    assert {"seed": 7, "params": [1, 2, 3, 4], "n": 3} in got
    assert all(c["seed"] == 7 for c in got)  # the seed is never shrunk
    assert all(d.workload_size(c) < d.workload_size(w) for c in got)


def test_golden_is_imported_privately_and_never_reaches_the_submissions_modules(tmp_path, monkeypatch):
    files = {
        "pkgx/__init__.py": "",
        "pkgx/core.py": "from pkgx.util import helper\nimport pkgx.util as u\nVALUE = helper() + u.helper()\n",
        "pkgx/util.py": "def helper():\n    return 'gold'\n",
    }
    # the submission's own pkgx, importable on sys.path
    sub = tmp_path / "pkgx"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    (sub / "util.py").write_text("def helper():\n    return 'sub'\n")
    (sub / "core.py").write_text("from pkgx.util import helper\nVALUE = helper()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    gold = d.GoldenImpl({"package": "pkgx", "key": "t1", "files": files})
    assert gold.module("pkgx.core").VALUE == "goldgold"
    assert d.SubmissionImpl("pkgx").module("pkgx.core").VALUE == "sub"
    with pytest.raises(d.SpecError):
        gold.module("os")


def test_golden_that_reaches_the_submission_is_refused(tmp_path, monkeypatch):
    sub = tmp_path / "pkgy"
    sub.mkdir()
    (sub / "__init__.py").write_text("")
    (sub / "util.py").write_text("def helper():\n    return 'sub'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    files = {"pkgy/__init__.py": "", "pkgy/core.py": "import importlib\nhelper = importlib.import_module('pkgy.util').helper\n"}
    with pytest.raises(d.SpecError, match="not private"):
        d.GoldenImpl({"package": "pkgy", "key": "t2", "files": files}).module("pkgy.core")


class _NoMeasure:
    bytes, calls, peak_memory_delta_bytes = {}, {}, None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _AllReduceDriver:
    """A driver whose every run issues one all-reduce on the run's group."""

    @staticmethod
    def run(impl, workload, rec):
        x = torch.full((workload["n"],), float(impl.module("pkgz.core").SCALE))
        with rec.call("sync"):
            torch.distributed.all_reduce(x, group=rec.group)
        rec.value("sync", x)


def test_each_workloads_groups_are_released(monkeypatch):
    # Real gloo in this process (a world of one): a grade runs hundreds of workloads, each on fresh
    # groups; a group left alive keeps its gloo threads, which on a shared 2-core machine add up to
    # hundreds of threads per rank. The process's threads and groups must not grow with the workloads.
    import torch.distributed.distributed_c10d as c10d

    for k in ("MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    d._ensure_dist()
    spec = {"rules": [{"id": "v", "promise": "p", "kind": "numerical", "metric": "values"}]}
    bundle = {"package": "pkgz", "key": "t3", "files": {"pkgz/__init__.py": "", "pkgz/core.py": "SCALE = 2\n"}}
    sub = {"package": "pkgz", "key": "t3s", "files": {"pkgz/__init__.py": "", "pkgz/core.py": "SCALE = 2\n"}}
    diff = d.Differential(spec, _AllReduceDriver, bundle, _NoMeasure)
    diff.submission = d.GoldenImpl(sub)  # the same code under another private name: every rule holds
    assert diff.run_workload({"n": 1}) == {}
    groups, threads = len(c10d._pg_map), len(os.listdir("/proc/self/task"))
    for n in range(2, 32):
        assert diff.run_workload({"n": n}) == {}
    assert len(c10d._pg_map) == groups
    assert len(os.listdir("/proc/self/task")) <= threads + 2
