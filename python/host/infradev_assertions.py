#!/usr/bin/env python3
"""Classify the assertions in the test files an agent wrote, for `infradev report` (the paper's Figure 6).

Runs on the host over submissions' patch text; the code is parsed with the standard library's `ast`
and never imported or run. Input on stdin: {"patches": [{"id": ..., "patch": "<unified diff>"}]}.
Output on stdout: {"patches": [{"id", "files": [...], "counts": {class: n}, "errors": [...]}]}.

A test file is a .py file the patch adds or changes whose name is test_*.py / *_test.py or that lies
under a tests/ or test/ folder. An added file is parsed whole. A changed file is known only through
its hunks (the campaign folder has no base tree): each hunk's new side is parsed on its own, trimmed
at the edges until it parses, and only assertions that touch an added line count as the agent's.

An assertion is an `assert` statement, or a call whose name starts with `assert` (unittest's
self.assertX, torch.testing.assert_close, np.testing.assert_allclose, mock's assert_called...), or
pytest.raises / pytest.warns (call or `with`). A call inside an `assert` is part of that assertion.
Classes, first match wins (why this order: a check of memory or time is the rarest and the one the
paper counts, so it wins even when written with approx; an expected error is never a value check):
  error_path  pytest.raises / warns, assertRaises(Regex), assertWarns(Regex)
  resource    names a memory / time / bytes quantity (max_memory_allocated, perf_counter, peak_bytes,
              elapsed, measure(), ...)
  numerical   assert_close, allclose, isclose, approx, assert_allclose, assertAlmostEqual, torch.equal,
              array_equal, or abs(a - b) compared with a tolerance
  structure   isinstance, issubclass, hasattr, callable, len, type, signature, .shape, .dtype, .ndim,
              .size(), assertIsInstance
  functional  everything else
Stdlib only, Python >= 3.8.
"""

import ast
import json
import re
import sys
import textwrap

CLASSES = ("functional", "structure", "numerical", "error_path", "resource")
MAX_PATCH_CHARS = 8 * 1024 * 1024
# A hunk that does not parse is trimmed at its edges: at most this many parse attempts per hunk.
MAX_TRIM_ATTEMPTS = 4000

ERROR_PATH_CALLS = {"raises", "warns", "deprecated_call", "assertRaises", "assertRaisesRegex", "assertRaisesRegexp",
                    "assertWarns", "assertWarnsRegex"}
NUMERICAL_CALLS = {"assert_close", "assert_allclose", "allclose", "isclose", "approx", "assert_almost_equal",
                   "assert_array_almost_equal", "assert_approx_equal", "assert_array_almost_equal_nulp",
                   "assert_array_max_ulp", "assert_array_equal", "array_equal", "assertAlmostEqual",
                   "assertNotAlmostEqual", "assertAlmostEquals", "assert_equal_numerically"}
STRUCTURE_CALLS = {"isinstance", "issubclass", "hasattr", "callable", "len", "type", "signature",
                   "assertIsInstance", "assertNotIsInstance", "assertHasAttr", "assertNotHasAttr"}
STRUCTURE_ATTRS = {"shape", "dtype", "ndim", "size", "__class__", "__annotations__"}
# Words of an identifier (split at '_' and lower/upper case changes) that name a resource quantity.
RESOURCE_WORDS = {"memory", "mem", "bytes", "nbytes", "byte", "time", "elapsed", "duration", "latency", "peak",
                  "rss", "throughput", "seconds", "secs", "ms", "flops", "allocated", "reserved", "measure",
                  "perf", "wall", "bandwidth", "collective", "collectives", "comm"}
RESOURCE_NAMES = {"perf_counter", "monotonic", "process_time", "getrusage", "max_memory_allocated",
                  "memory_allocated", "max_memory_reserved", "memory_reserved", "memory_stats"}
WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
TEST_NAME_RE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test)\.py$")


def is_test_file(path):
    if not path.endswith(".py"):
        return False
    parts = path.split("/")
    return bool(TEST_NAME_RE.search(path)) or any(p in ("tests", "test") for p in parts[:-1])


def callee_name(call):
    f = call.func
    if isinstance(f, ast.Name):
        return f.id
    if isinstance(f, ast.Attribute):
        return f.attr
    return None


def words(name):
    out = set()
    for part in name.split("_"):
        out.update(w.lower() for w in WORD_RE.findall(part))
    return out


def names_in(node):
    """Every identifier a node uses: names, attributes, keyword names."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            yield n.id
        elif isinstance(n, ast.Attribute):
            yield n.attr
        elif isinstance(n, ast.keyword) and n.arg:
            yield n.arg


def is_tolerance_compare(node):
    """abs(a - b) < tol (either side), or (a - b).abs() < tol."""
    if not isinstance(node, ast.Compare):
        return False
    for side in [node.left] + list(node.comparators):
        if isinstance(side, ast.Call):
            name = callee_name(side)
            inner = side.args[0] if name == "abs" and side.args else getattr(side.func, "value", None) if name == "abs" else None
            if isinstance(inner, ast.BinOp) and isinstance(inner.op, ast.Sub):
                return True
    return False


def classify(node):
    """The class of one assertion node (an Assert, or an assertion Call), with the reason."""
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call)]
    call_names = [callee_name(c) for c in calls]
    if isinstance(node, ast.Call) and callee_name(node) in ERROR_PATH_CALLS:
        return "error_path", callee_name(node)
    for name in names_in(node):
        if name in RESOURCE_NAMES or words(name) & RESOURCE_WORDS:
            return "resource", name
    for c, name in zip(calls, call_names):
        if name in NUMERICAL_CALLS:
            return "numerical", name
        # torch.equal / np.equal compare values; a bare equal() of one's own is not known to be numeric.
        if name == "equal" and isinstance(c.func, ast.Attribute) and isinstance(c.func.value, ast.Name) and c.func.value.id in ("torch", "np", "numpy"):
            return "numerical", "%s.equal" % c.func.value.id
    for n in ast.walk(node):
        if is_tolerance_compare(n):
            return "numerical", "abs(a - b) vs tolerance"
    for name in call_names:
        if name in STRUCTURE_CALLS:
            return "structure", name
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and n.attr in STRUCTURE_ATTRS:
            return "structure", n.attr
    return "functional", None


def is_assertion_call(call):
    name = callee_name(call)
    if name is None:
        return False
    return name in ERROR_PATH_CALLS or name.startswith("assert")


def assertions_in(tree):
    """Assertion nodes in source order; a call inside an assert (or inside an assertion call) is not counted again."""
    found = []

    def visit(node, inside):
        if not inside and isinstance(node, ast.Assert):
            found.append(node)
            inside = True
        elif not inside and isinstance(node, ast.Call) and is_assertion_call(node):
            found.append(node)
            inside = True
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, False)
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    return found


def parse_patch(patch):
    """Files of a unified diff: [{path, added: bool, hunks: [[(new_lineno, text, is_added)]]}].

    A hunk is read by the line counts of its @@ header, so a removed line that starts with "-- "
    or an added one that starts with "++ " is never taken for a file header.
    """
    files = []
    cur = None
    old_path = None
    hunk_re = re.compile(r"^@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
    lines = patch.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("diff --git "):
            cur, old_path = None, None
        elif line.startswith("--- "):
            old_path = line[4:].split("\t")[0]
        elif line.startswith("+++ "):
            new_path = line[4:].split("\t")[0]
            cur = None
            if new_path != "/dev/null":
                path = new_path[2:] if new_path.startswith("b/") else new_path
                cur = {"path": path, "added": old_path == "/dev/null", "hunks": []}
                files.append(cur)
        else:
            m = hunk_re.match(line)
            if not m or cur is None:
                continue
            old_left = int(m.group(1)) if m.group(1) is not None else 1
            new_no = int(m.group(2))
            new_left = int(m.group(3)) if m.group(3) is not None else 1
            hunk = []
            cur["hunks"].append(hunk)
            while (old_left > 0 or new_left > 0) and i < len(lines):
                body = lines[i]
                i += 1
                tag, text = (body[:1], body[1:]) if body else (" ", "")
                if tag == "+":
                    hunk.append((new_no, text, True))
                    new_no += 1
                    new_left -= 1
                elif tag == "-":
                    old_left -= 1
                elif tag == " ":
                    hunk.append((new_no, text, False))
                    new_no += 1
                    new_left -= 1
                    old_left -= 1
                elif tag == "\\":
                    continue
                else:
                    i -= 1
                    break
    return files


def try_parse(lines):
    text = textwrap.dedent("\n".join(lines))
    try:
        return ast.parse(text), text
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def parse_segments(rows):
    """Parse a hunk's new side: the longest leading-trimmed, trailing-trimmed slices that parse, left to right."""
    segments = []
    attempts = 0
    start = 0
    n = len(rows)
    while start < n:
        got = None
        for head in range(start, n):
            for tail in range(n, head, -1):
                attempts += 1
                if attempts > MAX_TRIM_ATTEMPTS:
                    return segments
                parsed = try_parse([r[1] for r in rows[head:tail]])
                if parsed is not None and any(r[1].strip() for r in rows[head:tail]):
                    got = (head, tail, parsed[0])
                    break
            if got:
                break
        if not got:
            break
        segments.append(got)
        start = got[1]
    return segments


def analyse_file(f):
    result = {"path": f["path"], "status": "added" if f["added"] else "changed", "assertions": [], "unparsed_added_lines": 0}
    added = {r[0] for h in f["hunks"] for r in h if r[2]}
    if not added:
        return result
    if f["added"]:
        rows = [r for h in f["hunks"] for r in h]
        whole = try_parse([r[1] for r in rows])
        pieces = [(0, len(rows), whole[0])] if whole else parse_segments(rows)
        groups = [(rows, pieces)]
    else:
        groups = [(h, parse_segments(h)) for h in f["hunks"]]
    covered = set()
    for rows, pieces in groups:
        for head, tail, tree in pieces:
            span = rows[head:tail]
            covered.update(r[0] for r in span if r[2])
            for node in assertions_in(tree):
                first = span[node.lineno - 1][0]
                last = span[min((getattr(node, "end_lineno", None) or node.lineno), len(span)) - 1][0]
                if not any(no in added for no in range(first, last + 1)):
                    continue
                kind, why = classify(node)
                text = span[node.lineno - 1][1].strip()
                result["assertions"].append({"line": first, "class": kind, "why": why, "code": text[:160]})
    result["unparsed_added_lines"] = len([no for no in added if no not in covered and no is not None])
    return result


def analyse_patch(patch):
    counts = {c: 0 for c in CLASSES}
    files = []
    errors = []
    if len(patch) > MAX_PATCH_CHARS:
        return {"files": [], "counts": counts, "errors": ["patch over %d characters: not analysed" % MAX_PATCH_CHARS]}
    for f in parse_patch(patch):
        if not is_test_file(f["path"]):
            continue
        try:
            r = analyse_file(f)
        except Exception as e:  # a hostile or odd file must not lose the other files' counts
            errors.append("%s: %s: %s" % (f["path"], type(e).__name__, str(e)[:200]))
            continue
        for a in r["assertions"]:
            counts[a["class"]] += 1
        files.append(r)
    return {"files": files, "counts": counts, "errors": errors}


def main():
    try:
        request = json.load(sys.stdin)
        patches = request["patches"]
    except (ValueError, KeyError, TypeError) as e:
        sys.stderr.write("infradev_assertions: stdin must be {\"patches\": [{\"id\", \"patch\"}]}: %s\n" % e)
        return 2
    out = []
    for p in patches:
        r = analyse_patch(str(p.get("patch", "")))
        r["id"] = p.get("id")
        out.append(r)
    json.dump({"classes": list(CLASSES), "patches": out}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
