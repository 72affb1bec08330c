"""The differential runner's pure parts: rule parsing and evaluation, value encoding and the host's
comparison, shrinking (hand-computed expectations; one process, a world of one)."""

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


def enc(t, whole=False):
    return d.encode_value(t, whole)


def test_values_bitwise_tells_minus_zero_and_nan_payloads_apart():
    r = {"metric": "values", "values": ["sync*"]}
    a = torch.tensor([0.0, 1.0, float("nan")])
    assert d.compare_encoded(r, {"sync1:w": enc(a.clone())}, {"sync1:w": enc(a.clone())}) is None
    b = a.clone()
    b[0] = -0.0
    msg = d.compare_encoded(r, {"sync1:w": enc(b)}, {"sync1:w": enc(a)})
    assert "1 of 3 entries differ bitwise" in msg and "flat index 0" in msg
    c = a.clone()
    c.view(torch.int32)[2] ^= 1  # another NaN payload
    assert "flat index 2" in d.compare_encoded(r, {"sync1:w": enc(c)}, {"sync1:w": enc(a)})
    # a dtype change is a difference even when the numbers agree
    assert "float64" in d.compare_encoded(r, {"sync1:w": enc(a.double())}, {"sync1:w": enc(a)})
    # values the rule does not name are not compared; values golden has and the submission lacks are
    assert d.compare_encoded(r, {"other": enc(b)}, {"other": enc(a), "sync1:w": enc(a)}) is not None
    assert d.compare_encoded(r, {"other": enc(b), "sync1:w": enc(a)}, {"other": enc(a), "sync1:w": enc(a)}) is None


def test_large_values_travel_as_digests_and_still_differ():
    r = {"metric": "values"}
    g = torch.arange(4096, dtype=torch.float32)
    s = g.clone()
    s[4000] += 1
    eg, es = enc(g), enc(s)
    assert "data" not in eg and eg["nbytes"] == 4 * 4096  # over SMALL_VALUE_BYTES: a digest only
    assert "differs bitwise" in d.compare_encoded(r, {"v": es}, {"v": eg})
    assert d.compare_encoded(r, {"v": enc(g.clone())}, {"v": eg}) is None


def test_values_with_tolerance_in_every_float_dtype():
    r = {"metric": "values", "compare": "tolerance", "rtol": 1e-2, "atol": 1e-3}
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        g = torch.tensor([1.0, 100.0, float("nan")], dtype=dtype)
        near = torch.tensor([1.0, 100.5, float("nan")], dtype=dtype)
        far = torch.tensor([1.0, 104.0, float("nan")], dtype=dtype)
        assert d.compare_encoded(r, {"v": enc(near, True)}, {"v": enc(g, True)}) is None, dtype
        msg = d.compare_encoded(r, {"v": enc(far, True)}, {"v": enc(g, True)})
        assert "1 of 3 entries beyond" in msg and "flat index 1" in msg, dtype
        # NaN against a number is a difference under any tolerance
        nan = torch.tensor([float("nan"), 100.0, float("nan")], dtype=dtype)
        assert "flat index 0" in d.compare_encoded(r, {"v": enc(nan, True)}, {"v": enc(g, True)}), dtype
    # the numbers decoded on the host are the tensor's own (bf16 widened exactly)
    t = torch.tensor([1.5, -2.25, 3.0e38], dtype=torch.bfloat16)
    assert d.decode_numbers(enc(t, True)) == [float(x) for x in t.float()]


def _record(workloads):
    return {"format": 1, "rank": 0, "world": 1, "workloads": workloads, "unreached": []}


def _entry(index, workload, values=None, calls=None, error=None):
    return {"index": index, "workload": workload, "error": error, "calls": calls or {}, "values": values or {}}


def test_judge_reports_the_first_failing_workload_per_rule_and_what_the_submission_skipped():
    rules = [
        {"id": "same", "promise": "p1", "metric": "values"},
        {"id": "budget", "promise": "p2", "metric": "bytes", "rule": "<= golden"},
    ]
    one, two = torch.ones(3), torch.full((3,), 2.0)
    gold = {"0": _record([
        _entry(0, {"n": 1}, {"x": enc(one)}, {"sync": call({"broadcast": 12})}),
        _entry(1, {"n": 2}, {"x": enc(two)}, {"sync": call({"broadcast": 12})}),
        _entry(2, {"n": 3}, {"x": enc(one)}, {"sync": call({"broadcast": 12})}),
        _entry(3, {"n": 4}, error="golden raised ValueError"),  # a workload golden cannot run: not compared
    ])}
    sub = {"0": _record([
        _entry(0, {"n": 1}, {"x": enc(one)}, {"sync": call({"broadcast": 12})}),
        _entry(1, {"n": 2}, {"x": enc(one)}, {"sync": call({"broadcast": 16})}),
    ])}
    out = d.judge(rules, gold, sub, every=True)
    assert out["compared"] == 3
    assert out["failures"]["same"]["index"] == 1 and out["failures"]["same"]["workload"] == {"n": 2}
    assert "differ bitwise" in out["failures"]["same"]["message"]
    assert out["failures"]["budget"]["index"] == 1 and "16" in out["failures"]["budget"]["message"]
    # workload 2 never reached by the submission fails every rule; 3 is golden's own error, left out
    assert out["all"] == {"same": [1, 2], "budget": [1, 2]}
    # the same workload index with another workload is not a match
    sub["0"]["workloads"][0]["workload"] = {"n": 9}
    assert "another workload" in d.judge(rules, gold, sub)["failures"]["same"]["message"]
    # a rank that wrote nothing fails every rule
    assert set(d.judge(rules, gold, {})["failures"]) == {"same", "budget"}


def test_the_host_comparator_runs_without_torch_or_site_packages(tmp_path):
    # The host runs the comparator as `python3 -I -S`: no site-packages (so no torch), JSON in and out.
    import json
    import subprocess

    rules = [{"id": "same", "promise": "p1", "metric": "values"}]
    one = enc(torch.ones(2))
    gold = {"0": _record([_entry(0, {"n": 1}, {"x": one})])}
    script = os.path.join(os.path.dirname(d.__file__), "infradev_differential.py")
    probe = subprocess.run([sys.executable, "-I", "-S", "-c", "import torch"], capture_output=True)
    assert probe.returncode != 0  # torch is really out of reach in that mode
    r = subprocess.run([sys.executable, "-I", "-S", script, "compare"], input=json.dumps({"rules": rules, "golden": gold, "submission": gold}), capture_output=True, text=True, check=True)
    assert json.loads(r.stdout) == {"failures": {}, "compared": 1}
    bad = [{"id": "b", "promise": "p", "metric": "bytes", "rule": "<= golden +"}]
    r = subprocess.run([sys.executable, "-I", "-S", script, "compare"], input=json.dumps({"rules": bad, "golden": gold, "submission": gold}), capture_output=True, text=True, check=True)
    assert "spec_error" in json.loads(r.stdout)


def test_generic_shrink_makes_lists_shorter_and_integers_smaller():
    w = {"seed": 7, "params": [1, 2, 3, 4], "n": 6}
    got = list(d.generic_shrink(w))
    assert {"seed": 7, "params": [1, 2], "n": 6} in got
    assert {"seed": 7, "params": [1, 2, 4], "n": 6} in got
    assert {"seed": 7, "params": [1, 2, 3, 4], "n": 3} in got
    assert all(c["seed"] == 7 for c in got)  # the seed is never shrunk
    assert all(d.workload_size(c) < d.workload_size(w) for c in got)


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


def test_each_workloads_groups_are_released(monkeypatch, tmp_path):
    # Real gloo in this process (a world of one): a grade runs hundreds of workloads, each on fresh
    # groups; a group left alive keeps its gloo threads, which on a shared 2-core machine add up to
    # hundreds of threads per rank. The process's threads and groups must not grow with the workloads.
    import torch.distributed.distributed_c10d as c10d

    for k in ("MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    pkg = tmp_path / "pkgz"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "core.py").write_text("SCALE = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    d._ensure_dist()
    impl = d.PackageImpl("pkgz")
    with pytest.raises(d.SpecError):
        impl.module("os")  # the driver reaches the task's package only

    def once(n):
        rec, err = d.run_one(_AllReduceDriver, impl, {"n": n}, _NoMeasure, 10)
        d.release_group(rec.group)
        assert err is None and rec.values["sync"].tolist() == [2.0] * n

    once(1)
    groups, threads = len(c10d._pg_map), len(os.listdir("/proc/self/task"))
    for n in range(2, 32):
        once(n)
    assert len(c10d._pg_map) == groups
    assert len(os.listdir("/proc/self/task")) <= threads + 2
