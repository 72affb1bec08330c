"""Golden-differential probes: golden's code and the submission's, side by side on generated workloads.

Host-only source: the grader copies this file into the probes' folder of a task that declares
hidden/differential.yaml (src/task/hidden/differential.ts), where it is installed under a random
name like every probe helper; it never lies in a sandbox the agent works in.

A task's driver (hidden/<driver>.py, written by the task author) defines

    generate(rng, index, count, world_size) -> dict   # one JSON-able workload, the same on every rank
    shrink(workload) -> iterable of dict                 # optional: smaller workloads to try first
    run(impl, workload, rec) -> None                     # drives impl's interface; records calls, values

`impl.module("pkg.mod")` is golden's module (a private copy, base + golden.patch, loaded under a
package name of its own) or the submission's (the real import). `rec.call(name, **facts)` is a
context manager that measures the block on this rank (payload bytes and number of the collectives
it issues, peak memory) and keeps the facts a rule's formula may name; `rec.value(name, tensor)`
keeps a value to compare; `rec.group` is the process group the run must use.

Each rule compares one metric of the submission with golden's for the same call on the same rank:

    metric  values | bytes | collectives | bytes:<op> | collectives:<op> | peak_memory | fact:<name>
            (fact:<name>: a figure the driver computed for the call, e.g. from the submission's own
            data structures; `golden` is then golden's)
    rule    "<op> <expression>"  with <op> one of <= < == >= > and the expression over numbers,
            `golden` (golden's metric for the same call), the call's facts, + - * / // ( ), min, max
    values: compare bitwise (dtype, shape and every byte) or with rtol / atol

Every rank runs the same workloads in lock-step; whether a rule failed is agreed over all ranks,
and a failing workload is shrunk (the driver's shrink(), else lists made shorter) to a minimal one
that still fails the rule, which the failure message shows with its seed.
"""

import ast
import base64
import contextlib
import fnmatch
import importlib
import importlib.abc
import importlib.util
import json
import os
import random
import sys
import time
from datetime import timedelta

COMPARATORS = {
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
}
METRICS = ("values", "bytes", "collectives", "peak_memory")
FUNCTIONS = {"min": min, "max": max}


class SpecError(Exception):
    """The task's declaration or driver is wrong (not the submission's fault)."""


# ---------------------------------------------------------------------------------------------
# Rules: parsing and evaluation (pure)


def parse_rule(text):
    """`"<= 16 * P + 64"` -> ("<=", ast expression). SpecError naming the problem otherwise."""
    text = (text or "").strip()
    for op in ("<=", ">=", "==", "<", ">"):
        if text.startswith(op):
            expr = text[len(op):].strip()
            break
    else:
        raise SpecError("rule %r: expected it to start with one of <=, <, ==, >=, >" % (text,))
    if not expr:
        raise SpecError("rule %r: no expression after %s" % (text, op))
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError as e:
        raise SpecError("rule %r: the expression does not parse: %s" % (text, e.msg))
    _check_expr(tree, text)
    return op, tree


def _check_expr(node, text):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return
    if isinstance(node, ast.Name):
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv)):
        _check_expr(node.left, text)
        _check_expr(node.right, text)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check_expr(node.operand, text)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS and not node.keywords and node.args:
        for a in node.args:
            _check_expr(a, text)
        return
    raise SpecError("rule %r: %s is not allowed (numbers, names, + - * / //, parentheses, min, max)" % (text, type(node).__name__))


def names_in(tree):
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - set(FUNCTIONS))


def eval_expr(node, env):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise SpecError("the rule names %r, which this call did not record (facts: %s)" % (node.id, ", ".join(sorted(env)) or "none"))
        return env[node.id]
    if isinstance(node, ast.UnaryOp):
        v = eval_expr(node.operand, env)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](*[eval_expr(a, env) for a in node.args])
    a, b = eval_expr(node.left, env), eval_expr(node.right, env)
    if isinstance(node.op, ast.Add):
        return a + b
    if isinstance(node.op, ast.Sub):
        return a - b
    if isinstance(node.op, ast.Mult):
        return a * b
    if isinstance(node.op, ast.FloorDiv):
        return a // b
    return a / b


def metric_of(obs, metric):
    """One call's figure for a metric name (bytes, collectives, bytes:<op>, collectives:<op>, peak_memory)."""
    kind, _, op = metric.partition(":")
    if kind == "bytes":
        return obs["bytes"].get(op, 0) if op else sum(obs["bytes"].values())
    if kind == "collectives":
        return obs["calls"].get(op, 0) if op else sum(obs["calls"].values())
    if kind == "peak_memory":
        return obs["peak_memory"] or 0
    if kind == "fact" and op:
        if op not in obs["facts"]:
            raise SpecError("metric fact:%s: the call did not record that fact (facts: %s)" % (op, ", ".join(sorted(obs["facts"])) or "none"))
        return obs["facts"][op]
    raise SpecError("unknown metric %r (one of %s, bytes:<op>, collectives:<op>, fact:<name>)" % (metric, ", ".join(METRICS)))


def check_resource_rule(rule, sub_calls, gold_calls):
    """The first call (in the submission's order) where `rule` fails, as a message; None when it holds.
    Only calls both sides made and whose name matches the rule's `calls` patterns are compared; a
    call golden made that the submission did not is a failure."""
    op, tree = rule["_parsed"]
    patterns = rule.get("calls") or ["*"]
    for name in gold_calls:
        if any(fnmatch.fnmatchcase(name, p) for p in patterns) and name not in sub_calls:
            return "call %r: golden made it, the submission did not" % (name,)
    for name, obs in sub_calls.items():
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        gold = gold_calls.get(name)
        if gold is None:
            continue
        mine = metric_of(obs, rule["metric"])
        env = dict(gold["facts"])
        env.update(obs["facts"])
        env["golden"] = metric_of(gold, rule["metric"])
        bound = eval_expr(tree, env)
        if not COMPARATORS[op](mine, bound):
            shown = ", ".join("%s=%s" % (k, _short(v)) for k, v in sorted(env.items()))
            return "call %r: %s = %s, rule %s %s = %s (%s)" % (name, rule["metric"], _short(mine), op, rule["rule"].strip()[len(op):].strip(), _short(bound), shown)
    return None


def _short(v):
    if isinstance(v, float):
        return "%.6g" % v
    return str(v)


def compare_values(rule, sub_values, gold_values):
    """None when every value golden recorded (matching the rule's `values` patterns) equals the
    submission's (bitwise, or within rtol / atol); else the first difference, as a message."""
    import torch

    patterns = rule.get("values") or ["*"]
    for name, gold in gold_values.items():
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        if name not in sub_values:
            return "value %r: golden recorded it, the submission did not get that far" % (name,)
        mine = sub_values[name]
        if mine.dtype != gold.dtype or tuple(mine.shape) != tuple(gold.shape):
            return "value %r: %s%s, golden %s%s" % (name, mine.dtype, list(mine.shape), gold.dtype, list(gold.shape))
        if rule.get("compare", "bitwise") == "bitwise":
            a = mine.detach().contiguous().reshape(-1).view(torch.uint8)
            b = gold.detach().contiguous().reshape(-1).view(torch.uint8)
            if not torch.equal(a, b):
                e = mine.element_size()
                at = int(torch.nonzero(a != b)[0]) // e
                n = int((a.view(-1, e) != b.view(-1, e)).any(dim=1).sum()) if e > 1 else int((a != b).sum())
                return "value %r: %d of %d entries differ bitwise (first at flat index %d: %s, golden %s)" % (
                    name, n, mine.numel(), at, _entry(mine, at), _entry(gold, at))
        else:
            rtol, atol = float(rule.get("rtol", 0.0)), float(rule.get("atol", 0.0))
            a, b = mine.detach().double().reshape(-1), gold.detach().double().reshape(-1)
            bad = ~torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
            if bool(bad.any()):
                at = int(torch.nonzero(bad)[0])
                return "value %r: %d of %d entries beyond rtol=%g atol=%g (first at flat index %d: %r, golden %r)" % (
                    name, int(bad.sum()), a.numel(), rtol, atol, at, float(a[at]), float(b[at]))
    return None


def _entry(t, i):
    v = t.detach().reshape(-1)[i]
    return repr(v.item())


# ---------------------------------------------------------------------------------------------
# Golden's private copy


class _BundleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves golden's modules under a package name of their own, from source text in memory:
    nothing on disk looks like the package, and golden's imports of the package stay inside it."""

    def __init__(self, private, package, files):
        self.private, self.package, self.files = private, package, files

    def _path_of(self, fullname):
        rel = fullname.split(".")[1:]
        pkg = "/".join([self.package] + rel + ["__init__.py"])
        mod = "/".join([self.package] + rel) + ".py"
        if pkg in self.files:
            return pkg, True
        if mod in self.files:
            return mod, False
        return None, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.private and not fullname.startswith(self.private + "."):
            return None
        rel, is_pkg = self._path_of(fullname)
        if rel is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin="<golden %s>" % rel, is_package=is_pkg)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        rel, _ = self._path_of(module.__name__)
        tree = ast.parse(self.files[rel], filename=rel)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == self.package or alias.name.startswith(self.package + "."):
                        if alias.asname is None and "." in alias.name:
                            raise ImportError("golden %s: `import %s` without `as` cannot be loaded privately" % (rel, alias.name))
                        alias.name = self.private + alias.name[len(self.package):]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if node.module == self.package or node.module.startswith(self.package + "."):
                    node.module = self.private + node.module[len(self.package):]
        exec(compile(tree, "<golden %s>" % rel, "exec"), module.__dict__)


class GoldenImpl:
    """Golden's version of the package, imported under a private name."""

    name = "golden"

    def __init__(self, bundle):
        self.package = bundle["package"]
        self.private = "_infradev_gold_%s" % bundle.get("key", "x")
        if not any(isinstance(f, _BundleFinder) and f.private == self.private for f in sys.meta_path):
            sys.meta_path.insert(0, _BundleFinder(self.private, self.package, bundle["files"]))

    def module(self, name):
        if name != self.package and not name.startswith(self.package + "."):
            raise SpecError("impl.module(%r): only modules of %s have a golden copy" % (name, self.package))
        mod = importlib.import_module(self.private + name[len(self.package):])
        _check_private(mod, self.package, self.private)
        return mod


def _check_private(mod, package, private):
    """Golden must never run the submission's code: no module global of it may be one of the
    submission's modules, or a class / function defined in one."""
    for key, value in list(vars(mod).items()):
        owner = getattr(value, "__module__", None) if not isinstance(value, type(sys)) else value.__name__
        if isinstance(owner, str) and (owner == package or owner.startswith(package + ".")):
            raise SpecError("golden's %s.%s comes from the submission's %s: golden's copy is not private" % (mod.__name__, key, owner))


class SubmissionImpl:
    name = "submission"

    def __init__(self, package):
        self.package = package

    def module(self, name):
        return importlib.import_module(name)


# ---------------------------------------------------------------------------------------------
# One run of a driver on a workload


class Recorder:
    def __init__(self, group, rank, world_size, measure):
        self.group, self.rank, self.world_size = group, rank, world_size
        self.calls = {}
        self.values = {}
        self._measure = measure

    @contextlib.contextmanager
    def call(self, name, **facts):
        name = self._unique(name, self.calls)
        entry = {"facts": dict(facts), "bytes": {}, "calls": {}, "peak_memory": None}
        with self._measure() as m:
            yield entry["facts"]
        entry["bytes"] = dict(m.bytes)
        entry["calls"] = dict(m.calls)
        entry["peak_memory"] = m.peak_memory_delta_bytes
        self.calls[name] = entry

    def value(self, name, tensor):
        self.values[self._unique(name, self.values)] = tensor.detach().clone()

    @staticmethod
    def _unique(name, taken):
        if name not in taken:
            return name
        k = 2
        while "%s#%d" % (name, k) in taken:
            k += 1
        return "%s#%d" % (name, k)


def _dist():
    import torch.distributed as dist

    return dist


def run_one(driver, impl, workload, measure, timeout_s):
    """(recorder, error message or None) of one run on this rank, on a fresh group of all ranks."""
    dist = _dist()
    group = dist.new_group(ranks=list(range(dist.get_world_size())), timeout=timedelta(seconds=timeout_s))
    rec = Recorder(group, dist.get_rank(), dist.get_world_size(), measure)
    try:
        driver.run(impl, json.loads(json.dumps(workload)), rec)
    except SpecError:
        raise
    except Exception as e:  # the code under test (or golden) raised: a result, never a crash of the probe
        return rec, "%s raised %s: %s" % (impl.name, type(e).__name__, str(e).strip().splitlines()[0][:300] if str(e).strip() else "")
    return rec, None


def release_group(group):
    """Destroys a group run_one made (its gloo threads and sockets go with it); never raises."""
    try:
        _dist().destroy_process_group(group)
    except Exception:
        pass


# ---------------------------------------------------------------------------------------------
# Shrinking


def _list_halves(workload, key):
    v = workload[key]
    half = len(v) // 2
    yield dict(workload, **{key: v[:half]})
    yield dict(workload, **{key: v[half:]})


def _shrinkable_lists(workload):
    return [key for key in sorted(workload) if isinstance(workload[key], list) and len(workload[key]) > 1]


def generic_halves(workload):
    """Each list of a JSON workload cut to its first or its second half."""
    for key in _shrinkable_lists(workload):
        yield from _list_halves(workload, key)


def generic_shrink(workload):
    """Smaller versions of a JSON workload: each list made shorter (halves first, then one item
    less), each integer above 1 halved, then one less. The driver's shrink() is tried before.
    The order (per list: halves, then each one-item-less) decides which minimal case is reported."""
    for key in _shrinkable_lists(workload):
        yield from _list_halves(workload, key)
        v = workload[key]
        for i in range(len(v)):
            yield dict(workload, **{key: v[:i] + v[i + 1:]})
    for key in sorted(workload):
        v = workload[key]
        if isinstance(v, int) and not isinstance(v, bool) and v > 1 and key != "seed":
            yield dict(workload, **{key: v // 2})
            yield dict(workload, **{key: v - 1})


def workload_size(w):
    """A size to show how far a workload shrank (total list lengths and integers)."""
    if isinstance(w, dict):
        return sum(workload_size(v) for k, v in w.items() if k != "seed")
    if isinstance(w, list):
        return len(w) + sum(workload_size(v) for v in w)
    if isinstance(w, bool):
        return 0
    if isinstance(w, int):
        return abs(w)
    return 0


# ---------------------------------------------------------------------------------------------
# The whole differential: every workload, every rule, agreed over the ranks


class Outcome:
    """What the differential found, per rule: None (held) or a message (failed on some rank)."""

    def __init__(self, failures, skipped, summary):
        self.failures, self.skipped, self.summary = failures, skipped, summary

    def check(self, rule_id):
        if rule_id in self.skipped:
            import pytest

            pytest.skip(self.skipped[rule_id])
        msg = self.failures.get(rule_id)
        assert msg is None, msg


def evaluate(rules, sub, gold):
    """rule id -> message for every rule the submission's run breaks against golden's."""
    out = {}
    sub_rec, sub_err = sub
    gold_rec, _ = gold
    for rule in rules:
        if sub_err is not None:
            out[rule["id"]] = sub_err
            continue
        if rule["metric"] == "values":
            msg = compare_values(rule, sub_rec.values, gold_rec.values)
        else:
            msg = check_resource_rule(rule, sub_rec.calls, gold_rec.calls)
        if msg is not None:
            out[rule["id"]] = msg
    return out


def prepare_rules(rules):
    for rule in rules:
        if rule["metric"] != "values":
            rule["_parsed"] = parse_rule(rule["rule"])
            kind, _, name = rule["metric"].partition(":")
            metric_of({"bytes": {}, "calls": {}, "peak_memory": 0, "facts": {name: 0}}, rule["metric"])
    return rules


class Differential:
    def __init__(self, spec, driver, bundle, measure):
        self.spec, self.driver, self.measure = spec, driver, measure
        self.rules = prepare_rules([dict(r) for r in spec["rules"]])
        self.golden = GoldenImpl(bundle)
        self.submission = SubmissionImpl(bundle["package"])
        self.timeout_s = float(spec.get("collective_timeout_sec", 10))
        self._cache = {}
        dist = _dist()
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.agree_group = dist.new_group(ranks=list(range(self.world)))

    def _agree(self, local):
        """Every rank's `local` (a JSON-able object), gathered on every rank."""
        dist = _dist()
        out = [None] * self.world
        dist.all_gather_object(out, local, group=self.agree_group)
        return out

    def run_workload(self, workload, candidate=False):
        """rule id -> failure message (agreed over ranks: the lowest rank's message where it failed).
        `candidate`: a shrunk workload, which may be one the driver cannot run (golden fails too):
        then it fails no rule, never the whole differential."""
        key = json.dumps(workload, sort_keys=True)
        if key in self._cache:
            return self._cache[key]
        gold = run_one(self.driver, self.golden, workload, self.measure, self.timeout_s)
        sub = run_one(self.driver, self.submission, workload, self.measure, self.timeout_s)
        if gold[1] is not None:
            local = {"golden_error": gold[1], "failures": {}}
        else:
            local = {"golden_error": None, "failures": evaluate(self.rules, sub, gold)}
        everyone = self._agree(local)
        # Every rank is past both runs (the gather above): their groups can go. A group left alive
        # keeps gloo's threads (about three per group and rank); a grade creates hundreds of groups.
        for rec in (gold[0], sub[0]):
            release_group(rec.group)
        for r, got in enumerate(everyone):
            if got["golden_error"] and candidate:
                self._cache[key] = {}
                return {}
            if got["golden_error"]:
                raise SpecError("golden failed on workload %s (rank %d): %s" % (json.dumps(workload), r, got["golden_error"]))
        merged = {}
        for r, got in enumerate(everyone):
            for rid, msg in got["failures"].items():
                merged.setdefault(rid, "rank %d: %s" % (r, msg))
        self._cache[key] = merged
        return merged

    def shrink(self, rule_id, workload, deadline, max_runs):
        shrinker = getattr(self.driver, "shrink", None)
        steps = runs = 0
        current = workload
        improved = True
        while improved and runs < max_runs and time.monotonic() < deadline:
            improved = False
            # Big cuts first (half of a list), then the driver's own, then one item less / smaller numbers.
            candidates = list(generic_halves(current))
            candidates += list(shrinker(current)) if shrinker else []
            candidates += list(generic_shrink(current))
            seen = set()
            for cand in candidates:
                key = json.dumps(cand, sort_keys=True)
                if key in seen or cand == current or workload_size(cand) > workload_size(current):
                    continue
                seen.add(key)
                if runs >= max_runs or not self._rank0_says(time.monotonic() < deadline):
                    break
                runs += 1
                if rule_id in self.run_workload(cand, candidate=True):
                    current, steps, improved = cand, steps + 1, True
                    break
        return current, steps

    def _rank0_says(self, flag):
        return bool(self._agree(bool(flag))[0])

    def run(self):
        spec = self.spec
        budget = spec.get("budget", {})
        count = int(budget.get("workloads", 16))
        seconds = float(budget.get("seconds", 60))
        seed = int(spec.get("seed", 0))
        started = time.monotonic()
        deadline = started + seconds
        first = {}
        ran = 0
        for index in range(count):
            if not self._rank0_says(time.monotonic() < deadline):
                break
            rng = random.Random("%d/%d/%d" % (seed, self.world, index))
            workload = self.driver.generate(rng, index, count, self.world)
            ran += 1
            for rid, msg in self.run_workload(workload).items():
                first.setdefault(rid, (index, workload, msg))
            if len(first) == len(self.rules):
                break
        failures = {}
        shrink_deadline = time.monotonic() + float(budget.get("shrink_seconds", max(10.0, seconds / 2)))
        for rule in self.rules:
            rid = rule["id"]
            if rid not in first:
                continue
            index, workload, msg = first[rid]
            small, steps = self.shrink(rid, workload, shrink_deadline, int(budget.get("shrink_runs", 40)))
            small_msg = self.run_workload(small).get(rid, msg)
            small_json = json.dumps(small, sort_keys=True)
            # The first line is what a grade's result keeps (capped): the rule, the violation, the minimal case.
            failures[rid] = (
                "differential rule %s (promise %s): %s; minimal failing workload: %s\n"
                "  %s\n"
                "  minimal failing workload (shrunk in %d steps from workload %d of seed %d at world size %d): %s\n"
                "  original workload: %s"
                % (rid, rule["promise"], _clip(small_msg, 160), small_json, small_msg, steps, index, seed, self.world,
                   small_json, _clip(json.dumps(workload, sort_keys=True)))
            )
        summary = {"workloads": ran, "of": count, "seconds": round(time.monotonic() - started, 2), "failed_rules": sorted(failures)}
        return Outcome(failures, {}, summary)


def _clip(s, n=600):
    return s if len(s) <= n else s[: n - 3] + "..."


def _ensure_dist():
    dist = _dist()
    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    if "MASTER_PORT" not in os.environ:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(s.getsockname()[1])
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))


def load_bundle(path):
    with open(path, "r", encoding="utf-8") as f:
        data = json.load(f)
    files = {k: base64.b64decode(v).decode("utf-8") for k, v in data["files"].items()}
    return {"package": data["package"], "key": data["key"], "files": files}


def run_spec(spec, driver, bundle_path):
    """The probes' entry point (one call per pytest module): every rule's outcome at this world size."""
    _ensure_dist()
    world = _dist().get_world_size()
    sizes = spec.get("world_sizes")
    if sizes and world not in sizes:
        why = "differential rules apply at world sizes %s, not %d" % (sizes, world)
        return Outcome({}, {r["id"]: why for r in spec["rules"]}, {"skipped": why})
    from infradev_probe import measure

    diff = Differential(spec, driver, load_bundle(bundle_path), lambda: measure(memory="host"))
    outcome = diff.run()
    print("differential: %s" % json.dumps(outcome.summary, sort_keys=True))
    return outcome
