"""Static scan of a task's probe files: which test carries which `probe(promise=..., kind=...)` marker.

Run by the task author's tools on the HOST over the task's own hidden probes (trusted content: the
files are parsed with `ast`, never imported or executed):

    python -I -S infradev_markers.py <probes-dir>

prints one JSON object: {"tests": [...], "errors": [...]}. A test is a `def test_*` at module level or
a method `test_*` of a class `Test*` (pytest's default collection rules), in a file `test_*.py` or
`*_test.py`. Its markers come, closest first, from its own decorators, its class's decorators and its
class's `pytestmark`, and the module's `pytestmark` (a mark or a list / tuple of marks), the order in
which pytest's `get_closest_marker` finds them. Each entry: file (relative to the probes dir), line,
name (`test_x` or `TestC::test_x`), and `marker`: null when no probe marker reaches the test, else
{"promise", "kind", "line", "problems", "world_sizes"} where problems lists what is not a plain string
literal and world_sizes is the marker's `world_sizes=[...]` (the world sizes the probe applies to; it
skips itself elsewhere), or null.

Stdlib only: this file runs wherever the grader runs, without the task's interpreter.
"""

import ast
import json
import os
import sys

SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache"}


def is_test_file(name):
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def probe_call(node):
    """The Call of `pytest.mark.probe(...)` / `mark.probe(...)` in a decorator or pytestmark item."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    if isinstance(func, ast.Attribute) and func.attr == "probe":
        base = func.value
        # pytest.mark.probe / mark.probe (after `from pytest import mark`)
        if isinstance(base, ast.Attribute) and base.attr == "mark":
            return node
        if isinstance(base, ast.Name) and base.id == "mark":
            return node
    return None


def marker_of(call):
    out = {"promise": None, "kind": None, "line": call.lineno, "problems": [], "world_sizes": None}
    names = ("promise", "kind")
    for index, arg in enumerate(call.args[:2]):
        # pytest.mark.probe("promise", "kind") positional form
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            out[names[index]] = arg.value
        else:
            out["problems"].append("argument %d is not a string literal" % (index + 1))
    for kw in call.keywords:
        if kw.arg in names:
            if isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
                out[kw.arg] = kw.value.value
            else:
                out["problems"].append("%s= is not a string literal" % kw.arg)
        elif kw.arg == "world_sizes":
            v = kw.value
            items = v.elts if isinstance(v, (ast.List, ast.Tuple)) else None
            if items and all(isinstance(i, ast.Constant) and type(i.value) is int and i.value >= 1 for i in items):
                out["world_sizes"] = [i.value for i in items]
            else:
                out["problems"].append("world_sizes= is not a non-empty list of integer literals >= 1")
        elif kw.arg is None:
            out["problems"].append("**kwargs cannot be checked")
        else:
            out["problems"].append("unknown keyword %s=" % kw.arg)
    for name in names:
        if out[name] is None and not any(p.startswith(name) for p in out["problems"]):
            out["problems"].append("no %s=" % name)
    return out


def marks_in(value):
    """Probe calls in a pytestmark value: one mark, or a list / tuple of marks."""
    items = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    return [c for c in (probe_call(i) for i in items) if c is not None]


def pytestmark_of(body):
    found = []
    for stmt in body:
        targets = []
        if isinstance(stmt, ast.Assign):
            targets = [t for t in stmt.targets if isinstance(t, ast.Name)]
            value = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
            targets = [stmt.target]
            value = stmt.value
        if any(t.id == "pytestmark" for t in targets):
            found = marks_in(value)  # the last assignment wins, as at import time
    return found


def decorator_marks(node):
    return [c for c in (probe_call(d) for d in node.decorator_list) if c is not None]


def scan_file(root, rel, tests, errors):
    path = os.path.join(root, rel)
    try:
        with open(path, "rb") as handle:
            source = handle.read()
        tree = ast.parse(source, filename=rel)
    except (OSError, SyntaxError, ValueError) as exc:
        line = getattr(exc, "lineno", None)
        errors.append({"file": rel, "line": line, "message": "cannot parse: %s" % (exc.msg if isinstance(exc, SyntaxError) else exc)})
        return
    module_marks = pytestmark_of(tree.body)

    def add(node, name, closest):
        call = closest[0] if closest else None
        tests.append({"file": rel, "line": node.lineno, "name": name, "marker": marker_of(call) if call else None})

    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            add(node, node.name, decorator_marks(node) + module_marks)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            class_marks = decorator_marks(node) + pytestmark_of(node.body)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name.startswith("test"):
                    add(item, "%s::%s" % (node.name, item.name), decorator_marks(item) + class_marks + module_marks)


def scan(root):
    tests, errors = [], []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS)
        for name in sorted(filenames):
            if is_test_file(name):
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                scan_file(root, rel, tests, errors)
    return {"tests": tests, "errors": errors}


def main(argv):
    if len(argv) != 1 or not os.path.isdir(argv[0]):
        sys.stderr.write("usage: infradev_markers.py <probes-dir>\n")
        return 2
    sys.stdout.write(json.dumps(scan(argv[0])) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
