#!/usr/bin/env python3
"""Analysis of a task's golden patch with the standard library's `ast`, for `infradev task check`.

Runs on the host over the task author's trusted files only (the base tree and the same tree with
the golden patch applied; never a submission). JSON on stdout; exit 2 with one line on stderr that
names the file when an input cannot be read or parsed.

  mutants  --base B --post P [--exclude-dir D]... [--seed S]
      One-spot mutants of the code the golden patch adds or changes (operators below), each as the
      whole mutated file ("source") and as a diff from the golden file ("change"). Ids: <file>:<qualname or <module>>:<operator>#<n>, n counting that
      operator's mutants in that def in source order (one per site; `const` has one per
      replacement value), numbered before any is skipped so that an id stays put while its
      function is unchanged. --seed shuffles the output order (a budgeted run samples from the
      front); the ids do not depend on it.
  hollow   --base B --post P [--exclude-dir D]...
      Functions P adds raise NotImplementedError; functions P changes get B's body back.
  contract --base B --post P --refs DIR [--refs DIR]... [--exclude-dir D]...
      Symbols the golden patch adds that the files under the --refs folders reference.
  leaks    --base B --post P --prompt F
      Long verbatim overlaps between the prompt and the golden patch's added lines of code.
  timeouts --repo P
      `timeout=` of init_process_group / new_group calls: seconds where the timedelta is of constants
      (module constants count; a parameter's default too, said in "assumes"), else null.

Edits are text edits of one source segment (never ast.unparse of a file) so that a mutant's diff
is one spot with the comments kept. Stdlib only, Python >= 3.9 (keyword nodes carry positions).
"""

import argparse
import ast
import difflib
import json
import os
import random
import re
import sys

SKIP_DIRS = {".git", ".hg", ".svn", "__pycache__", ".venv", "venv", ".tox", ".nox", "node_modules",
             ".eggs", ".mypy_cache", ".pytest_cache", "site-packages"}
MAX_FILE_BYTES = 2 * 1024 * 1024


class InputError(Exception):
    """An input the command cannot use; the message names the file."""


# ---------------------------------------------------------------------------- files

def excluded(rel, exclude_dirs):
    return any(rel == d or rel.startswith(d + "/") for d in exclude_dirs)


def iter_files(root, suffix=".py"):
    """Relative posix paths of the files under root ending in suffix, sorted; links not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            full = os.path.join(dirpath, name)
            if name.endswith(suffix) and not os.path.islink(full) and os.path.isfile(full):
                out.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(out)


def read_text(root, rel):
    full = os.path.join(root, rel)
    try:
        if os.path.getsize(full) > MAX_FILE_BYTES:
            raise InputError("%s: larger than %d bytes" % (full, MAX_FILE_BYTES))
        with open(full, "rb") as f:
            return f.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError("%s: cannot read as UTF-8 text (%s)" % (full, e))


def parse(text, label):
    try:
        return ast.parse(text, filename=label)
    except (SyntaxError, ValueError) as e:
        line = getattr(e, "lineno", None)
        raise InputError("%s%s: does not parse (%s)" % (label, ":%d" % line if line else "", getattr(e, "msg", e)))


def split_lines(text):
    """Lines with their endings, split on '\\n' only: what ast's line numbers count."""
    lines = text.split("\n")
    out = [l + "\n" for l in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def changed_py_files(base, post, exclude_dirs):
    """[(rel, base_text or None, post_text)] for every .py file of post that is new or differs."""
    out = []
    for rel in iter_files(post):
        if excluded(rel, exclude_dirs):
            continue
        text = read_text(post, rel)
        old = read_text(base, rel) if os.path.isfile(os.path.join(base, rel)) else None
        if old != text:
            out.append((rel, old, text))
    return out


def added_lines(old, new):
    """1-based line numbers of `new` that the change adds or rewrites (every line of a new file)."""
    new_lines = split_lines(new)
    if old is None:
        return set(range(1, len(new_lines) + 1))
    sm = difflib.SequenceMatcher(None, split_lines(old), new_lines, autojunk=False)
    out = set()
    for tag, _i1, _i2, j1, j2 in sm.get_opcodes():
        if tag in ("replace", "insert"):
            out.update(range(j1 + 1, j2 + 1))
    return out


class Source:
    """A file's text with (line, utf-8 column) -> character offset, as ast positions count."""

    def __init__(self, text):
        self.text = text
        self.lines = split_lines(text)
        self.starts = []
        pos = 0
        for l in self.lines:
            self.starts.append(pos)
            pos += len(l)
        self.starts.append(pos)

    def offset(self, lineno, col):
        line = self.lines[lineno - 1] if lineno - 1 < len(self.lines) else ""
        return self.starts[lineno - 1] + len(line.encode("utf-8")[:col].decode("utf-8", errors="replace"))

    def start(self, node):
        return self.offset(node.lineno, node.col_offset)

    def end(self, node):
        return self.offset(node.end_lineno, node.end_col_offset)

    def segment(self, node):
        return self.text[self.start(node):self.end(node)]

    def line_start(self, lineno):
        return self.starts[lineno - 1]

    def eol(self, lineno):
        """The line ending of a line (a CRLF file gets CRLF lines)."""
        line = self.lines[min(lineno, len(self.lines)) - 1] if self.lines else ""
        return "\r\n" if line.endswith("\r\n") else "\n"

    def indent_of(self, lineno):
        line = self.lines[lineno - 1]
        return line[:len(line) - len(line.lstrip())]


def module_name(rel):
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def docstring_stmt(body):
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        return body[0]
    return None


FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)


def definitions(tree):
    """{qualname: node} of the functions and classes at module level and in class bodies (not nested
    in functions: those belong to their function's body)."""
    out = {}

    def walk(body, prefix):
        for node in body:
            if isinstance(node, FUNC_TYPES + (ast.ClassDef,)):
                q = prefix + node.name
                out[q] = node
                if isinstance(node, ast.ClassDef):
                    walk(node.body, q + ".")

    walk(tree.body, "")
    return out


# ---------------------------------------------------------------------------- mutation sites

ARITH_SWAP = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
              ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
OP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**",
           ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
           ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in"}
CMP_SWAP = {ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE,
            ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In}
BOUNDARY_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
# Where an operator's token sits in the gap between two operands: the gap holds only whitespace,
# parentheses, line continuations and the operator, so a pattern that cannot match a longer
# operator finds it.
OP_PATTERN = {"+": r"\+", "-": r"-", "*": r"(?<!\*)\*(?!\*)", "/": r"(?<!/)/(?!/)", "//": r"//", "%": r"%", "**": r"\*\*",
              "==": r"==", "!=": r"!=", "<": r"<(?!=)", "<=": r"<=", ">": r">(?!=)", ">=": r">=",
              "is": r"\bis\b(?!\s+not\b)", "is not": r"\bis\s+not\b", "in": r"(?<!not )\bin\b", "not in": r"\bnot\s+in\b",
              "and": r"\band\b", "or": r"\bor\b", "not": r"\bnot\b\s*"}
DROPPABLE = (ast.Expr, ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Raise, ast.Delete)
# Integer dtypes one step narrower / wider (an index type too small from 32,768 entries on).
DTYPE_STEPS = {"int8": ["int16"], "uint8": ["int16"], "int16": ["int32"], "int32": ["int16", "int64"], "int64": ["int32"]}
# Calls with a sibling that walks less (or more) of a module tree.
CALL_SIBLINGS = {"named_modules": "named_children", "named_children": "named_modules", "modules": "children", "children": "modules"}
# torch.distributed calls whose duplicate sends the payload twice (or reduces it twice).
COLLECTIVES = {"all_reduce", "broadcast", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "reduce", "gather", "scatter", "all_to_all", "all_to_all_single", "send", "recv", "isend", "irecv", "barrier"}


class Site:
    """One mutation: replace text[start:end] (character offsets) with `replacement`."""

    __slots__ = ("qual", "operator", "start", "end", "line", "end_line", "replacement", "original", "what")

    def __init__(self, qual, operator, start, end, line, end_line, replacement, original, what=None):
        self.qual, self.operator, self.start, self.end = qual, operator, start, end
        self.line, self.end_line, self.replacement, self.original, self.what = line, end_line, replacement, original, what


def const_replacements(value):
    if isinstance(value, bool):
        return [repr(not value)]
    if isinstance(value, int):
        return {0: ["1"], 1: ["0", "2"], 2: ["1", "3"]}.get(value, [str(value + 1), str(value - 1)])
    if isinstance(value, float):
        return {0.0: ["1.0"], 1.0: ["0.0", "2.0"], 2.0: ["1.0", "3.0"]}.get(value, [repr(value + 1), repr(value - 1)])
    return []


class SiteFinder(ast.NodeVisitor):
    """Collects the mutation sites of one file whose node lies wholly in the added lines."""

    def __init__(self, src, added):
        self.src, self.added = src, added
        self.stack = []
        self.sites = []

    # -- helpers
    def qual(self):
        return ".".join(self.stack) if self.stack else "<module>"

    def inside(self, node):
        return all(l in self.added for l in range(node.lineno, node.end_lineno + 1))

    def add(self, operator, start, end, line, end_line, replacement, what=None):
        original = self.src.text[start:end]
        self.sites.append(Site(self.qual(), operator, start, end, line, end_line, replacement, original, what))

    def token_in_gap(self, a_end, b_start, token):
        """Offsets of `token` in the text between two operands, or None (a comment there, or not found)."""
        gap = self.src.text[a_end:b_start]
        if "#" in gap:
            return None
        m = re.search(OP_PATTERN[token], gap)
        return (a_end + m.start(), a_end + m.end()) if m else None

    def op_site(self, operator, left, right, op_cls, new_cls, node):
        tok = OP_TEXT[op_cls]
        span = self.token_in_gap(self.src.end(left), self.src.start(right), tok)
        if span:
            self.add(operator, span[0], span[1], node.lineno, node.end_lineno, OP_TEXT[new_cls])

    # -- things never mutated: their text only changes messages, types or what is imported
    def visit_Import(self, node):
        pass

    visit_ImportFrom = visit_Import

    def visit_JoinedStr(self, node):
        pass  # positions inside f-strings are unreliable before 3.12, and they only format text

    def visit_def(self, node):
        self.stack.append(node.name)
        args = node.args
        for default in args.defaults + [d for d in args.kw_defaults if d is not None]:
            self.visit(default)
        body = node.body[1:] if docstring_stmt(node.body) else node.body
        self.visit_body(body)
        if isinstance(node, FUNC_TYPES):
            self.early_return(node, body)
        self.stack.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_def

    def visit_ClassDef(self, node):
        self.stack.append(node.name)
        for b in node.bases + [k.value for k in node.keywords]:
            self.visit(b)
        self.visit_body(node.body[1:] if docstring_stmt(node.body) else node.body)
        self.stack.pop()

    def visit_Module(self, node):
        self.visit_body(node.body[1:] if docstring_stmt(node.body) else node.body)

    def visit_body(self, body):
        for stmt in body:
            self.visit(stmt)

    def visit_Lambda(self, node):
        self.visit(node.body)

    def generic_stmt(self, node):
        if isinstance(node, DROPPABLE) and self.inside(node) and not self.is_docstring_like(node):
            self.add("drop-stmt", self.src.start(node), self.src.end(node), node.lineno, node.end_lineno, "pass",
                     what=self.short(self.src.segment(node)))

    def is_docstring_like(self, node):
        return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)

    def visit_Raise(self, node):
        self.generic_stmt(node)  # the exception expression is a message: never mutated inside

    def visit_Expr(self, node):
        self.generic_stmt(node)
        self.dup_collective(node)
        self.generic_visit(node)

    def visit_Assign(self, node):
        self.generic_stmt(node)
        self.generic_visit(node)
        self.none_for_value(node.value)

    def none_for_value(self, value):
        """None where a value was: a named constant or an initial value left unset."""
        if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and self.inside(value):
            self.add("const", self.src.start(value), self.src.end(value), value.lineno, value.end_lineno, "None")

    def visit_AugAssign(self, node):
        self.generic_stmt(node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.generic_stmt(node)
            self.visit(node.target)
            self.visit(node.value)  # the annotation is a type: not mutated
            self.none_for_value(node.value)

    def visit_Delete(self, node):
        self.generic_stmt(node)

    def visit_arg(self, node):
        pass  # annotations

    def visit_If(self, node):
        self.negate(node.test)
        self.generic_visit(node)

    visit_While = visit_If

    def visit_IfExp(self, node):
        self.negate(node.test)
        self.generic_visit(node)

    def negate(self, test):
        if self.inside(test):
            seg = self.src.segment(test)
            self.add("negate", self.src.start(test), self.src.end(test), test.lineno, test.end_lineno, "not (%s)" % seg,
                     what=self.short(seg))

    def visit_BinOp(self, node):
        op = type(node.op)
        if op in ARITH_SWAP and self.inside(node):
            self.op_site("arith", node.left, node.right, op, ARITH_SWAP[op], node)
        self.generic_visit(node)

    def visit_Compare(self, node):
        if self.inside(node):
            operands = [node.left] + node.comparators
            for i, op in enumerate(node.ops):
                cls = type(op)
                if cls in CMP_SWAP:
                    self.op_site("cmp", operands[i], operands[i + 1], cls, CMP_SWAP[cls], node)
                if cls in BOUNDARY_SWAP:
                    self.op_site("boundary", operands[i], operands[i + 1], cls, BOUNDARY_SWAP[cls], node)
        self.generic_visit(node)

    def visit_BoolOp(self, node):
        if self.inside(node):
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            spans = [self.token_in_gap(self.src.end(a), self.src.start(b), old) for a, b in zip(node.values, node.values[1:])]
            if all(spans):
                start, end = spans[0][0], spans[-1][1]
                text = self.src.text[start:end]
                rel = [(s - start, e - start) for s, e in spans]
                out, last = [], 0
                for s, e in rel:
                    out.append(text[last:s])
                    out.append(new)
                    last = e
                out.append(text[last:])
                self.sites.append(Site(self.qual(), "bool", start, end, node.lineno, node.end_lineno, "".join(out), text,
                                       what="%s -> %s" % (old, new)))
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.Not) and self.inside(node):
            span = self.token_in_gap(self.src.start(node), self.src.start(node.operand), "not")
            if span:
                self.add("not", span[0], span[1], node.lineno, node.end_lineno, "", what="drop 'not'")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if self.inside(node):
            for rep in const_replacements(node.value):
                self.add("const", self.src.start(node), self.src.end(node), node.lineno, node.end_lineno, rep)

    def visit_Call(self, node):
        elements = sorted(node.args + node.keywords, key=lambda n: (n.lineno, n.col_offset))
        for i, kw in enumerate(elements):
            if not isinstance(kw, ast.keyword) or kw.arg is None or not self.inside(kw):
                continue
            if i > 0:
                start, end = self.src.end(elements[i - 1]), self.src.end(kw)
            elif i + 1 < len(elements):
                start, end = self.src.start(kw), self.src.start(elements[i + 1])
            else:
                start, end = self.src.start(kw), self.src.end(kw)
                rest = self.src.text[end:self.src.end(node)]
                m = re.match(r"\s*,", rest)
                if m:
                    end += m.end()
            self.add("drop-kw", start, end, kw.lineno, kw.end_lineno, "", what="drop %s=" % kw.arg)
        self.generic_visit(node)

    def visit_comprehension(self, node):
        """drop-filter: a comprehension's `if` filter removed (every parameter instead of the trainable ones)."""
        prev = node.iter
        for cond in node.ifs:
            if self.inside(cond):
                start, end = self.src.end(prev), self.src.end(cond)
                gap = self.src.text[start:self.src.start(cond)]
                if "#" not in gap and re.search(r"\bif\b", gap):
                    self.add("drop-filter", start, end, cond.lineno, cond.end_lineno, "",
                             what="drop filter 'if %s'" % self.short(self.src.segment(cond)))
            prev = cond
        self.generic_visit(node)

    def visit_Attribute(self, node):
        """dtype: torch.int16 <-> torch.int32 <-> torch.int64 (and one-byte ints widened)."""
        if self.inside(node) and isinstance(node.value, ast.Name) and node.value.id == "torch" and node.attr in DTYPE_STEPS:
            start = self.src.end(node) - len(node.attr)
            for rep in DTYPE_STEPS[node.attr]:
                self.add("dtype", start, self.src.end(node), node.lineno, node.end_lineno, rep, what="torch.%s -> torch.%s" % (node.attr, rep))
        if self.inside(node) and node.attr in CALL_SIBLINGS:
            start = self.src.end(node) - len(node.attr)
            if self.src.text[start:self.src.end(node)] == node.attr:
                self.add("swap-call", start, self.src.end(node), node.lineno, node.end_lineno, CALL_SIBLINGS[node.attr],
                         what="%s -> %s" % (node.attr, CALL_SIBLINGS[node.attr]))
        self.generic_visit(node)

    def dup_collective(self, node):
        """dup-collective: a torch.distributed collective issued twice (the payload sent or reduced again)."""
        call = node.value if isinstance(node, ast.Expr) else None
        func = getattr(call, "func", None)
        if not (isinstance(call, ast.Call) and isinstance(func, ast.Attribute) and func.attr in COLLECTIVES and self.inside(node)):
            return
        owner = func.value
        name = owner.id if isinstance(owner, ast.Name) else (owner.attr if isinstance(owner, ast.Attribute) else None)
        if name not in ("dist", "distributed", "c10d"):
            return
        end = self.src.end(node)
        rest = self.src.text[end:]
        if rest[:1] not in ("\n", "\r", ""):
            return  # something else follows on the line (a comment or `;`): no clean place to insert
        indent = self.src.indent_of(node.lineno)
        eol = self.src.eol(node.end_lineno)
        seg = self.src.segment(node)
        self.sites.append(Site(self.qual(), "dup-collective", end, end, node.lineno, node.end_lineno, eol + indent + seg, "",
                               what="issue '%s' twice" % self.short(seg)))

    def early_return(self, node, body):
        """A `return` as the first statement after the docstring of a function the patch adds or changes."""
        touched = node.lineno in self.added or any(l in self.added for l in range(node.body[0].lineno, node.end_lineno + 1))
        if not touched or not body and not node.body:
            return
        anchor = body[0] if body else None
        if anchor is not None:
            if anchor.lineno == node.lineno or (docstring_stmt(node.body) and anchor.lineno == node.body[0].end_lineno):
                return  # the body shares a line with the def or the docstring: no line of its own to insert
            at = self.src.line_start(anchor.lineno)
            indent = self.src.indent_of(anchor.lineno)
            eol = self.src.eol(anchor.lineno)
        else:
            doc = node.body[0]
            if doc.end_lineno == node.lineno:
                return
            at = self.src.line_start(doc.end_lineno + 1) if doc.end_lineno < len(self.src.lines) else len(self.src.text)
            indent = self.src.indent_of(doc.lineno)
            eol = self.src.eol(doc.lineno)
        self.sites.append(Site(self.qual(), "early-return", at, at, node.lineno, node.lineno, indent + "return" + eol, "",
                               what="insert 'return' at the start of %s" % self.qual()))

    @staticmethod
    def short(text):
        one = " ".join(text.split())
        return one if len(one) <= 60 else one[:57] + "..."


def describe(site):
    if site.operator in ("drop-stmt",):
        return "line %d: '%s' -> 'pass'" % (site.line, site.what)
    if site.operator == "negate":
        return "line %d: '%s' -> 'not (...)'" % (site.line, site.what)
    if site.what:
        return "line %d: %s" % (site.line, site.what)
    return "line %d: '%s' -> '%s'" % (site.line, site.original, site.replacement)


def top_level_blocks(src, tree):
    """Character spans of whole lines holding the module's top-level statements (decorators
    included), statements that share a line merged. A one-spot edit stays inside one block, and the
    file parses iff that block does: the other blocks' text is unchanged and they start at column 0."""
    ranges = []
    for stmt in tree.body:
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])])
        if ranges and first <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], stmt.end_lineno)
        else:
            ranges.append([first, stmt.end_lineno])
    return [(src.line_start(a), src.starts[b] if b < len(src.lines) else len(src.text), a) for a, b in ranges]


HUNK_RE = re.compile(r"^@@ -(\d+)(,\d+)? \+(\d+)(,\d+)? @@", re.M)


def local_change(rel, before, after, first_line):
    """Unified diff of one block (golden -> mutant), its line numbers those of the whole file."""
    text = "".join(difflib.unified_diff(split_lines(before), split_lines(after), "golden/" + rel, "mutant/" + rel, n=2))
    shift = first_line - 1
    return HUNK_RE.sub(lambda m: "@@ -%d%s +%d%s @@" % (int(m.group(1)) + shift, m.group(2) or "", int(m.group(3)) + shift, m.group(4) or ""), text)


def file_mutants(rel, old, new, counters, skipped):
    """The kept mutants of one file, numbered before the skips so that ids do not depend on them."""
    src = Source(new)
    tree = parse(new, rel)
    finder = SiteFinder(src, added_lines(old, new))
    finder.visit(tree)
    blocks = top_level_blocks(src, tree)
    block_dump = {}
    seen = set()
    out = []
    for s in sorted(finder.sites, key=lambda s: (s.start, s.end, s.operator)):
        key = (rel, s.qual, s.operator)
        counters[key] = counters.get(key, 0) + 1
        bs, be, first_line = next(b for b in blocks if b[0] <= s.start and s.end <= b[1])
        before = new[bs:be]
        after = before[:s.start - bs] + s.replacement + before[s.end - bs:]
        try:
            dumped = ast.dump(ast.parse(after))
        except (SyntaxError, ValueError):
            skipped["unparsable"] += 1
            continue
        if bs not in block_dump:
            block_dump[bs] = ast.dump(ast.parse(before))
        if dumped == block_dump[bs]:
            skipped["same_ast"] += 1
            continue
        if (bs, after) in seen:
            skipped["duplicate"] += 1
            continue
        seen.add((bs, after))
        # two lines of context either side of the block, as a diff of the whole file would show
        cs = src.line_start(max(1, first_line - 2))
        ce = src.starts[min(len(src.lines), new.count("\n", 0, be) + 2)]
        out.append({
            "id": "%s:%s:%s#%d" % (rel, s.qual, s.operator, counters[key]),
            "file": rel, "line": s.line, "end_line": s.end_line, "operator": s.operator,
            "description": describe(s), "original": s.original, "replacement": s.replacement,
            "source": new[:bs] + after + new[be:],
            "change": local_change(rel, new[cs:ce], new[cs:bs] + after + new[be:ce], max(1, first_line - 2)),
        })
    return out


def cmd_mutants(args):
    counters = {}
    out = []
    skipped = {"same_ast": 0, "duplicate": 0, "unparsable": 0}
    for rel, old, new in changed_py_files(args.base, args.post, args.exclude_dir):
        out.extend(file_mutants(rel, old, new, counters, skipped))
    if args.seed is not None:
        random.Random(args.seed).shuffle(out)
    return {"mutants": out, "skipped": skipped}


# ---------------------------------------------------------------------------- hollow

def body_span(src, node):
    """(start, end) character offsets of a function body after its docstring, whole lines when the
    body has lines of its own; None when there is nothing after the docstring."""
    body = node.body[1:] if docstring_stmt(node.body) else node.body
    if not body:
        return None
    first, last = body[0], body[-1]
    if first.lineno == node.lineno or (len(body) < len(node.body) and first.lineno == node.body[0].end_lineno):
        return src.start(first), src.end(last), None
    end_line = last.end_lineno
    end = src.starts[end_line] if end_line < len(src.lines) else len(src.text)
    return src.line_start(first.lineno), end, src.indent_of(first.lineno)


def stub_edit(src, node, qual):
    span = body_span(src, node)
    stub = 'raise NotImplementedError(%s)' % json.dumps(qual)
    if span is None:
        doc = node.body[0]
        if doc.end_lineno == node.lineno:
            return (src.end(doc), src.end(doc), "; " + stub)
        at = src.starts[doc.end_lineno] if doc.end_lineno < len(src.lines) else len(src.text)
        eol = src.eol(doc.lineno)
        nl = "" if src.text[:at].endswith("\n") else eol
        return (at, at, nl + src.indent_of(doc.lineno) + stub + eol)
    start, end, indent = span
    if indent is None:
        return (start, end, stub)
    return (start, end, indent + stub + src.eol(node.body[-1].end_lineno))


def reindent(lines_text, old_indent, new_indent):
    if old_indent == new_indent:
        return lines_text
    out = []
    for line in split_lines(lines_text):
        out.append(new_indent + line[len(old_indent):] if line.startswith(old_indent) else line)
    return "".join(out)


def revert_edit(src, node, old_src, old_node):
    """Replaces node's whole body (docstring included) with old_node's, re-indented to node's."""
    def whole(s, n):
        first, last = n.body[0], n.body[-1]
        if first.lineno == n.lineno:
            return s.start(first), s.end(last), None
        end = s.starts[last.end_lineno] if last.end_lineno < len(s.lines) else len(s.text)
        return s.line_start(first.lineno), end, s.indent_of(first.lineno)

    ns, ne, nind = whole(src, node)
    os_, oe, oind = whole(old_src, old_node)
    old_text = old_src.text[os_:oe]
    if nind is None or oind is None:
        if nind is None and oind is None:
            return (ns, ne, old_text)
        return None  # a one-line body on one side only: left as golden has it, listed under not_reverted
    if not old_text.endswith("\n"):
        old_text += "\n"
    return (ns, ne, reindent(old_text, oind, nind))


def apply_edits(text, edits):
    for start, end, rep in sorted(edits, key=lambda e: e[0], reverse=True):
        text = text[:start] + rep + text[end:]
    return text


def cmd_hollow(args):
    files, stubbed, reverted, not_reverted = [], [], [], []
    for rel, old, new in changed_py_files(args.base, args.post, args.exclude_dir):
        src = Source(new)
        defs = definitions(parse(new, rel))
        old_src = Source(old) if old is not None else None
        old_defs = definitions(parse(old, rel + " (base)")) if old is not None else {}
        edits = []
        for qual, node in defs.items():
            if not isinstance(node, FUNC_TYPES):
                continue
            if qual not in old_defs or not isinstance(old_defs[qual], FUNC_TYPES):
                if any(qual.startswith(p + ".") for p in defs if isinstance(defs[p], FUNC_TYPES)):
                    continue
                edits.append(stub_edit(src, node, qual))
                stubbed.append("%s:%s" % (rel, qual))
            elif ast.dump(ast.Module(body=node.body, type_ignores=[])) != ast.dump(ast.Module(body=old_defs[qual].body, type_ignores=[])):
                e = revert_edit(src, node, old_src, old_defs[qual])
                if e is None:
                    not_reverted.append("%s:%s" % (rel, qual))
                else:
                    edits.append(e)
                    reverted.append("%s:%s" % (rel, qual))
        hollow = apply_edits(new, edits)
        parse(hollow, rel + " (hollow)")
        files.append({"path": rel, "source": hollow})
    return {"files": files, "stubbed": stubbed, "reverted": reverted, "not_reverted": not_reverted}


# ---------------------------------------------------------------------------- contract

def self_attrs(func, lines=None):
    """{name: line} of `self.<name> = ...` (also augmented / annotated) in a method, optionally only on lines."""
    out = {}
    if not func.args.args:
        return out
    me = func.args.args[0].arg
    for n in ast.walk(func):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            for tt in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(tt, ast.Attribute) and isinstance(tt.value, ast.Name) and tt.value.id == me:
                    if lines is None or tt.lineno in lines:
                        out.setdefault(tt.attr, tt.lineno)
    return out


def assigned_names(body):
    """{name: (line, class-body?)} of plain names assigned at this level of a module or class body."""
    out = {}
    for n in body:
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        for t in targets:
            for tt in (t.elts if isinstance(t, ast.Tuple) else [t]):
                if isinstance(tt, ast.Name):
                    out.setdefault(tt.id, n.lineno)
    return out


def param_names(func):
    a = func.args
    names = [x.arg for x in getattr(a, "posonlyargs", []) + a.args + a.kwonlyargs]
    return names


def added_symbols(base, post, exclude_dirs):
    syms = []

    def sym(name, kind, rel, line, module, qual):
        syms.append({"name": name, "kind": kind, "qualname": qual, "module": module, "defined_at": "%s:%d" % (rel, line)})

    for rel, old, new in changed_py_files(base, post, exclude_dirs):
        mod = module_name(rel)
        tree = parse(new, rel)
        old_tree = parse(old, rel + " (base)") if old is not None else None
        added = added_lines(old, new)
        if old_tree is None:
            sym(mod, "module", rel, 1, mod, mod)
        defs, old_defs = definitions(tree), definitions(old_tree) if old_tree else {}
        for qual, node in defs.items():
            parent = qual.rsplit(".", 1)[0] if "." in qual else None
            dunder = node.name.startswith("__") and node.name.endswith("__")
            if qual not in old_defs:
                if dunder:
                    continue  # reached through its class or an operator, not by its name
                if isinstance(node, ast.ClassDef):
                    kind = "class"
                elif parent is None:
                    kind = "function"
                elif any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list):
                    kind = "property"
                else:
                    kind = "method"
                sym(node.name, kind, rel, node.lineno, mod, "%s.%s" % (mod, qual))
            elif isinstance(node, FUNC_TYPES) and isinstance(old_defs[qual], FUNC_TYPES):
                old_params = set(param_names(old_defs[qual]))
                for p in param_names(node):
                    if p not in old_params:
                        sym(p, "parameter", rel, node.lineno, mod, "%s.%s(%s)" % (mod, qual, p))
            if isinstance(node, ast.ClassDef):
                old_cls = old_defs.get(qual)
                old_fields = assigned_names(old_cls.body) if isinstance(old_cls, ast.ClassDef) else {}
                for name, line in assigned_names(node.body).items():
                    if name not in old_fields and line in added:
                        sym(name, "attribute", rel, line, mod, "%s.%s.%s" % (mod, qual, name))
                old_self = {}
                if isinstance(old_cls, ast.ClassDef):
                    for f in old_cls.body:
                        if isinstance(f, FUNC_TYPES):
                            old_self.update(self_attrs(f))
                seen = set()
                for f in node.body:
                    if isinstance(f, FUNC_TYPES):
                        for name, line in self_attrs(f, added).items():
                            if name not in old_self and name not in seen and not name.startswith("__"):
                                seen.add(name)
                                sym(name, "attribute", rel, line, mod, "%s.%s.%s" % (mod, qual, name))
        old_top = assigned_names(old_tree.body) if old_tree else {}
        for name, line in assigned_names(tree.body).items():
            if name not in old_top and line in added:
                sym(name, "constant", rel, line, mod, "%s.%s" % (mod, name))
    return syms


def references(refs_dirs):
    """Every reference the files under the refs folders make: (kind, name, module or None, 'file:line')."""
    out = []
    for d in refs_dirs:
        start = len(out)
        for rel in iter_files(d):
            text = read_text(d, rel)
            tree = parse(text, os.path.join(d, rel))
            imported = set()
            for n in ast.walk(tree):
                at = "%s:%d" % (rel, getattr(n, "lineno", 0))
                if isinstance(n, ast.Import):
                    for a in n.names:
                        out.append(("module", a.name, None, at))
                elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                    out.append(("module", n.module, None, at))
                    for a in n.names:
                        out.append(("from", a.name, n.module, at))
                        out.append(("module", "%s.%s" % (n.module, a.name), None, at))
                        imported.add(a.asname or a.name)
                elif isinstance(n, ast.Attribute):
                    out.append(("attr", n.attr, None, at))
                elif isinstance(n, ast.keyword) and n.arg:
                    out.append(("kw", n.arg, None, at))
            for n in ast.walk(tree):
                if isinstance(n, ast.Name) and n.id in imported:
                    out.append(("name", n.id, None, "%s:%d" % (rel, n.lineno)))
        # ast.walk is breadth-first: put this folder's references back in file and line order
        out[start:] = sorted(out[start:], key=lambda r: (r[3].rpartition(":")[0], int(r[3].rpartition(":")[2])))
    return out


def matches(sym, ref):
    kind, name, module, _ = ref
    if sym["kind"] == "module":
        return kind == "module" and (name == sym["name"] or name.startswith(sym["name"] + "."))
    if name != sym["name"]:
        return False
    if sym["kind"] in ("function", "class", "constant"):
        if kind == "from":
            return module == sym["module"] or sym["module"].startswith(module + ".")
        return kind in ("attr", "name")
    if sym["kind"] == "parameter":
        return kind == "kw"
    if sym["kind"] == "attribute":
        return kind in ("attr", "kw")
    return kind == "attr"  # method, property


def cmd_contract(args):
    syms = added_symbols(args.base, args.post, args.exclude_dir)
    refs = references(args.refs)
    out, unreferenced = [], []
    for s in syms:
        where = []
        for r in refs:
            if matches(s, r) and r[3] not in where:
                where.append(r[3])
        if where:
            out.append({"name": s["name"], "kind": s["kind"], "qualname": s["qualname"], "defined_at": s["defined_at"],
                        "referenced_at": where[:5]})
        else:
            unreferenced.append(s["qualname"])
    return {"symbols": out, "unreferenced": unreferenced}


# ---------------------------------------------------------------------------- leaks

TRIVIAL_WORDS = {"return", "pass", "else", "try", "finally", "break", "continue", "none", "true", "false", "self",
                 "def", "class", "yield", "raise", "import", "from", "with", "if", "elif", "for", "while", "in", "not",
                 "and", "or", "is", "lambda", "async", "await", "except"}


def normalise(line):
    return " ".join(line.split())


def trivial(norm):
    if len(norm) < 12:
        return True
    words = re.findall(r"[A-Za-z_]+", norm)
    return all(w.lower() in TRIVIAL_WORDS for w in words)


def cmd_leaks(args):
    try:
        with open(args.prompt, "rb") as f:
            prompt_lines = f.read().decode("utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError("%s: cannot read as UTF-8 text (%s)" % (args.prompt, e))
    prompt = [(i + 1, normalise(l)) for i, l in enumerate(prompt_lines) if not trivial(normalise(l))]
    prompt_text = [p for _, p in prompt]
    leaks = []
    for rel, old, new in changed_py_files(args.base, args.post, []):
        added = added_lines(old, new)
        runs, current = [], []
        for i, line in enumerate(split_lines(new), start=1):
            norm = normalise(line)
            if not norm:
                continue
            if i not in added:
                if not trivial(norm) and current:
                    runs.append(current)
                    current = []
                continue
            if not trivial(norm):
                current.append((i, norm))
        if current:
            runs.append(current)
        for run in runs:
            reported = set()
            for a in range(len(run)):
                for j in range(len(prompt_text)):
                    if run[a][1] != prompt_text[j] or (a > 0 and j > 0 and run[a - 1][1] == prompt_text[j - 1]):
                        continue
                    k = 0
                    while a + k < len(run) and j + k < len(prompt_text) and run[a + k][1] == prompt_text[j + k]:
                        k += 1
                    if k >= 3:
                        leaks.append({"file": rel, "line": run[a][0], "lines": k, "prompt_line": prompt[j][0],
                                      "text": "\n".join(x[1] for x in run[a:a + k])})
                        reported.update(range(a, a + k))
            for a, (line, norm) in enumerate(run):
                if a in reported or len(norm) < 80:
                    continue
                for pline, ptext in prompt:
                    if norm in ptext:
                        leaks.append({"file": rel, "line": line, "lines": 1, "prompt_line": pline, "text": norm})
                        break
    return {"leaks": leaks}


# ---------------------------------------------------------------------------- timeouts

TIMEDELTA_POS = ["days", "seconds", "microseconds", "milliseconds", "minutes", "hours", "weeks"]
UNIT_SECONDS = {"days": 86400, "seconds": 1, "microseconds": 1e-6, "milliseconds": 1e-3, "minutes": 60, "hours": 3600, "weeks": 604800}


def number(node, names=None):
    """The value of an expression of numeric constants (+ - * /, unary minus), else None. `names`
    gives values to bare names: {name: (value, assumption or None)}; used names' assumptions go in
    names["__assumed__"]."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and names is not None and node.id in names:
        value, assumed = names[node.id]
        if assumed:
            names.setdefault("__assumed__", []).append(assumed)
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = number(node.operand, names)
        return None if v is None else (-v if isinstance(node.op, ast.USub) else v)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
        a, b = number(node.left, names), number(node.right, names)
        if a is None or b is None or isinstance(node.op, ast.Div) and b == 0:
            return None
        return {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b}[type(node.op)]()
    return None


def callee_name(func):
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def timedelta_seconds(node, names):
    if not isinstance(node, ast.Call) or callee_name(node.func) != "timedelta" or len(node.args) > len(TIMEDELTA_POS):
        return None
    total = 0
    for unit, a in list(zip(TIMEDELTA_POS, node.args)) + [(k.arg, k.value) for k in node.keywords]:
        v = number(a, names)
        if unit not in UNIT_SECONDS or v is None:
            return None
        total += v * UNIT_SECONDS[unit]
    return total


def parameter_defaults(func, module_names):
    """{param: (value, "the default of <param>")} for parameters with a numeric default."""
    a = func.args
    positional = getattr(a, "posonlyargs", []) + a.args
    pairs = list(zip(positional[len(positional) - len(a.defaults):], a.defaults)) + [
        (arg, d) for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
    out = {}
    for arg, d in pairs:
        v = number(d, dict(module_names))
        if v is not None:
            out[arg.arg] = (v, "the default of %s" % arg.arg)
    return out


class TimeoutFinder(ast.NodeVisitor):
    def __init__(self, rel, src, module_names):
        self.rel, self.src, self.out = rel, src, []
        self.scopes = [module_names]

    def visit_FunctionDef(self, node):
        names = dict(self.scopes[-1])
        # a parameter shadows a module constant of its name even without a usable default
        for arg in getattr(node.args, "posonlyargs", []) + node.args.args + node.args.kwonlyargs:
            names.pop(arg.arg, None)
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                names.pop(n.id, None)  # a local of that name: its value is not known here
        names.update(parameter_defaults(node, self.scopes[0]))
        self.scopes.append(names)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node):
        if callee_name(node.func) in ("init_process_group", "new_group"):
            for k in node.keywords:
                if k.arg == "timeout":
                    names = dict(self.scopes[-1])
                    call = " ".join(self.src.segment(node).split())
                    item = {"file": self.rel, "line": node.lineno, "seconds": timedelta_seconds(k.value, names),
                            "call": call if len(call) <= 200 else call[:197] + "..."}
                    if item["seconds"] is not None and names.get("__assumed__"):
                        item["assumes"] = "; ".join(names["__assumed__"])
                    self.out.append(item)
        self.generic_visit(node)


def module_constants(tree):
    out = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            v = number(n.value, dict(out))
            if v is not None:
                out[n.targets[0].id] = (v, None)
    return out


def cmd_timeouts(args):
    out = []
    for rel in iter_files(args.repo):
        text = read_text(args.repo, rel)
        tree = parse(text, rel)
        finder = TimeoutFinder(rel, Source(text), module_constants(tree))
        finder.visit(tree)
        out.extend(finder.out)
    out.sort(key=lambda t: (t["file"], t["line"]))
    return {"timeouts": out}


# ---------------------------------------------------------------------------- CLI

def main(argv):
    if sys.version_info < (3, 9):
        print("infradev_mutate: needs Python >= 3.9 (ast positions of keywords); this is %d.%d" % sys.version_info[:2], file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(prog="infradev_mutate.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("mutants", "hollow", "contract", "leaks"):
        s = sub.add_parser(name)
        s.add_argument("--base", required=True)
        s.add_argument("--post", required=True)
        if name != "leaks":
            s.add_argument("--exclude-dir", action="append", default=[])
        if name == "mutants":
            s.add_argument("--seed", type=int)
        if name == "contract":
            s.add_argument("--refs", action="append", required=True)
        if name == "leaks":
            s.add_argument("--prompt", required=True)
    s = sub.add_parser("timeouts")
    s.add_argument("--repo", required=True)
    args = p.parse_args(argv)
    if hasattr(args, "exclude_dir"):
        args.exclude_dir = [d.strip("/") for d in args.exclude_dir]
    for attr in ("base", "post", "repo"):
        d = getattr(args, attr, None)
        if d is not None and not os.path.isdir(d):
            print("infradev_mutate: --%s %s: not a folder" % (attr, d), file=sys.stderr)
            return 2
    for d in getattr(args, "refs", None) or []:
        if not os.path.isdir(d):
            print("infradev_mutate: --refs %s: not a folder" % d, file=sys.stderr)
            return 2
    run = {"mutants": cmd_mutants, "hollow": cmd_hollow, "contract": cmd_contract, "leaks": cmd_leaks, "timeouts": cmd_timeouts}
    try:
        result = run[args.command](args)
    except InputError as e:
        print("infradev_mutate: %s" % e, file=sys.stderr)
        return 2
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
