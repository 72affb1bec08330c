#!/usr/bin/env python3
"""Static analysis of a Python repo with the standard library's `ast` (no import, no execution).

Two questions an infra change raises, answered as JSON on stdout:

  callers  --root DIR --symbol pkg.mod.Class.method
      Every call site (and non-call reference) of a function, class or method, each with file,
      line, column, the line's text, the enclosing function, and how sure the match is:
        exact     - resolved through imports / self / the class itself
        probable  - the receiver was assigned from the class in the same scope (x = Cls(...),
                    self.attr = Cls(...)) or the class is a base of the caller's class
        name-only - same attribute / bare name, receiver type unknown (check it by hand)

  changed  --base DIR --root DIR
      Functions and classes (module-level and class-level, by qualified name) that the tree at
      --root adds, changes or removes relative to --base, with line ranges, so a caller can list
      what a patch touches or stub out the bodies it adds (a "hollow" patch).

Reads files as text only; a file that does not parse is reported under parse_errors and skipped.
Stdlib only, Python >= 3.8.
"""

import argparse
import ast
import json
import os
import sys

SKIP_DIRS = {".git", ".hg", ".svn", ".infradev", "__pycache__", ".venv", "venv", ".tox", ".nox",
             "node_modules", ".eggs", ".mypy_cache", ".pytest_cache", "site-packages"}
MAX_FILE_BYTES = 2 * 1024 * 1024
TEXT_CAP = 240


# ---------------------------------------------------------------------------- files and modules

def iter_py_files(root):
    """Relative paths of every .py file under root, sorted, skipping caches and VCS folders.
    Symlinked folders are not followed (a link cannot pull files from outside the root)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.endswith(".egg-info"))
        for name in filenames:
            if name.endswith(".py"):
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    continue
                out.append(os.path.relpath(full, root))
    out.sort()
    return out


def read_source(root, rel):
    full = os.path.join(root, rel)
    if os.path.getsize(full) > MAX_FILE_BYTES:
        raise ValueError("larger than %d bytes" % MAX_FILE_BYTES)
    with open(full, "rb") as f:
        data = f.read()
    return data.decode("utf-8", errors="replace")


def parse_file(root, rel, errors):
    try:
        text = read_source(root, rel)
        return text, ast.parse(text, filename=rel)
    except SyntaxError as e:
        errors.append({"file": rel, "message": "SyntaxError: %s (line %s)" % (e.msg, e.lineno)})
    except (OSError, ValueError) as e:
        errors.append({"file": rel, "message": str(e)})
    return None, None


def module_name_of(rel):
    """nanoinfra/parallel.py -> nanoinfra.parallel; pkg/__init__.py -> pkg; src/ layouts drop src."""
    parts = rel[:-3].split(os.sep)
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if parts and parts[0] == "src" and len(parts) > 1:
        parts = parts[1:]
    return ".".join(parts)


def find_module_file(root, dotted):
    """The file defining module `dotted` under root (plain or src/ layout), or None."""
    rel = dotted.replace(".", os.sep)
    for base in ("", "src"):
        for cand in (rel + ".py", os.path.join(rel, "__init__.py")):
            path = os.path.join(base, cand) if base else cand
            if os.path.isfile(os.path.join(root, path)) and not os.path.islink(os.path.join(root, path)):
                return path
    return None


# ---------------------------------------------------------------------------- definitions

def definitions(tree):
    """qualname -> node for module-level and class-level functions and classes (nested classes too)."""
    out = {}

    def visit(body, prefix):
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[prefix + node.name] = node
            elif isinstance(node, ast.ClassDef):
                out[prefix + node.name] = node
                visit(node.body, prefix + node.name + ".")

    visit(tree.body, "")
    return out


def resolve_symbol(root, symbol):
    """Splits pkg.mod.Class.method into (module, file, qualname, node) using the longest module
    prefix that exists under root. Returns None when no prefix is a module of this repo."""
    parts = symbol.split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        rel = find_module_file(root, module)
        if rel is None:
            continue
        qual = ".".join(parts[cut:])
        errors = []
        _, tree = parse_file(root, rel, errors)
        node = definitions(tree).get(qual) if (tree is not None and qual) else None
        return {"module": module, "file": rel, "qualname": qual, "node": node, "tree": tree}
    return None


def kind_of(node, qualname):
    if isinstance(node, ast.ClassDef):
        return "class"
    if node is not None and "." in qualname:
        return "method"
    return "function"


# ---------------------------------------------------------------------------- callers

def dotted_name(expr):
    """a.b.c for Name/Attribute chains, else None."""
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return None


def import_aliases(tree, current_module):
    """local name -> fully dotted name it stands for, from the module's import statements."""
    aliases = {}
    pkg_parts = current_module.split(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    top = a.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                # Relative import: strip `level` trailing parts of the current module's package.
                anchor = pkg_parts[: max(0, len(pkg_parts) - node.level)]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                if a.name == "*":
                    continue
                aliases[a.asname or a.name] = (base + "." + a.name) if base else a.name
    return aliases


def expand(name, aliases):
    """Rewrites a dotted local name through the import aliases: m.f with `import pkg.mod as m` -> pkg.mod.f."""
    head, _, rest = name.partition(".")
    if head in aliases:
        full = aliases[head]
        return full + ("." + rest if rest else "")
    return name


class Scope(object):
    def __init__(self, qualname, class_name, class_bases):
        self.qualname = qualname
        self.class_name = class_name  # enclosing class (for self / cls)
        self.class_bases = class_bases
        self.typed = {}  # local name or "self.attr" -> dotted class name it was built from


class CallerFinder(ast.NodeVisitor):
    def __init__(self, target, rel, module, aliases, lines, class_attr_types, factories):
        self.t = target
        self.factories = factories  # dotted function -> dotted class every one of its returns builds
        self.rel = rel
        self.module = module
        self.aliases = aliases
        self.lines = lines
        self.class_attr_types = class_attr_types  # class name -> {"self.attr": dotted class}
        self.scopes = [Scope("<module>", None, [])]
        self.hits = []
        self.in_call_func = set()

    # -- helpers
    def full(self, dotted):
        if dotted is None:
            return None
        expanded = expand(dotted, self.aliases)
        if expanded == dotted and "." not in dotted:
            # A bare name defined in this very module.
            return self.module + "." + dotted
        return expanded

    def is_target_class(self, dotted_full):
        return dotted_full == self.t["class_full"]

    def record(self, node, match, kind):
        line = node.lineno
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        if len(text) > TEXT_CAP:
            text = text[:TEXT_CAP] + "..."
        self.hits.append({
            "file": self.rel,
            "line": line,
            "col": node.col_offset,
            "text": text,
            "in_function": self.scopes[-1].qualname,
            "match": match,
            "kind": kind,
        })

    # -- scopes
    def visit_ClassDef(self, node):
        outer = self.scopes[-1]
        qual = node.name if outer.qualname == "<module>" else outer.qualname + "." + node.name
        bases = [self.full(dotted_name(b)) for b in node.bases]
        self.scopes.append(Scope(qual, node.name, [b for b in bases if b]))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        for d in node.decorator_list:
            self.visit(d)

    def visit_FunctionDef(self, node):
        outer = self.scopes[-1]
        qual = node.name if outer.qualname == "<module>" else outer.qualname + "." + node.name
        scope = Scope(qual, outer.class_name, outer.class_bases)
        if outer.class_name is not None:
            scope.typed.update(self.class_attr_types.get(outer.class_name, {}))
        self.scopes.append(scope)
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()
        for d in node.decorator_list:
            self.visit(d)
        for default in node.args.defaults + node.args.kw_defaults:
            if default is not None:
                self.visit(default)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        # x = Cls(...)  /  self.attr = Cls(...)  remember the class for later x.m() calls.
        if isinstance(node.value, ast.Call):
            cls = self.full(dotted_name(node.value.func))
            cls = self.factories.get(cls, cls)
            for tgt in node.targets:
                key = dotted_name(tgt)
                if key and cls:
                    self.scopes[-1].typed[key] = cls
        self.generic_visit(node)

    # -- matches
    def visit_Call(self, node):
        self.in_call_func.add(id(node.func))
        self.check(node.func, node, "call")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        if id(node) not in self.in_call_func:
            self.check(node, node, "reference")
        self.generic_visit(node)

    def visit_Name(self, node):
        if id(node) not in self.in_call_func and isinstance(node.ctx, ast.Load):
            self.check(node, node, "reference")

    def check(self, func, node, kind):
        t = self.t
        name = t["name"]
        if isinstance(func, ast.Name):
            if func.id == name or func.id in t["local_aliases"].get(self.rel, ()):
                full = self.full(func.id)
                if t["kind"] != "method" and full == t["full"]:
                    self.record(node, "exact", kind)
                elif t["kind"] != "method" and kind == "call":
                    self.record(node, "name-only", kind)
            return
        if not isinstance(func, ast.Attribute) or func.attr != name:
            return
        receiver = func.value
        recv_dotted = dotted_name(receiver)
        scope = self.scopes[-1]
        if t["kind"] != "method":
            if recv_dotted and self.full(recv_dotted) + "." + name == t["full"]:
                self.record(node, "exact", kind)
            elif kind == "call":
                self.record(node, "name-only", kind)
            return
        # Methods.
        cls_full = t["class_full"]
        in_target_class = scope.class_name is not None and (
            self.module + "." + scope.class_name == cls_full or cls_full in scope.class_bases)
        if recv_dotted in ("self", "cls") and in_target_class:
            match = "exact" if self.module + "." + scope.class_name == cls_full else "probable"
            self.record(node, match, kind)
        elif isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super" and in_target_class:
            self.record(node, "probable", kind)
        elif recv_dotted and self.full(recv_dotted) == cls_full:
            self.record(node, "exact", kind)  # Cls.method(obj)
        elif recv_dotted and scope.typed.get(recv_dotted) == cls_full:
            self.record(node, "probable", kind)
        elif isinstance(receiver, ast.Call) and self.full(dotted_name(receiver.func)) == cls_full:
            self.record(node, "probable", kind)  # Cls(...).method()
        elif kind == "call":
            self.record(node, "name-only", kind)


def local_full(name, module, aliases):
    expanded = expand(name, aliases)
    return module + "." + name if (expanded == name and "." not in name) else expanded


def factory_functions(tree, module, aliases):
    """Module-level functions whose every `return` builds one class: `def make(): return Cls(...)`.
    Lets `x = make()` count as an instance of Cls."""
    out = {}
    for fn in tree.body:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        built = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Return):
                callee = dotted_name(node.value.func) if isinstance(node.value, ast.Call) else None
                built.add(local_full(callee, module, aliases) if callee else None)
        if len(built) == 1 and None not in built:
            out[module + "." + fn.name] = built.pop()
    return out


def class_attribute_types(tree, module, aliases, factories):
    """class name -> {"self.attr": dotted class} from `self.attr = Cls(...)` anywhere in the class."""
    out = {}
    for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]:
        types = {}
        for node in ast.walk(cls):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                callee = dotted_name(node.value.func)
                if not callee:
                    continue
                full = local_full(callee, module, aliases)
                full = factories.get(full, full)
                for tgt in node.targets:
                    key = dotted_name(tgt)
                    if key and key.startswith("self."):
                        types[key] = full
        out[cls.name] = types
    return out


def find_callers(root, symbol, max_results=500):
    errors = []
    resolved = resolve_symbol(root, symbol)
    notes = []
    if resolved is None:
        notes.append("no module of this repo matches a prefix of %r; matching by name only" % symbol)
        module, qual = "", symbol
        parts = symbol.split(".")
        kind = "method" if len(parts) >= 2 and parts[-2][:1].isupper() else "function"
        node = None
    else:
        module, qual, node = resolved["module"], resolved["qualname"], resolved["node"]
        if not qual:
            return {"symbol": symbol, "error": "%r is a module; name a function, class or method inside it" % symbol}
        if node is None:
            notes.append("%s has no definition %r; matching by name only" % (resolved["file"], qual))
        kind = kind_of(node, qual)
    qparts = qual.split(".")
    target = {
        "name": qparts[-1],
        "kind": kind,
        "full": (module + "." + qual) if module else qual,
        "class_full": ((module + "." + ".".join(qparts[:-1])) if module else ".".join(qparts[:-1])) if kind == "method" else None,
        "local_aliases": {},
    }
    files = iter_py_files(root)
    parsed = []
    factories = {}
    for rel in files:
        text, tree = parse_file(root, rel, errors)
        if tree is None:
            continue
        mod = module_name_of(rel)
        aliases = import_aliases(tree, mod)
        factories.update(factory_functions(tree, mod, aliases))
        parsed.append((rel, text, tree, mod, aliases))
    hits = []
    for rel, text, tree, mod, aliases in parsed:
        # `from pkg.mod import func as other` makes `other(...)` a call of the target.
        local = [k for k, v in aliases.items() if v == target["full"] and k != target["name"]]
        target["local_aliases"][rel] = set(local)
        finder = CallerFinder(target, rel, mod, aliases, text.splitlines(), class_attribute_types(tree, mod, aliases, factories), factories)
        finder.visit(tree)
        hits.extend(finder.hits)
    # The definition line itself is not a caller.
    if resolved is not None and node is not None:
        hits = [h for h in hits if not (h["file"] == resolved["file"] and h["line"] == node.lineno and h["kind"] == "reference")]
    order = {"exact": 0, "probable": 1, "name-only": 2}
    hits.sort(key=lambda h: (order[h["match"]], h["file"], h["line"], h["col"]))
    out = {
        "symbol": symbol,
        "definition": None,
        "kind": kind,
        "callers": hits[:max_results],
        "count": len(hits),
        "counts": {m: sum(1 for h in hits if h["match"] == m) for m in ("exact", "probable", "name-only")},
        "truncated": len(hits) > max_results,
        "files_scanned": len(files),
        "parse_errors": errors,
        "notes": notes,
    }
    if resolved is not None and node is not None:
        out["definition"] = {"file": resolved["file"], "line": node.lineno, "end_line": getattr(node, "end_lineno", node.lineno)}
    return out


# ---------------------------------------------------------------------------- changed

def def_table(root, rel, errors):
    _, tree = parse_file(root, rel, errors)
    if tree is None:
        return None
    table = {}
    for qual, node in definitions(tree).items():
        body_first = node.body[0]
        # A docstring is part of the interface, not of the body a hollow patch would replace.
        if (isinstance(body_first, ast.Expr) and isinstance(getattr(body_first, "value", None), ast.Constant)
                and isinstance(body_first.value.value, str) and len(node.body) > 1):
            body_first = node.body[1]
        table[qual] = {
            "kind": "class" if isinstance(node, ast.ClassDef) else ("method" if "." in qual else "function"),
            "line": node.lineno,
            "end_line": getattr(node, "end_lineno", node.lineno),
            "body_line": body_first.lineno,
            "dump": ast.dump(node),
        }
    return table


def changed_definitions(base, root):
    errors = []
    base_files = set(iter_py_files(base))
    root_files = set(iter_py_files(root))
    added, changed, removed = [], [], []
    files = {"added": sorted(root_files - base_files), "removed": sorted(base_files - root_files), "modified": []}
    for rel in sorted(base_files | root_files):
        old = def_table(base, rel, errors) if rel in base_files else {}
        new = def_table(root, rel, errors) if rel in root_files else {}
        if old is None or new is None:
            continue
        if rel in base_files and rel in root_files and read_source(base, rel) != read_source(root, rel):
            files["modified"].append(rel)
        for qual, info in new.items():
            entry = {"file": rel, "qualname": qual, "kind": info["kind"], "line": info["line"],
                     "end_line": info["end_line"], "body_line": info["body_line"]}
            if qual not in old:
                added.append(entry)
            elif old[qual]["dump"] != info["dump"]:
                changed.append(entry)
        for qual, info in old.items():
            if qual not in new:
                removed.append({"file": rel, "qualname": qual, "kind": info["kind"], "line": info["line"],
                                "end_line": info["end_line"], "body_line": info["body_line"]})
    return {"added": added, "changed": changed, "removed": removed, "files": files, "parse_errors": errors}


# ---------------------------------------------------------------------------- CLI

def main(argv=None):
    parser = argparse.ArgumentParser(prog="infradev_analysis.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("callers", help="call sites of pkg.mod.Class.method / pkg.mod.func / pkg.mod.Class")
    p.add_argument("--root", required=True)
    p.add_argument("--symbol", required=True)
    p.add_argument("--max", type=int, default=500)
    c = sub.add_parser("changed", help="functions / classes added, changed or removed between two trees")
    c.add_argument("--base", required=True)
    c.add_argument("--root", required=True)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return 2
    for d in [args.root] + ([args.base] if args.command == "changed" else []):
        if not os.path.isdir(d):
            sys.stderr.write("infradev_analysis: %s is not a directory\n" % d)
            return 2
    if args.command == "callers":
        if not args.symbol or args.symbol.startswith(".") or args.symbol.endswith(".") or ".." in args.symbol:
            sys.stderr.write("infradev_analysis: --symbol must be dotted like pkg.mod.Class.method (got %r)\n" % args.symbol)
            return 2
        result = find_callers(os.path.abspath(args.root), args.symbol, args.max)
    else:
        result = changed_definitions(os.path.abspath(args.base), os.path.abspath(args.root))
    json.dump(result, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
