"""Mutant twins (run by the grader on the HOST, from infradev_grading.add_twins).

A mutant twin is a copy of a real official test or probe, in the same module, calling the package
exactly as the test does (same fixtures, same body), with one assertion perturbed so that an honest
body must fail: the last assertion at the top level of its body, `assert X, msg`, becomes
`assert (v := (X)) and not v, msg` (false whatever X is), or, when the body has no such assertion,
one failing assertion is appended at its top level. Twins must never pass (the grader's canaries
expect "not passed"). A submission that swaps test bodies for no-ops, or turns assertions off or
around, for the tests that reach its code, does the same to the twin, which then passes: `tampered`.

The old twin (twin_source: call the test, then fail on a constant) stays the fallback for a test
whose body cannot be copied safely. A body is copied only when nothing in it can skip the perturbed
assertion honestly: no `return` or `yield` anywhere in it (outside nested functions and classes).
"""

import ast


def _returns_or_yields(node):
    stack = list(node.body)
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await)):
            return True
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(n))
    return False


def _segment(lines, node):
    """The source text of `node` (lines: the module's text split with keepends)."""
    if node.lineno == node.end_lineno:
        return lines[node.lineno - 1].encode("utf-8")[node.col_offset:node.end_col_offset].decode("utf-8")
    first = lines[node.lineno - 1].encode("utf-8")[node.col_offset:].decode("utf-8")
    middle = lines[node.lineno:node.end_lineno - 1]
    last = lines[node.end_lineno - 1].encode("utf-8")[:node.end_col_offset].decode("utf-8")
    return first + "".join(middle) + last


def mutant_twin_source(module_text, installed, twin, rng):
    """The twin of the module-level test `installed` (its installed name) as text to append to the
    module, or None when it cannot be made safely (the caller then uses the plain twin)."""
    try:
        text = module_text.decode("utf-8") if isinstance(module_text, bytes) else module_text
        tree = ast.parse(text)
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return None
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == installed), None)
    if fn is None or fn.decorator_list or _returns_or_yields(fn) or not fn.body:
        return None
    lines = text.splitlines(keepends=True)
    body_lines = lines[fn.body[0].lineno - 1:fn.end_lineno]
    if fn.body[0].lineno == fn.lineno:  # `def f(): body` on one line
        return None
    indent = fn.body[0].col_offset
    if any(s.lineno == s.end_lineno and s.col_offset != indent for s in fn.body):
        return None
    var = "_" + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
    asserts = [s for s in fn.body if isinstance(s, ast.Assert)]
    pad = " " * indent
    base = fn.body[0].lineno
    if asserts:
        a = asserts[-1]
        # the statement must own its lines (no `x = 1; assert y`)
        if a.col_offset != indent or lines[a.end_lineno - 1].encode("utf-8")[a.end_col_offset:].strip() not in (b"",) and not lines[a.end_lineno - 1].encode("utf-8")[a.end_col_offset:].strip().startswith(b"#"):
            return None
        test = _segment(lines, a.test)
        msg = (", " + _segment(lines, a.msg)) if a.msg is not None else ""
        new = "%sassert (%s := (%s)) and not %s%s\n" % (pad, var, test, var, msg)
        out = body_lines[:a.lineno - base] + [new] + body_lines[a.end_lineno - base + 1:]
    else:
        x = rng.randint(2, 97)
        out = body_lines + ["%sassert %s == %d\n" % (pad, "len(%r)" % ("x" * x), x + rng.randint(1, 9))]
    if out and not out[-1].endswith("\n"):
        out[-1] += "\n"
    params = ", ".join(arg.arg for arg in fn.args.args)
    source = "\n\ndef %s(%s):\n%s" % (twin, params, "".join(out))
    try:
        ast.parse(source)
    except SyntaxError:
        return None
    return source
