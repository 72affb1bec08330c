#!/usr/bin/env python3
"""The task author's static questions about a pull request, answered with the standard library's `ast`.

Runs on the host over upstream code the author chose (never a submission); nothing is imported or
executed. JSON on stdout; exit 2 with one line on stderr naming the file when an input cannot be read.

  select    --base B --post P FILE...
      Which tests of the changed test modules FILE (paths relative to B and P, two trees holding at
      least those files) the PR adds or changes: a module new in P, or whose module-level code
      (imports, constants, marks) differs, is selected whole; else the test functions and methods
      that are new or differ, or that reach (through helpers, fixtures taken by name, base classes of
      the module) a definition that differs. Each selection says why.
  interface --base B --post P [--exclude-dir D]... [--refs DIR]...
      The symbols the PR adds or whose signature it changes, in the code outside the excluded
      folders: signature (as `ast.unparse` writes it), the first paragraph of the docstring, whether
      it is public, and (with --refs: the post-PR tests) whether those files reference it. Functions
      whose body alone changes are listed with change "body".
  imports   --git-dir G --commit C [--have FILE] START...
      The third-party top-level modules that importing the START files (paths in commit C of the git
      repository G) needs: module-level imports followed through the repository's own modules
      (package __init__ files on the way), each marked hard (unguarded) or guarded (inside a
      module-level try / if). --have: a file of installed distribution names, one per line; hard
      modules no name there provides are listed under "missing".

Stdlib only, Python >= 3.9 (ast.unparse). The `contract` helpers of infradev_mutate.py (beside this
file) are loaded by path: `-I` leaves this folder off sys.path.
"""

import argparse
import ast
import importlib.util
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load_mutate():
    spec = importlib.util.spec_from_file_location("infradev_mutate", os.path.join(HERE, "infradev_mutate.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


M = load_mutate()
InputError = M.InputError
FUNC_TYPES = (ast.FunctionDef, ast.AsyncFunctionDef)


def read_opt(root, rel):
    """A file's text, or None when the tree does not have it."""
    full = os.path.join(root, rel)
    if not os.path.isfile(full) or os.path.islink(full):
        return None
    return M.read_text(root, rel)


def dump(node):
    return ast.dump(node, include_attributes=False)


# ---------------------------------------------------------------------------- select

def is_test_name(name):
    return name.startswith("test")


def test_classes(tree):
    """{class name: node} of the classes pytest collects: Test* or a unittest.TestCase subclass."""
    out = {}
    for n in tree.body:
        if isinstance(n, ast.ClassDef):
            bases = [ast.unparse(b) for b in n.bases]
            if n.name.startswith("Test") or any(b.endswith("TestCase") for b in bases):
                out[n.name] = n
    return out


def fixture_name(func):
    """The name a fixture is requested by, or None when func is no fixture."""
    for d in func.decorator_list:
        call = d if isinstance(d, ast.Call) else None
        target = call.func if call else d
        text = ast.unparse(target)
        if text in ("pytest.fixture", "fixture"):
            if call:
                for kw in call.keywords:
                    if kw.arg == "name" and isinstance(kw.value, ast.Constant):
                        return kw.value.value
            return func.name
    return None


def autouse(func):
    for d in func.decorator_list:
        if isinstance(d, ast.Call) and ast.unparse(d.func) in ("pytest.fixture", "fixture"):
            for kw in d.keywords:
                if kw.arg == "autouse" and isinstance(kw.value, ast.Constant) and kw.value.value:
                    return True
    return False


def names_used(node):
    """Identifiers a definition reaches by name: bare names, attributes (self.x, Cls.x, mod.x) and the
    parameters it takes (fixtures are requested by parameter name)."""
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def module_level(tree):
    """The module's statements other than function and class definitions (imports, constants, marks)."""
    return [dump(n) for n in tree.body if not isinstance(n, FUNC_TYPES + (ast.ClassDef,))]


def class_level(cls):
    return [dump(n) for n in cls.body if not isinstance(n, FUNC_TYPES)] + [dump(d) for d in cls.decorator_list] + [dump(b) for b in cls.bases]


def doc_line(node):
    doc = ast.get_docstring(node) or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def all_tests(rel, tree):
    """Every test pytest would collect in the module, as (node id, docstring's first paragraph)."""
    out = []
    classes = test_classes(tree)
    for n in tree.body:
        if isinstance(n, FUNC_TYPES) and is_test_name(n.name):
            out.append({"node": "%s::%s" % (rel, n.name), "doc": doc_line(n)})
        elif isinstance(n, ast.ClassDef) and n.name in classes:
            for f in n.body:
                if isinstance(f, FUNC_TYPES) and is_test_name(f.name):
                    out.append({"node": "%s::%s::%s" % (rel, n.name, f.name), "doc": doc_line(f)})
    return out


def select_file(rel, old, new):
    result = select_nodes(rel, old, new)
    tree = M.parse(new, rel)
    every = all_tests(rel, tree)
    if result["whole"]:
        result["tests"] = every
    else:
        picked = set(result["nodes"])
        result["tests"] = [t for t in every if t["node"] in picked or any(t["node"].startswith(p + "::") for p in picked)]
    return result


def select_nodes(rel, old, new):
    tree = M.parse(new, rel)
    if old is None:
        return {"file": rel, "whole": True, "reason": "new test module", "nodes": [rel]}
    old_tree = M.parse(old, rel + " (base)")
    if module_level(tree) != module_level(old_tree):
        return {"file": rel, "whole": True, "reason": "module-level code changed (imports, constants or marks)", "nodes": [rel]}
    defs, old_defs = M.definitions(tree), M.definitions(old_tree)
    changed = {q for q, n in defs.items() if q not in old_defs or dump(n) != dump(old_defs[q])}
    # Class bodies (attributes, decorators, bases) changed: the whole class is changed.
    whole_classes = {q for q, n in defs.items() if isinstance(n, ast.ClassDef) and (q not in old_defs or class_level(n) != class_level(old_defs[q]))}
    for q, n in defs.items():
        if isinstance(n, FUNC_TYPES) and q in changed and autouse(n):
            if "." in q:
                whole_classes.add(q.rsplit(".", 1)[0])
            else:
                return {"file": rel, "whole": True, "reason": "autouse fixture %s changed" % q, "nodes": [rel]}
    # A definition is affected when it changed or reaches an affected one by name: a helper, a
    # fixture (requested by parameter name), a method through self / cls.
    by_name = {}
    for q, n in defs.items():
        key = fixture_name(n) if isinstance(n, FUNC_TYPES) else None
        for name in {n.name, key} - {None}:
            by_name.setdefault(name, set()).add(q)
    uses = {q: names_used(n) for q, n in defs.items() if isinstance(n, FUNC_TYPES)}
    affected = set(changed) - {q for q in changed if isinstance(defs[q], ast.ClassDef)} | whole_classes
    why = {q: "changed" if q in old_defs else "new" for q in affected}
    grew = True
    while grew:
        grew = False
        for q, names in uses.items():
            if q in affected:
                continue
            for name in names:
                hit = next((t for t in sorted(by_name.get(name, ())) if t in affected and t != q), None)
                if hit:
                    affected.add(q)
                    why[q] = "uses %s" % hit
                    grew = True
                    break
    # Classes whose base (a class of this module) is affected: their inherited tests are too.
    classes = test_classes(tree)
    for name, cls in classes.items():
        for b in cls.bases:
            base = ast.unparse(b)
            if base in defs and (base in affected or any(q.startswith(base + ".") for q in affected)):
                whole_classes.add(name)
                why.setdefault(name, "base class %s changed" % base)
    nodes, reasons = [], {}
    for n in tree.body:
        if isinstance(n, FUNC_TYPES) and is_test_name(n.name) and n.name in affected:
            nodes.append("%s::%s" % (rel, n.name))
            reasons[nodes[-1]] = why.get(n.name, "changed")
        elif isinstance(n, ast.ClassDef) and n.name in classes:
            if n.name in whole_classes:
                nodes.append("%s::%s" % (rel, n.name))
                reasons[nodes[-1]] = why.get(n.name, "class body changed")
                continue
            for f in n.body:
                q = "%s.%s" % (n.name, f.name) if isinstance(f, FUNC_TYPES) else None
                if q and is_test_name(f.name) and q in affected:
                    nodes.append("%s::%s::%s" % (rel, n.name, f.name))
                    reasons[nodes[-1]] = why.get(q, "changed")
    return {"file": rel, "whole": False, "reason": "%d test(s) new or changed, or reaching a changed helper" % len(nodes), "nodes": nodes, "why": reasons}


def cmd_select(args):
    out = []
    for rel in args.files:
        new = read_opt(args.post, rel)
        if new is None:
            out.append({"file": rel, "whole": False, "reason": "deleted by the PR", "nodes": [], "tests": []})
            continue
        out.append(select_file(rel, read_opt(args.base, rel), new))
    return {"files": out}


# ---------------------------------------------------------------------------- interface

def public(qual):
    return not any(part.startswith("_") and not (part.startswith("__") and part.endswith("__")) for part in qual.split("."))


def first_paragraph(doc, cap=300):
    if not doc:
        return ""
    para = doc.strip().split("\n\n")[0]
    text = " ".join(para.split())
    return text if len(text) <= cap else text[:cap - 1].rstrip() + "…"


def signature(node):
    if isinstance(node, FUNC_TYPES):
        prefix = "async def " if isinstance(node, ast.AsyncFunctionDef) else "def "
        ret = " -> %s" % ast.unparse(node.returns) if node.returns else ""
        decos = [ast.unparse(d) for d in node.decorator_list if ast.unparse(d) in ("staticmethod", "classmethod", "property")]
        return "%s%s%s(%s)%s" % ("".join("@%s " % d for d in decos), prefix, node.name, ast.unparse(node.args), ret)
    bases = ", ".join(ast.unparse(b) for b in node.bases + node.keywords) if (node.bases or node.keywords) else ""
    decos = [ast.unparse(d) for d in node.decorator_list]
    return "%sclass %s%s" % ("".join("@%s " % d for d in decos), node.name, "(%s)" % bases if bases else "")


def class_fields(cls):
    """{name: (line, text, doc)} of annotated class attributes (dataclass fields), with the string
    literal that follows one as its docstring (Sphinx's attribute docstrings)."""
    out = {}
    body = cls.body
    for i, n in enumerate(body):
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            doc = ""
            if i + 1 < len(body) and isinstance(body[i + 1], ast.Expr) and isinstance(body[i + 1].value, ast.Constant) and isinstance(body[i + 1].value.value, str):
                doc = body[i + 1].value.value
            text = "%s: %s%s" % (n.target.id, ast.unparse(n.annotation), " = %s" % ast.unparse(n.value) if n.value is not None else "")
            out[n.target.id] = (n.lineno, text, doc)
    return out


def cmd_interface(args):
    referenced = set()
    if args.refs:
        contract = M.cmd_contract(argparse.Namespace(base=args.base, post=args.post, refs=args.refs, exclude_dir=args.exclude_dir))
        referenced = {s["qualname"] for s in contract["symbols"]}
    entries = []
    for rel, old, new in M.changed_py_files(args.base, args.post, args.exclude_dir):
        mod = M.module_name(rel)
        tree = M.parse(new, rel)
        old_tree = M.parse(old, rel + " (base)") if old is not None else None
        defs, old_defs = M.definitions(tree), (M.definitions(old_tree) if old_tree else {})
        if old_tree is None:
            entries.append({"file": rel, "qualname": mod, "kind": "module", "change": "added", "signature": "", "doc": first_paragraph(ast.get_docstring(tree)),
                            "line": 1, "public": True, "referenced": mod in referenced})

        def add(qual, kind, change, sig, doc, line, old_sig=None, params=None):
            full = "%s.%s" % (mod, qual)
            ref = full in referenced or any(r.startswith(full + "(") for r in referenced)
            e = {"file": rel, "qualname": qual, "kind": kind, "change": change, "signature": sig, "doc": first_paragraph(doc), "line": line,
                 "public": public(qual), "referenced": ref}
            if old_sig is not None:
                e["old_signature"] = old_sig
            if params:
                e["new_params"] = params
            entries.append(e)

        for qual, node in defs.items():
            parent = qual.rsplit(".", 1)[0] if "." in qual else None
            kind = "class" if isinstance(node, ast.ClassDef) else ("method" if parent else "function")
            old = old_defs.get(qual)
            if old is None or type(old) is not type(node):
                add(qual, kind, "added", signature(node), ast.get_docstring(node), node.lineno)
            elif isinstance(node, FUNC_TYPES):
                if signature(node) != signature(old):
                    new_params = [p for p in M.param_names(node) if p not in M.param_names(old)]
                    add(qual, kind, "signature", signature(node), ast.get_docstring(node), node.lineno, signature(old), new_params)
                elif dump(ast.Module(body=node.body, type_ignores=[])) != dump(ast.Module(body=old.body, type_ignores=[])):
                    add(qual, kind, "body", signature(node), ast.get_docstring(node), node.lineno)
            if isinstance(node, ast.ClassDef):
                old_fields = class_fields(old) if isinstance(old, ast.ClassDef) else {}
                for name, (line, text, doc) in class_fields(node).items():
                    if name not in old_fields:
                        add("%s.%s" % (qual, name), "attribute", "added", text, doc, line)
                    elif old_fields[name][1] != text:
                        add("%s.%s" % (qual, name), "attribute", "signature", text, doc, line, old_fields[name][1])
    return {"symbols": entries}


# ---------------------------------------------------------------------------- imports

# Distribution names whose import name differs (the common ones; anything else is matched by the
# normalised name itself).
IMPORT_TO_DIST = {"yaml": "pyyaml", "PIL": "pillow", "sklearn": "scikit-learn", "skimage": "scikit-image", "cv2": "opencv-python-headless",
                  "dateutil": "python-dateutil", "attr": "attrs", "google": "protobuf", "pkg_resources": "setuptools",
                  "typing_extensions": "typing-extensions", "mpl_toolkits": "matplotlib", "OpenSSL": "pyopenssl", "jwt": "pyjwt",
                  "serial": "pyserial", "Crypto": "pycryptodome", "zmq": "pyzmq", "git": "gitpython", "fitz": "pymupdf",
                  "lightning_utilities": "lightning-utilities", "torch_geometric": "torch-geometric", "huggingface_hub": "huggingface-hub"}


def norm_dist(name):
    return re.sub(r"[-_.]+", "-", name.strip().lower())


class GitReader:
    """Blobs of one commit through one `git cat-file --batch` process (argv, no shell)."""

    def __init__(self, git_dir, commit):
        self.commit = commit
        ls = subprocess.run(["git", "--git-dir", git_dir, "ls-tree", "-r", "-z", "--name-only", commit], capture_output=True)
        if ls.returncode != 0:
            raise InputError("%s: git ls-tree %s failed: %s" % (git_dir, commit, ls.stderr.decode(errors="replace").strip()))
        self.files = set(p.decode("utf-8", "surrogateescape") for p in ls.stdout.split(b"\0") if p)
        self.proc = subprocess.Popen(["git", "--git-dir", git_dir, "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def read(self, path):
        self.proc.stdin.write(("%s:%s\n" % (self.commit, path)).encode("utf-8", "surrogateescape"))
        self.proc.stdin.flush()
        header = self.proc.stdout.readline().decode()
        if header.endswith("missing\n"):
            return None
        size = int(header.split()[2])
        data = self.proc.stdout.read(size)
        self.proc.stdout.read(1)
        return data.decode("utf-8", errors="replace")

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def cmd_imports(args):
    g = GitReader(args.git_dir, args.commit)
    try:
        tops = {p.split("/")[0][:-3] if p.split("/")[0].endswith(".py") else p.split("/")[0] for p in g.files}
        std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names) | {"__future__"}

        def mod_file(m):
            p = m.replace(".", "/")
            for c in (p + ".py", p + "/__init__.py"):
                if c in g.files:
                    return c
            return None

        hard, guarded, seen = {}, {}, {}

        def visit(rel, guard):
            if rel is None or (rel in seen and (seen[rel] is False or guard)):
                return
            seen[rel] = guard
            mod = M.module_name(rel)
            parts = mod.split(".")
            for i in range(1, len(parts)):
                visit(mod_file(".".join(parts[:i])), guard)
            text = g.read(rel)
            if text is None:
                return
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                return
            is_pkg = rel.endswith("__init__.py")

            def walk(body, guarded_here):
                for n in body:
                    names = []
                    if isinstance(n, ast.Import):
                        names = [a.name for a in n.names]
                    elif isinstance(n, ast.ImportFrom):
                        base = n.module or ""
                        if n.level:
                            pp = parts if is_pkg else parts[:-1]
                            pp = pp[:len(pp) - (n.level - 1)]
                            base = ".".join(pp + ([base] if base else []))
                        names = [base] + ["%s.%s" % (base, a.name) for a in n.names]
                    elif isinstance(n, ast.Try):
                        walk(n.body, True)
                        for h in n.handlers:
                            walk(h.body, True)
                        walk(n.orelse, guarded_here)
                        walk(n.finalbody, guarded_here)
                    elif isinstance(n, ast.If):
                        walk(n.body, True)
                        walk(n.orelse, True)
                    elif isinstance(n, (ast.With, ast.AsyncWith)):
                        walk(n.body, guarded_here)
                    for name in names:
                        top = name.split(".")[0]
                        if not top or top in std:
                            continue
                        if top in tops:
                            visit(mod_file(name), guard or guarded_here)
                        else:
                            (guarded if (guard or guarded_here) else hard).setdefault(top, set()).add(rel)

            walk(tree.body, False)

        for s in args.start:
            if s not in g.files:
                raise InputError("%s: not in commit %s" % (s, args.commit))
            visit(s, False)
    finally:
        g.close()
    have = None
    if args.have:
        try:
            with open(args.have, encoding="utf-8") as f:
                have = {norm_dist(l) for l in f if l.strip() and not l.startswith("#")}
        except OSError as e:
            raise InputError("%s: cannot read (%s)" % (args.have, e))
    missing = []
    if have is not None:
        for top in sorted(hard):
            if norm_dist(top) not in have and norm_dist(IMPORT_TO_DIST.get(top, top)) not in have:
                missing.append(top)
    return {"visited": len(seen), "hard": {k: sorted(v)[:3] for k, v in sorted(hard.items())},
            "guarded": {k: sorted(v)[:3] for k, v in sorted(guarded.items()) if k not in hard}, "missing": missing if have is not None else None}


# ---------------------------------------------------------------------------- CLI

def main(argv):
    if sys.version_info < (3, 9):
        print("infradev_author: needs Python >= 3.9 (ast.unparse); this is %d.%d" % sys.version_info[:2], file=sys.stderr)
        return 2
    p = argparse.ArgumentParser(prog="infradev_author.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("select")
    s.add_argument("--base", required=True)
    s.add_argument("--post", required=True)
    s.add_argument("files", nargs="+")
    s = sub.add_parser("interface")
    s.add_argument("--base", required=True)
    s.add_argument("--post", required=True)
    s.add_argument("--exclude-dir", action="append", default=[])
    s.add_argument("--refs", action="append", default=[])
    s = sub.add_parser("imports")
    s.add_argument("--git-dir", required=True)
    s.add_argument("--commit", required=True)
    s.add_argument("--have")
    s.add_argument("start", nargs="+")
    args = p.parse_args(argv)
    if hasattr(args, "exclude_dir"):
        args.exclude_dir = [d.strip("/") for d in args.exclude_dir]
    for attr in ("base", "post", "git_dir"):
        d = getattr(args, attr, None)
        if d is not None and not os.path.isdir(d):
            print("infradev_author: --%s %s: not a folder" % (attr.replace("_", "-"), d), file=sys.stderr)
            return 2
    for d in getattr(args, "refs", None) or []:
        if not os.path.isdir(d):
            print("infradev_author: --refs %s: not a folder" % d, file=sys.stderr)
            return 2
    run = {"select": cmd_select, "interface": cmd_interface, "imports": cmd_imports}
    try:
        result = run[args.command](args)
    except InputError as e:
        print("infradev_author: %s" % e, file=sys.stderr)
        return 2
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
