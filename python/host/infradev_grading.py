"""Install the grading tests under names that tell nothing (run by the grader on the HOST).

    python3 -S infradev_grading.py < spec.json > map.json

The grader runs this with the task's interpreter over the task's own trusted files (post-PR tests,
hidden probes, the grader's canaries): never over anything a submission wrote. Stdlib only, so that
the interpreter needs nothing but itself.

spec (stdin, JSON):
    {"jobs": [{"src": DIR, "dest": DIR, "rel": "tests/abcdefgh", "real": "infradev_probes",
               "suite": "official" | "probe" | "canary"}, ...]}

Each job copies the tree `src` into `dest` (created; jobs may share a dest, later jobs add files).
Every test module (test_*.py / *_test.py) gets a random file name; in it, every module-level test
function (`def test_*`, `async def test_*`), test class (`class Test*`) and test method of such a
class gets a random name too, and same-module references to those names follow. Edits are made at
the source positions Python's ast gives, on the same lines, so line numbers stay as they were.
`@pytest.mark.probe(...)` decorators are blanked out (the map keeps their promise and kind), and
docstrings are emptied (strip_docstrings).
A job with "twins": N gets N twin tests appended to its modules (after the last line, so line
numbers hold): each runs one of the job's plain tests with the same fixtures and then fails, so it
must never pass (twin_source).
Conftest files and helper modules are copied as they are, except in a job with
"rename_helpers": true (the probes' folder), whose top-level helper modules get random names too,
every import of them in that folder following (`import m`, `import m as x`, `from m import ...`).
A job with "conftest_plugin": true (the probes, installed beside the official tests, where the
folder's conftest.py is the official one) has its top-level conftest.py written as a helper module
with a random name instead; the map names it ("plugin") and the probe sessions load it as a pytest
plugin from that file (infradev_rank_boot.py), so the probes keep their fixtures and hooks.

map (stdout, JSON):
    {"files": {"<rel>/<installed file>": {"real": "<real>/<file>", "suite": ...,
               "names": {"<installed>": "<real>"},              # module-level functions, classes
               "methods": {"<installed class>": {"<installed>": "<real>"}},
               "known": ["<name>", ...]}},  # the other names bound at module level (not renamed)
               "twins": {"<installed twin>": "<real name of the test it runs>"}},
     "markers": {"<real file>::<name>[::<method>]": {"promise": ..., "kind": ...}},
     "helpers": {"<rel>/<installed helper>.py": "<real>/<helper>.py"},
     "plugins": ["<rel>/<installed conftest>.py", ...]}   # conftest_plugin jobs' conftests
"""

import ast
import json
import os
import re
import secrets
import shutil
import string
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's folder out

from infradev_twins import mutant_twin_source  # noqa: E402

TEST_MODULE = re.compile(r"^(test_.*|.*_test)\.py$")
ALPHABET = string.ascii_lowercase


class InstallError(Exception):
    pass


class Names:
    """Random names, unique over the whole install (module basenames must not clash for pytest)."""

    def __init__(self):
        self.used = set()

    def fresh(self, prefix, length=10):
        while True:
            name = prefix + "".join(secrets.choice(ALPHABET) for _ in range(length))
            if name not in self.used:
                self.used.add(name)
                return name

    def module(self):
        return self.fresh("test_") + ".py"

    def function(self):
        return self.fresh("test_")

    def klass(self):
        name = self.fresh("", 11)
        return "Test" + name[0].upper() + name[1:]


def dotted(node):
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return None if base is None else base + "." + node.attr
    return None


def probe_marker(dec):
    """(promise, kind) when `dec` is `@pytest.mark.probe(...)` (or `@mark.probe(...)`), else None."""
    func = dec.func if isinstance(dec, ast.Call) else dec
    name = dotted(func)
    if name is None or not (name == "mark.probe" or name.endswith(".mark.probe")):
        return None
    if not isinstance(dec, ast.Call):
        raise InstallError("line %d: @%s without (promise, kind)" % (dec.lineno, name))
    try:
        args = [ast.literal_eval(a) for a in dec.args]
        kwargs = {k.arg: ast.literal_eval(k.value) for k in dec.keywords}
    except ValueError:
        raise InstallError("line %d: the probe marker's arguments must be literals" % dec.lineno)
    promise = kwargs.get("promise", args[0] if args else None)
    kind = kwargs.get("kind", args[1] if len(args) > 1 else None)
    return {"promise": promise, "kind": kind}


class Edits:
    """Replacements on a source held as lines of bytes; ast columns are UTF-8 byte offsets."""

    def __init__(self, source_bytes):
        self.lines = source_bytes.split(b"\n")
        self.edits = []  # (line index, start col, end col, replacement bytes)

    def replace(self, lineno, start, end, text):
        self.edits.append((lineno - 1, start, end, text.encode("utf-8")))

    def blank(self, lineno, col, end_lineno, end_col):
        """Spaces over a span (newlines kept), so nothing moves to another line."""
        for ln in range(lineno, end_lineno + 1):
            line = self.lines[ln - 1]
            a = col if ln == lineno else 0
            b = end_col if ln == end_lineno else len(line.rstrip(b"\r"))
            self.edits.append((ln - 1, a, b, b" " * (b - a)))

    def apply(self):
        by_line = {}
        for ln, a, b, text in self.edits:
            by_line.setdefault(ln, []).append((a, b, text))
        for ln, edits in by_line.items():
            line = self.lines[ln]
            edits.sort()
            for (a1, b1, _), (a2, _b2, _) in zip(edits, edits[1:]):
                if a2 < b1:
                    raise InstallError("line %d: overlapping edits" % (ln + 1))
            for a, b, text in reversed(edits):
                line = line[:a] + text + line[b:]
            if not line.strip():  # a line that held only a removed decorator: empty, not spaces
                line = b"\r" if line.endswith(b"\r") else b""
            self.lines[ln] = line
        return b"\n".join(self.lines)


DEF_NAME = re.compile(rb"(?:async\s+)?(?:def|class)\s+([A-Za-z_][A-Za-z0-9_]*)")


def name_span(edits, node):
    """(start, end) byte columns of a def's / class's name on its `def` / `class` line."""
    line = edits.lines[node.lineno - 1]
    m = DEF_NAME.match(line, node.col_offset)
    if not m or m.group(1).decode() != node.name:
        raise InstallError("line %d: cannot find the name of %s" % (node.lineno, node.name))
    return m.start(1), m.end(1)


def at_sign(edits, dec):
    """Byte column of the '@' that starts a decorator (its node starts after it)."""
    line = edits.lines[dec.lineno - 1]
    at = line.rfind(b"@", 0, dec.col_offset)
    if at < 0 or line[:at].strip():
        raise InstallError("line %d: cannot find the decorator's '@'" % dec.lineno)
    return at


def is_test_function(node):
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")


def is_test_class(node):
    return isinstance(node, ast.ClassDef) and node.name.startswith("Test")


def bound_names(tree):
    """Every name bound at module level (defs, classes, imports, assignments)."""
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                out.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out.add(n.id)
    return sorted(out)


FROM_MODULE = re.compile(rb"from\s+\.*\s*([A-Za-z_][A-Za-z0-9_]*)")


def rename_imports(tree, edits, modules):
    """Imports of renamed helper modules (`import m`, `import m as x`, `from m import ...`,
    `from .m import ...`) and, where `import m` binds the name, its uses (`m.f`)."""
    bound = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in modules:
            line = edits.lines[node.lineno - 1]
            m = FROM_MODULE.match(line, node.col_offset)
            if not m or m.group(1).decode() != node.module.split(".")[0]:
                raise InstallError("line %d: cannot find the module of this import" % node.lineno)
            edits.replace(node.lineno, m.start(1), m.end(1), modules[node.module.split(".")[0]])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top not in modules:
                    continue
                lineno = getattr(alias, "lineno", None)
                if lineno is not None:  # Python 3.10+: aliases have positions
                    start = alias.col_offset
                else:
                    line = edits.lines[node.lineno - 1]
                    found = re.search(rb"\b" + re.escape(top.encode()) + rb"\b", line[node.col_offset:])
                    if not found or node.end_lineno != node.lineno:
                        raise InstallError("line %d: cannot find the module of this import" % node.lineno)
                    lineno, start = node.lineno, node.col_offset + found.start()
                edits.replace(lineno, start, start + len(top.encode()), modules[top])
                if alias.asname is None:
                    bound.add(top)
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in bound:
            edits.replace(node.lineno, node.col_offset, node.end_col_offset, modules[node.id])


def strip_docstrings(tree, edits):
    """Docstrings (module, class, function) emptied in place: `__doc__` of a test or of its module
    would otherwise say what it checks ("Resource probes: ...") to code that looks. The string
    becomes "" and the lines it spanned stay, so nothing moves."""
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        body = node.body
        if not body or not isinstance(body[0], ast.Expr):
            continue
        value = body[0].value
        if not (isinstance(value, ast.Constant) and isinstance(value.value, str)) or value.end_lineno is None:
            continue
        edits.blank(value.lineno, value.col_offset, value.end_lineno, value.end_col_offset)
        edits.replace(value.lineno, value.col_offset, value.col_offset, '""')


def rename_helper(source_bytes, modules):
    """A conftest or helper module of the probes' folder: its imports of renamed helper modules
    change, and its docstrings are emptied."""
    try:
        tree = ast.parse(source_bytes)
    except SyntaxError as e:
        raise InstallError("does not parse: %s" % e)
    edits = Edits(source_bytes)
    rename_imports(tree, edits, modules)
    strip_docstrings(tree, edits)
    out = edits.apply()
    try:
        ast.parse(out)
    except SyntaxError as e:
        raise InstallError("the rewritten helper does not parse: %s" % e)
    return out


def rename_module(source_bytes, names, real_file, markers, modules=None):
    """The renamed source and its name maps. `markers` (real id -> marker) is filled in.
    `modules`: helper modules of the same folder that got random names (old -> new)."""
    try:
        tree = ast.parse(source_bytes)
    except SyntaxError as e:
        raise InstallError("does not parse: %s" % e)
    edits = Edits(source_bytes)
    if modules:
        rename_imports(tree, edits, modules)
    strip_docstrings(tree, edits)
    top = {}  # real -> installed
    methods = {}  # real class -> {real method -> installed}

    def strip_probe_decorators(node, real_id):
        for dec in node.decorator_list:
            marker = probe_marker(dec)
            if marker is None:
                continue
            markers[real_id] = marker
            edits.blank(dec.lineno, at_sign(edits, dec), dec.end_lineno, dec.end_col_offset)

    twinnable = []  # (real name, argument names) of tests a twin can call (see add_twins)
    for node in tree.body:
        if is_test_function(node):
            top[node.name] = names.function()
            a, b = name_span(edits, node)
            edits.replace(node.lineno, a, b, top[node.name])
            strip_probe_decorators(node, "%s::%s" % (real_file, node.name))
            if twinnable_args(node) is not None:
                twinnable.append((node.name, twinnable_args(node)))
        elif is_test_class(node):
            top[node.name] = names.klass()
            a, b = name_span(edits, node)
            edits.replace(node.lineno, a, b, top[node.name])
            strip_probe_decorators(node, "%s::%s" % (real_file, node.name))
            ms = methods.setdefault(node.name, {})
            for item in node.body:
                if is_test_function(item):
                    ms[item.name] = names.function()
                    a, b = name_span(edits, item)
                    edits.replace(item.lineno, a, b, ms[item.name])
                    strip_probe_decorators(item, "%s::%s::%s" % (real_file, node.name, item.name))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for dec in node.decorator_list:
                if probe_marker(dec) is not None:
                    raise InstallError("line %d: a probe marker on %s, which pytest does not collect" % (dec.lineno, node.name))

    # Same-module references: a renamed module-level name wherever it is read or rebound, and
    # `<renamed class or self/cls>.<renamed method>`. Strings (ids=, -k expressions) are data and
    # stay as they are.
    all_methods = {}
    for ms in methods.values():
        all_methods.update(ms)
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id in top:
            edits.replace(n.lineno, n.col_offset, n.end_col_offset, top[n.id])
        elif isinstance(n, ast.Attribute) and n.attr in all_methods and n.end_lineno is not None:
            base = n.value
            if isinstance(base, ast.Name) and (base.id in ("self", "cls") or base.id in methods):
                line = edits.lines[n.end_lineno - 1]
                start = n.end_col_offset - len(n.attr.encode("utf-8"))
                if line[start:n.end_col_offset] == n.attr.encode("utf-8"):
                    owner = methods.get(base.id)
                    new = (owner or all_methods).get(n.attr)
                    if new is not None:
                        edits.replace(n.end_lineno, start, n.end_col_offset, new)
    out = edits.apply()
    try:
        ast.parse(out)
    except SyntaxError as e:  # a bug here, never the task's fault: say so loudly
        raise InstallError("the renamed module does not parse: %s" % e)
    inv = lambda d: {v: k for k, v in d.items()}
    return out, {
        "names": inv(top),
        "methods": {top[c]: inv(ms) for c, ms in methods.items() if ms},
        "known": [n for n in bound_names(tree) if n not in top],
        "twinnable": [(real, top[real], args) for real, args in twinnable],
    }


def twinnable_args(node):
    """The argument names of a plain module-level test a twin can call with the same fixtures, or
    None: only `def test_x(a, b)` with no decorator left (probe markers are blanked), no defaults,
    no *args / **kwargs / keyword-only arguments, not async."""
    if not isinstance(node, ast.FunctionDef):
        return None
    if any(probe_marker(d) is None for d in node.decorator_list):
        return None
    a = node.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.kw_defaults or getattr(a, "posonlyargs", []):
        return None
    return [x.arg for x in a.args]


def twin_source(twin, target, args, rng):
    """A test that runs another test of its module with the same fixtures, then fails whatever
    happened: it must never pass. A harness that turns the failures of tests touching the code
    under test into passes turns this one too, and is caught (the grader's canaries never call the
    submission's code; these do, exactly as the real tests do)."""
    params = ", ".join(args)
    a = rng.randint(2, 97)
    b = a + rng.randint(1, 9)
    style = rng.randrange(3)
    if style == 0:
        check = "    assert abs(%d.%02d - %d.%02d) < 1e-06" % (a, rng.randint(0, 99), b, rng.randint(0, 99))
    elif style == 1:
        check = "    assert %d %% %d == %d" % (a * b + 1, b, 0)
    else:
        check = "    assert len(%r) == %d" % ("x" * a, b)
    return "\n\ndef %s(%s):\n    %s(%s)\n%s\n" % (twin, params, target, params, check)


def helper_modules(src, names, conftest=False):
    """The probe folder's own helper modules (top level, not tests; the conftest too when it becomes
    a plugin): random names too, so that no module name says what the folder is. old stem -> new stem."""
    out = {}
    skip = ("__init__.py",) if conftest else ("conftest.py", "__init__.py")
    for name in sorted(os.listdir(src)):
        if name.endswith(".py") and name not in skip and not TEST_MODULE.match(name) and os.path.isfile(os.path.join(src, name)):
            out[name[:-3]] = names.fresh("", 10)
    return out


def fixture_names(path):
    """The fixtures a conftest defines at module level (`@pytest.fixture`, `@fixture(...)`, any
    decorator whose dotted name ends in `fixture`)."""
    with open(path, "rb") as f:
        try:
            tree = ast.parse(f.read())
        except SyntaxError as e:
            raise InstallError("%s: does not parse: %s" % (path, e))
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for dec in node.decorator_list:
                name = dotted(dec.func if isinstance(dec, ast.Call) else dec) or ""
                if name == "fixture" or name.endswith(".fixture"):
                    out.append(node.name)
                    break
    return out


def copy_tree(job, names, result):
    src, dest, rel, real, suite = job["src"], job["dest"], job["rel"].strip("/"), job["real"].strip("/"), job["suite"]
    if not os.path.isdir(src):
        raise InstallError("%s: not a folder" % src)
    if job.get("conftest_plugin") and not job.get("rename_helpers"):
        raise InstallError("%s: conftest_plugin needs rename_helpers" % src)
    modules = helper_modules(src, names, conftest=bool(job.get("conftest_plugin"))) if job.get("rename_helpers") else {}
    if job.get("conftest_plugin") and "conftest" in modules:
        result["plugins"].append("/".join(p for p in (rel, modules["conftest"] + ".py") if p))
        # As a plugin its fixtures would lose to a same-named fixture of the official conftest.py of
        # the folder (a conftest's baseid is more specific than a plugin's); as a deeper conftest they
        # won. Each top-level probe module imports them at its end (module-level fixtures win over any
        # conftest's), so every probe gets the fixture it was written against.
        job = dict(job, fixture_import=(modules["conftest"], fixture_names(os.path.join(src, "conftest.py"))))
    pending = []  # renamed test modules, written once the twins are chosen
    _copy_files(job, names, result, src, dest, rel, real, suite, modules, pending)
    add_twins(pending, int(job.get("twins", 0) or 0), names)
    for p in pending:
        with open(p["target"], "xb") as f:
            f.write(p["text"])


def add_twins(pending, count, names):
    """`count` twins of tests picked at random among the job's plain tests: mutant twins where the
    body can be copied (infradev_twins.py), else plain ones (twin_source)."""
    rng = secrets.SystemRandom()
    pool = [(p, c) for p in pending for c in p["candidates"]]
    for p, (real, installed, args) in rng.sample(pool, min(count, len(pool))):
        twin = names.function()
        text = p["text"]
        source = mutant_twin_source(text, installed, twin, rng) or twin_source(twin, installed, args, rng)
        p["text"] = text + (b"" if text.endswith(b"\n") else b"\n") + source.encode()
        p["entry"]["twins"][twin] = real


def _copy_files(job, names, result, src, dest, rel, real, suite, modules, pending):
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        sub = os.path.relpath(dirpath, src)
        sub = "" if sub == "." else sub.replace(os.sep, "/")
        out_dir = os.path.join(dest, sub) if sub else dest
        os.makedirs(out_dir, exist_ok=True)
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise InstallError("%s/%s: a symlink in the grading tests" % (src, d))
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if name.endswith((".pyc", ".pyo")):
                continue
            if os.path.islink(path) or not os.path.isfile(path):
                raise InstallError("%s: not a regular file" % path)
            real_file = "/".join(p for p in (real, sub, name) if p)
            if TEST_MODULE.match(name):
                with open(path, "rb") as f:
                    source = f.read()
                try:
                    text, maps = rename_module(source, names, real_file, result["markers"], modules)
                except InstallError as e:
                    raise InstallError("%s: %s" % (real_file, e))
                imports = job.get("fixture_import")
                if imports:
                    own = set(maps["known"]) | set(maps["names"].values())
                    wanted = [n for n in imports[1] if n not in own]
                    if wanted:
                        text = text + (b"" if text.endswith(b"\n") else b"\n") + ("from %s import %s  # noqa: E402,F401\n" % (imports[0], ", ".join(wanted))).encode()
                new_name = names.module()
                target = os.path.join(out_dir, new_name)
                installed = "/".join(p for p in (rel, sub, new_name) if p)
                candidates = maps.pop("twinnable")
                entry = {"real": real_file, "suite": suite, "twins": {}}
                entry.update(maps)
                result["files"][installed] = entry
                pending.append({"target": target, "text": text, "entry": entry, "candidates": candidates})
            elif job.get("rename_helpers") and name.endswith(".py"):
                stem = name[:-3]
                new_name = (modules[stem] + ".py") if not sub and stem in modules else name
                target = os.path.join(out_dir, new_name)
                with open(path, "rb") as f:
                    source = f.read()
                try:
                    text = rename_helper(source, modules)
                except InstallError as e:
                    raise InstallError("%s: %s" % (real_file, e))
                with open(target, "xb") as f:
                    f.write(text)
                shutil.copymode(path, target)
                if new_name != name:
                    result["helpers"]["/".join(p for p in (rel, sub, new_name) if p)] = real_file
            else:
                target = os.path.join(out_dir, name)
                if os.path.lexists(target):
                    raise InstallError("%s: two grading files at %s" % (real_file, target))
                shutil.copyfile(path, target)
                shutil.copymode(path, target)


def main():
    spec = json.load(sys.stdin)
    names = Names()
    result = {"files": {}, "markers": {}, "helpers": {}, "plugins": []}
    try:
        for job in spec["jobs"]:
            copy_tree(job, names, result)
    except InstallError as e:
        sys.stderr.write("infradev_grading: %s\n" % e)
        return 2
    json.dump(result, sys.stdout, indent=None, separators=(",", ":"), sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
