"""infradev_assertions.py (Figure 6's classifier) on small patches: each class, nested and unittest-style
assertions, added vs changed files (only the agent's own lines count), odd diffs. The script runs as
the report runs it (-I -S, JSON on stdin)."""

import json
import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "python", "host", "infradev_assertions.py")


def run(patches):
    r = subprocess.run([sys.executable, "-I", "-S", SCRIPT], input=json.dumps({"patches": patches}), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["patches"]


def added_file(path, text):
    lines = textwrap.dedent(text).lstrip("\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    body = "\n".join("+" + l for l in lines)
    return "diff --git a/%s b/%s\nnew file mode 100644\n--- /dev/null\n+++ b/%s\n@@ -0,0 +1,%d @@\n%s\n" % (path, path, path, len(lines), body)


def classes_of(text, path="tests/test_x.py"):
    [p] = run([{"id": "r", "patch": added_file(path, text)}])
    assert p["errors"] == []
    return [a["class"] for f in p["files"] for a in f["assertions"]]


def test_each_class_once():
    got = classes_of("""
        import time, pytest, torch
        def test_a(out, ref, m):
            assert out == 3
            assert isinstance(out, int)
            torch.testing.assert_close(out, ref)
            with pytest.raises(ValueError):
                f()
            assert m.peak_bytes < 10
    """)
    assert got == ["functional", "structure", "numerical", "error_path", "resource"]


def test_numerical_forms():
    got = classes_of("""
        import math, numpy as np, pytest, torch
        def test_n(a, b):
            assert torch.allclose(a, b)
            assert math.isclose(a, b, rel_tol=1e-6)
            assert a == pytest.approx(b)
            np.testing.assert_allclose(a, b)
            assert torch.equal(a, b)
            assert abs(a - b) < 1e-6
    """)
    assert got == ["numerical"] * 6


def test_structure_forms():
    got = classes_of("""
        def test_s(x, mod):
            assert hasattr(mod, "f")
            assert len(x) == 3
            assert x.shape == (2, 3)
            assert x.dtype == "float32"
            assert type(x) is list
            assert callable(mod.f)
    """)
    assert got == ["structure"] * 6


def test_resource_wins_over_numerical_and_names_the_quantity():
    got = classes_of("""
        import time, torch, pytest
        def test_r(before, after):
            assert torch.cuda.max_memory_allocated() < before
            t0 = time.perf_counter()
            assert time.perf_counter() - t0 < 1.0
            assert after.comm_bytes == pytest.approx(before.comm_bytes / 2)
            assert after.elapsed_s < before.elapsed_s
    """)
    assert got == ["resource"] * 4


def test_timeout_and_sizes_are_not_resources():
    # "timeout" is one word, and a tensor's size is its structure, not a memory measurement.
    got = classes_of("""
        def test_t(cfg, x):
            assert cfg.timeout == 30
            assert x.size(0) == 4
    """)
    assert got == ["functional", "structure"]


def test_nested_assertions_count_once_each():
    got = classes_of("""
        import pytest, torch
        class TestDeep:
            def test_loop(self, xs):
                for x in xs:
                    if x is not None:
                        with open("f") as fh:
                            assert x > 0
                def inner():
                    assert torch.allclose(x, x)
                inner()
        def test_call_inside_assert(a, b):
            # one assertion: the allclose call inside the assert is part of it
            assert torch.allclose(a, b) and isinstance(a, object)
            with pytest.raises(RuntimeError):
                assert a.boom()
    """)
    assert got == ["functional", "numerical", "numerical", "error_path", "functional"]


def test_unittest_style():
    got = classes_of("""
        import unittest
        class T(unittest.TestCase):
            def test_u(self):
                self.assertEqual(f(), 1)
                self.assertTrue(f())
                self.assertIsInstance(f(), int)
                self.assertAlmostEqual(f(), 1.0)
                self.assertRaises(TypeError, f, None)
                with self.assertRaisesRegex(ValueError, "bad"):
                    f("x")
                with self.assertWarns(UserWarning):
                    f("w")
    """)
    assert got == ["functional", "functional", "structure", "numerical", "error_path", "error_path", "error_path"]


def test_only_test_files_count():
    patch = added_file("pkg/ops.py", "def f():\n    assert True\n") + added_file("pkg/ops_test.py", "def test_f():\n    assert True\n") + added_file("tests/helpers.py", "def check(x):\n    assert x\n")
    [p] = run([{"id": "r", "patch": patch}])
    assert [f["path"] for f in p["files"]] == ["pkg/ops_test.py", "tests/helpers.py"]
    assert p["counts"]["functional"] == 2


CHANGED = """diff --git a/tests/test_ops.py b/tests/test_ops.py
index 82f26a0..e9b98c4 100644
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -7,3 +7,12 @@ from tinyinfra.ops import all_sum
 def test_all_sum():
     out = all_sum(torch.ones(3))
     assert torch.equal(out, torch.full((3,), 2.0))
+
+
+def test_all_mean_value():
+    out = all_mean(torch.ones(3))
+    assert out.sum() > 0
+    assert torch.isclose(out[0], out[1])
+    assert (
+        out.shape == (3,)
+    )
@@ -40,4 +49,5 @@ def test_far_below():
     x = 1
     if x:
-        assert x == 1
+        assert x == 2
+        assert isinstance(x, int)
     return x
"""


def test_changed_file_counts_only_added_lines_with_real_line_numbers():
    [p] = run([{"id": "r", "patch": CHANGED}])
    [f] = p["files"]
    assert f["status"] == "changed"
    # The context line's torch.equal is the base's, not the agent's; the multi-line assert counts once.
    assert [(a["line"], a["class"]) for a in f["assertions"]] == [(14, "functional"), (15, "numerical"), (16, "structure"), (51, "functional"), (52, "structure")]
    assert f["unparsed_added_lines"] == 0


def test_a_removed_line_that_looks_like_a_header_is_not_one():
    patch = """diff --git a/tests/test_a.py b/tests/test_a.py
--- a/tests/test_a.py
+++ b/tests/test_a.py
@@ -1,2 +1,2 @@
--- a/x
+assert 1 == 1
 y = 2
"""
    [p] = run([{"id": "r", "patch": patch}])
    assert [f["path"] for f in p["files"]] == ["tests/test_a.py"]
    assert p["counts"]["functional"] == 1


def test_unparseable_and_empty_inputs_are_reported_not_fatal():
    broken = added_file("tests/test_b.py", "def test_b(:\n    assert 1\n")
    out = run([{"id": "a", "patch": broken}, {"id": "b", "patch": ""}, {"id": "c", "patch": "not a diff at all"}])
    assert [p["id"] for p in out] == ["a", "b", "c"]
    # The broken def line is left out; the assert under it still parses once trimmed.
    assert out[0]["files"][0]["unparsed_added_lines"] == 1 and out[0]["counts"]["functional"] == 1
    assert sum(out[1]["counts"].values()) == 0 and out[1]["files"] == []
    assert out[2]["files"] == []


def test_bad_stdin_is_one_line_exit_2():
    r = subprocess.run([sys.executable, "-I", "-S", SCRIPT], input="[]", capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "patches" in r.stderr
