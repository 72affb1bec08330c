"""infradev_mutate.py on small trees: every operator, confinement to the golden patch's lines, the
skip rules, hollow, contract, leaks and timeouts. The script runs as the grader runs it (-I -S)."""

import ast
import difflib
import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "python", "host", "infradev_mutate.py")
ID_RE = re.compile(r"^[\w/.-]+\.py:(<module>|[\w.]+):(arith|cmp|boundary|bool|not|const|drop-stmt|drop-kw|negate|early-return|drop-filter|dtype|swap-call|dup-collective)#[1-9]\d*$")


def write_tree(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text).lstrip("\n"))
    return str(root)


def trees(tmp_path, base, post):
    return write_tree(tmp_path / "base", base), write_tree(tmp_path / "post", post)


def run(*args, expect=0):
    r = subprocess.run([sys.executable, "-I", "-S", SCRIPT, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == expect, r.stderr
    return json.loads(r.stdout) if expect == 0 else r


BASE_F = '''
def old(a, b):
    return a + b < 2 and not a


def f(x, y, g=None):
    """Doc with + and 1 < 2."""
    z = x + y
    return z
'''

POST_F = '''
def old(a, b):
    return a + b < 2 and not a


def f(x, y, g=None):
    """Doc with + and 1 < 2."""
    z = x + y
    # a comment the mutants keep
    w = x * y if x <= y or not g else 0
    if w > 3:
        call(
            w,
            group=g,
        )
    return z
'''
# 1-based lines of POST_F that the "golden patch" adds
ADDED = {8, 9, 10, 11, 12, 13, 14}
UNCHANGED_SITES = {2, 7}  # `a + b < 2 and not a` and `z = x + y` have sites of every kind but stay as they are


@pytest.fixture
def f_mutants(tmp_path):
    base, post = trees(tmp_path, {"m.py": BASE_F}, {"m.py": POST_F})
    out = run("mutants", "--base", base, "--post", post)
    with open(os.path.join(post, "m.py")) as fh:
        return out, fh.read()


def changed_lines(original, mutated):
    """Lines of `original` a mutant rewrites, and the original line before which it inserts lines."""
    sm = difflib.SequenceMatcher(None, original.split("\n"), mutated.split("\n"), autojunk=False)
    out = set()
    for tag, i1, i2, _j1, _j2 in sm.get_opcodes():
        if tag in ("replace", "delete"):
            out.update(range(i1 + 1, i2 + 1))
        elif tag == "insert":
            out.add(i1 + 1)
    return out


@pytest.mark.parametrize("operator", ["arith", "cmp", "boundary", "bool", "not", "const", "drop-stmt", "drop-kw", "negate", "early-return"])
def test_each_operator_applies_differs_and_stays_in_the_added_lines(f_mutants, operator):
    out, original = f_mutants
    mine = [m for m in out["mutants"] if m["operator"] == operator]
    assert mine, "no %s mutant in %s" % (operator, [m["id"] for m in out["mutants"]])
    for m in mine:
        assert ID_RE.match(m["id"]), m["id"]
        assert m["id"].startswith("m.py:f:%s#" % operator)
        ast.parse(m["source"])
        assert m["source"] != original
        assert "# a comment the mutants keep" in m["source"]  # a text edit, not an unparse
        touched = changed_lines(original, m["source"])
        if operator == "early-return":
            assert touched == {7}  # inserted before `z = x + y`, the first statement after the docstring
            assert m["source"].split("\n")[6] == "    return"
        else:
            assert touched and touched <= ADDED, (m["id"], touched)
            assert not touched & UNCHANGED_SITES


def test_specific_edits(f_mutants):
    out, original = f_mutants
    by = {m["id"]: m for m in out["mutants"]}
    line9 = original.split("\n")[8]
    assert by["m.py:f:arith#1"]["source"].split("\n")[8] == line9.replace("x * y", "x / y")
    assert by["m.py:f:boundary#1"]["source"].split("\n")[8] == line9.replace("x <= y", "x < y")
    assert by["m.py:f:bool#1"]["source"].split("\n")[8] == line9.replace(" or ", " and ")
    assert by["m.py:f:not#1"]["source"].split("\n")[8] == line9.replace("not g", "g")
    negated = [m["source"].split("\n")[9] for m in out["mutants"] if m["operator"] == "negate"]
    assert "    if not (w > 3):" in negated
    kw = [m for m in out["mutants"] if m["operator"] == "drop-kw"]
    assert len(kw) == 1 and "group=" not in kw[0]["source"] and "call(\n            w,\n        )" in kw[0]["source"]
    # the multi-line call dropped whole: `pass` at its indentation, the lines after it untouched
    dropped = [m for m in out["mutants"] if m["operator"] == "drop-stmt" and m["line"] == 11]
    assert len(dropped) == 1 and "    if w > 3:\n        pass\n    return z" in dropped[0]["source"]
    consts = {m["replacement"] for m in out["mutants"] if m["operator"] == "const" and m["line"] == 10}
    assert consts == {"4", "2"}
    assert by["m.py:f:cmp#1"]["description"] == "line 9: '<=' -> '>='"
    change = by["m.py:f:arith#1"]["change"].split("\n")
    assert change[:2] == ["--- golden/m.py", "+++ mutant/m.py"]
    assert [l for l in change if l and l[0] in "+-" and l[:3] not in ("---", "+++")] == ["-" + line9, "+" + line9.replace("x * y", "x / y")]


def test_ids_are_stable_and_unique(tmp_path, f_mutants):
    out, _ = f_mutants
    ids = [m["id"] for m in out["mutants"]]
    assert len(ids) == len(set(ids))
    base, post = tmp_path / "base", tmp_path / "post"
    again = run("mutants", "--base", str(base), "--post", str(post), "--seed", "7")
    assert sorted(m["id"] for m in again["mutants"]) == sorted(ids)
    same = {m["id"]: m["source"] for m in again["mutants"]}
    assert all(same[m["id"]] == m["source"] for m in out["mutants"])


def test_a_new_file_is_mutated_whole_and_excluded_dirs_are_not(tmp_path):
    base, post = trees(tmp_path, {"pkg/__init__.py": ""}, {
        "pkg/__init__.py": "",
        "pkg/new.py": "def g(n):\n    return n - 1\n",
        "tests/test_new.py": "def test_g():\n    assert 1 + 1 == 2\n",
    })
    out = run("mutants", "--base", base, "--post", post, "--exclude-dir", "tests")
    files = {m["file"] for m in out["mutants"]}
    assert files == {"pkg/new.py"}
    assert "pkg/new.py:g:arith#1" in {m["id"] for m in out["mutants"]}


def test_same_ast_and_duplicate_mutants_are_skipped_and_counted(tmp_path):
    base, post = trees(tmp_path, {"m.py": "X = 1\n"}, {"m.py": "X = 1\nBIG = 9007199254740992.0\n\n\ndef h(x):\n    return not not x\n"})
    out = run("mutants", "--base", base, "--post", post)
    # 2**53 + 1 is 2**53 again as a float: same AST. Dropping either `not` of `not not x` gives one text.
    assert out["skipped"]["same_ast"] == 1
    assert out["skipped"]["duplicate"] == 1
    big = sorted(m["replacement"] for m in out["mutants"] if m["line"] == 2 and m["operator"] == "const")
    assert big == ["9007199254740991.0", "None"]
    assert len([m for m in out["mutants"] if m["operator"] == "not"]) == 1
    texts = [m["source"] for m in out["mutants"]]
    assert len(texts) == len(set(texts))


def test_messages_annotations_decorators_and_imports_are_left_alone(tmp_path):
    post = '''
    import os.path as p2
    from typing import List


    @decorate(3)
    def k(v: List[int] = None) -> "int + 1":
        """1 + 1"""
        if v is None:
            raise ValueError("need 2 + 2 values, got %d" % len(v or []))
        return "a" + f"{1 + 1}"
    '''
    base, post = trees(tmp_path, {"m.py": "\n"}, {"m.py": post})
    out = run("mutants", "--base", base, "--post", post)
    lines = {(m["operator"], m["line"]) for m in out["mutants"]}
    assert ("drop-stmt", 9) in lines  # the raise itself is dropped
    # early-return names the def's line; nothing else touches the imports, decorator, signature or docstring
    assert not [m for m in out["mutants"] if m["line"] in (1, 2, 5, 6, 7) and m["operator"] != "early-return"], sorted(lines)
    assert not [m for m in out["mutants"] if m["line"] == 9 and m["operator"] != "drop-stmt"]
    # only the `+` between the strings: nothing inside the f-string, no string constant
    assert [(m["operator"], m["original"]) for m in out["mutants"] if m["line"] == 10] == [("arith", "+")]


def test_a_post_file_that_does_not_parse_exits_2_naming_it(tmp_path):
    base, post = trees(tmp_path, {"m.py": "X = 1\n"}, {"m.py": "def broken(:\n"})
    r = run("mutants", "--base", base, "--post", post, expect=2)
    assert "m.py" in r.stderr and "does not parse" in r.stderr and len(r.stderr.strip().split("\n")) == 1


HOLLOW_BASE = '''
def keep():
    return 1


def changed(x):
    return x


def one_line(x): return x
'''
HOLLOW_POST = '''
def keep():
    return 1


def changed(x, y=0):
    """Now adds."""
    return x + y


def added(a):
    """Doc."""
    return a * 2


def one_line(x):
    return x + 1


class K:
    LIMIT = 4

    def m(self):
        return 3
'''


def test_hollow_stubs_added_functions_and_reverts_changed_ones(tmp_path):
    base, post = trees(tmp_path, {"mod.py": HOLLOW_BASE}, {"mod.py": HOLLOW_POST})
    out = run("hollow", "--base", base, "--post", post)
    assert out["stubbed"] == ["mod.py:added", "mod.py:K.m"]
    assert out["reverted"] == ["mod.py:changed"]
    assert out["not_reverted"] == ["mod.py:one_line"]
    (f,) = out["files"]
    path = tmp_path / "hollow_mod.py"
    path.write_text(f["source"])
    spec = importlib.util.spec_from_file_location("hollow_mod", str(path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.keep() == 1
    assert mod.changed(2, 5) == 2  # base's body: y is accepted and ignored
    assert mod.added.__doc__ == "Doc."
    with pytest.raises(NotImplementedError, match="^added$"):
        mod.added(1)
    with pytest.raises(NotImplementedError, match=r"^K\.m$"):
        mod.K().m()
    assert mod.K.LIMIT == 4


CONTRACT_BASE = {"pkg/__init__.py": "", "pkg/old.py": "def fn(a):\n    return a\n"}
CONTRACT_POST = {
    "pkg/__init__.py": "",
    "pkg/old.py": "def fn(a, scale=1):\n    return a * scale\n",
    "pkg/new.py": "def used():\n    return 1\n\n\ndef unused():\n    return 2\n",
}


def test_contract_finds_referenced_symbols_only(tmp_path):
    base, post = trees(tmp_path, CONTRACT_BASE, CONTRACT_POST)
    refs = write_tree(tmp_path / "refs", {"tests/test_x.py": '''
        from pkg.new import used
        from pkg import old


        def test_it():
            assert used() == 1
            assert old.fn(2, scale=3) == 6
        '''})
    out = run("contract", "--base", base, "--post", post, "--refs", refs)
    by = {(s["name"], s["kind"]): s for s in out["symbols"]}
    assert set(by) == {("pkg.new", "module"), ("used", "function"), ("scale", "parameter")}
    assert by[("used", "function")]["defined_at"] == "pkg/new.py:1"
    assert by[("used", "function")]["referenced_at"] == ["tests/test_x.py:1", "tests/test_x.py:6"]
    assert by[("scale", "parameter")]["referenced_at"] == ["tests/test_x.py:7"]
    assert "pkg.new.unused" in out["unreferenced"]


LEAK_POST = {"m.py": '''
def average(grads, world):
    total = sum(g.sum() for g in grads)
    scaled = total / world_size_of(world)
    result = scaled.clone().detach()
    return result
'''}


def test_leaks_find_a_three_line_copy_and_not_a_two_line_one(tmp_path):
    base, post = trees(tmp_path, {"m.py": "\n"}, LEAK_POST)
    three = tmp_path / "three.md"
    three.write_text("# Task\n\nDo this:\n\n```python\ntotal = sum(g.sum() for g in grads)\n  scaled  = total / world_size_of(world)\n"
                     "result = scaled.clone().detach()\n```\n")
    two = tmp_path / "two.md"
    two.write_text("# Task\n\n    total = sum(g.sum() for g in grads)\n    scaled = total / world_size_of(world)\n\nThen return it.\n")
    leaks = run("leaks", "--base", base, "--post", post, "--prompt", str(three))["leaks"]
    assert leaks == [{"file": "m.py", "line": 2, "lines": 3, "prompt_line": 6,
                      "text": "total = sum(g.sum() for g in grads)\nscaled = total / world_size_of(world)\nresult = scaled.clone().detach()"}]
    assert run("leaks", "--base", base, "--post", post, "--prompt", str(two))["leaks"] == []


def test_timeouts_evaluate_constant_timedeltas(tmp_path):
    repo = write_tree(tmp_path / "repo", {"pkg/rt.py": '''
        import datetime
        from datetime import timedelta
        import torch.distributed as dist


        def setup(t):
            dist.init_process_group("gloo", timeout=timedelta(seconds=30))
            dist.new_group([0, 1], timeout=datetime.timedelta(minutes=2, seconds=5))
            dist.init_process_group("gloo", timeout=timedelta(seconds=t))
            dist.init_process_group("gloo")


        LIMIT = 60


        def with_defaults(limit_sec=90.0, *, minutes=LIMIT / 60):
            dist.init_process_group("gloo", timeout=timedelta(seconds=limit_sec))
            dist.new_group([0], timeout=timedelta(minutes=minutes, seconds=LIMIT))


        def shadowed():
            LIMIT = compute()
            dist.new_group([0], timeout=timedelta(seconds=LIMIT))
        '''})
    out = run("timeouts", "--repo", repo)["timeouts"]
    assert [(t["file"], t["line"], t["seconds"], t.get("assumes")) for t in out] == [
        ("pkg/rt.py", 7, 30, None), ("pkg/rt.py", 8, 125, None), ("pkg/rt.py", 9, None, None),
        ("pkg/rt.py", 17, 90.0, "the default of limit_sec"), ("pkg/rt.py", 18, 120.0, "the default of minutes"),
        ("pkg/rt.py", 23, None, None)]
    assert out[0]["call"] == 'dist.init_process_group("gloo", timeout=timedelta(seconds=30))'


WIDER_BASE = """
import torch
import torch.distributed as dist


def old():
    return 1
"""

WIDER_POST = """
import torch
import torch.distributed as dist


def old():
    return 1


def plan(module, group):
    trainable = [p for p in module.parameters() if p.requires_grad]
    index = torch.zeros(3, dtype=torch.int16)
    for name, sub in module.named_modules():
        dist.all_reduce(index, group=group)
    return trainable
"""


def test_wider_operators_filter_dtype_sibling_call_and_duplicate_collective(tmp_path):
    base, post = trees(tmp_path, {"w.py": WIDER_BASE}, {"w.py": WIDER_POST})
    out = run("mutants", "--base", base, "--post", post)
    by_op = {}
    for m in out["mutants"]:
        by_op.setdefault(m["operator"], []).append(m)
        assert ID_RE.match(m["id"]), m["id"]
    descs = {op: sorted(m["description"] for m in ms) for op, ms in by_op.items()}
    assert descs["drop-filter"] == ["line 10: drop filter 'if p.requires_grad'"]
    assert descs["dtype"] == ["line 11: torch.int16 -> torch.int32"]
    assert descs["swap-call"] == ["line 12: named_modules -> named_children"]
    assert descs["dup-collective"] == ["line 13: issue 'dist.all_reduce(index, group=group)' twice"]
    dup = by_op["dup-collective"][0]["change"]
    assert dup.count("dist.all_reduce(index, group=group)") == 2  # the context line, and the added copy
    assert "+        dist.all_reduce(index, group=group)" in dup
    assert "-    trainable = [p for p in module.parameters() if p.requires_grad]" in by_op["drop-filter"][0]["change"]
    assert "+    trainable = [p for p in module.parameters()]" in by_op["drop-filter"][0]["change"]
