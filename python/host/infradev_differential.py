"""Golden-differential probes: golden's code and the submission's on the same generated workloads,
in SEPARATE processes, compared where neither can reach.

Host-only source: the grader copies this file into the probes' folder of a task that declares
hidden/differential.yaml (src/task/hidden/differential.ts), where it is installed under a random
name like every probe helper; it never lies in a sandbox the agent works in.

Two halves:

  in a grading session (`record_spec`, from the generated test module): the task's driver runs the
  package that is importable there on every workload, and each rank writes what it saw (per call:
  collectives, bytes, peak memory, facts; per value: dtype, shape, sha256, and the bytes where a
  rule needs them) to rank<r>.differential.json in the launcher's out dir; the launcher carries the
  files out in its result bundle. The same code records golden's side — in a session over a fresh
  base workspace with the golden patch applied, where none of the submission's code exists — and the
  submission's side, in the submission's probe session, where none of golden's code or records exist.

  on the host (`python3 -I -S infradev_differential.py compare`, stdlib only: no torch, no pickle,
  nothing of the sandbox imported): golden's records and the submission's, rule by rule
  (src/grader/grade/differential-judge.ts feeds it and turns its answer into the cases' verdicts).
  Golden's records never enter a session the submission runs in, so a submission can neither call
  golden's code nor copy golden's answers: it has to compute them.

A task's driver (hidden/<driver>.py, written by the task author) defines

    generate(rng, index, count, world_size) -> dict   # one JSON-able workload, the same on every rank
    shrink(workload) -> iterable of dict                 # optional: smaller workloads to try first
    run(impl, workload, rec) -> None                     # drives impl's interface; records calls, values

`impl.module("pkg.mod")` is the package's module as the session imports it. `rec.call(name, **facts)`
is a context manager that measures the block on this rank (payload bytes and number of the
collectives it issues, peak memory) and keeps the facts a rule's formula may name; `rec.value(name,
tensor)` keeps a value to compare; `rec.group` is the process group the run must use.

Each rule compares one metric of the submission with golden's for the same call on the same rank:

    metric  values | bytes | collectives | bytes:<op> | collectives:<op> | peak_memory | fact:<name>
            (fact:<name>: a figure the driver computed for the call, e.g. from the submission's own
            data structures; `golden` is then golden's)
    rule    "<op> <expression>"  with <op> one of <= < == >= > and the expression over numbers,
            `golden` (golden's metric for the same call), the call's facts, + - * / // ( ), min, max
    values: compare bitwise (dtype, shape and every byte) or with rtol / atol

Every rank runs the same workloads in lock-step. A failing workload is shrunk by the host in rounds
(golden's session proposes the smaller candidates — the driver's shrink(), then lists made shorter —
and records golden on them; the submission's session records itself on the same ones), and the
failure message shows the smallest workload that still fails, with its seed.
"""

import ast
import base64
import contextlib
import fnmatch
import hashlib
import importlib
import json
import math
import os
import random
import struct
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


# ---------------------------------------------------------------------------------------------
# One run of a driver on a workload (in a grading session)


class PackageImpl:
    """The package as this session imports it: golden's in golden's session, the submission's in
    the submission's. Nothing else is ever importable under its name here."""

    name = "the package"

    def __init__(self, package):
        self.package = package

    def module(self, name):
        if name != self.package and not name.startswith(self.package + "."):
            raise SpecError("impl.module(%r): the differential drives package %s only" % (name, self.package))
        return importlib.import_module(name)


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
# Recording (in a grading session)

WORKLOADS_ENV = "INFRADEV_DIFFERENTIAL_WORKLOADS"  # JSON: [{"index": i, "workload": {...}}] (shrink rounds)
CANDIDATES_ENV = "INFRADEV_DIFFERENTIAL_SHRINK"  # JSON: [{"index": i, "workload": {...}}]: propose and run their candidates
RECORD_SUFFIX = "differential.json"  # rank<r>.differential.json in the launcher's out dir
RECORD_FORMAT = 1
SMALL_VALUE_BYTES = 1024  # a value this small travels whole even under a bitwise rule (for the message)
RECORD_FILE_CAP = 12 << 20  # bytes of one rank's record file (the bundle's cap for all ranks is larger)


class Outcome:
    """What a grading session can say per rule: skipped (not at this world size) or recorded. The
    verdict itself is the host's (src/grader/grade/differential-judge.ts)."""

    def __init__(self, skipped, summary):
        self.skipped, self.summary = skipped, summary

    def check(self, rule_id):
        if rule_id in self.skipped:
            import pytest

            pytest.skip(self.skipped[rule_id])


def tolerance_patterns(rules):
    return [p for r in rules if r["metric"] == "values" and r.get("compare", "bitwise") != "bitwise" for p in (r.get("values") or ["*"])]


def encode_value(tensor, whole):
    """{dtype, shape, sha256, data?}: data (base64 of the raw bytes) when `whole` or small."""
    import torch

    t = tensor.detach().contiguous().cpu().reshape(-1)
    u8 = t.view(torch.uint8) if t.element_size() > 0 and t.numel() else torch.empty(0, dtype=torch.uint8)
    try:
        raw = u8.numpy().tobytes()
    except Exception:  # torch built without numpy
        raw = bytes(u8.tolist())
    dtype = str(tensor.dtype).replace("torch.", "")
    shape = list(tensor.shape)
    digest = hashlib.sha256(("%s%s" % (dtype, shape)).encode() + raw).hexdigest()
    out = {"dtype": dtype, "shape": shape, "sha256": digest, "nbytes": len(raw)}
    if whole or len(raw) <= SMALL_VALUE_BYTES:
        out["data"] = base64.b64encode(raw).decode("ascii")
    return out


def _agree_flag(group, flag):
    """Rank 0's `flag` on every rank (a deadline every rank stops at together)."""
    import torch

    t = torch.tensor([1 if flag else 0], dtype=torch.int64)
    _dist().broadcast(t, src=0, group=group)
    return bool(t.item())


def _items(spec, driver, world):
    """The workloads this session runs: the host's list (a shrink round), the candidates of the
    host's failing workloads (golden's shrink round), else the seed's."""
    listed = os.environ.get(WORKLOADS_ENV)
    if listed:
        return [dict(i) for i in json.loads(listed)]
    parents = os.environ.get(CANDIDATES_ENV)
    if parents:
        out = []
        for parent in json.loads(parents):
            for k, cand in enumerate(shrink_candidates(driver, parent["workload"])):
                out.append({"index": "%s>%d" % (parent["index"], k), "parent": parent["index"], "workload": cand})
        return out
    count = int(spec.get("budget", {}).get("workloads", 16))
    seed = int(spec.get("seed", 0))
    return [{"index": i, "workload": driver.generate(random.Random("%d/%d/%d" % (seed, world, i)), i, count, world)} for i in range(count)]


def shrink_candidates(driver, workload, limit=64):
    """Smaller workloads to try, best first: halves of lists, the driver's own, then one item less /
    smaller integers; never larger than the workload, no repeats."""
    shrinker = getattr(driver, "shrink", None)
    seen = {json.dumps(workload, sort_keys=True)}
    out = []
    size = workload_size(workload)
    for cand in list(generic_halves(workload)) + (list(shrinker(workload)) if shrinker else []) + list(generic_shrink(workload)):
        key = json.dumps(cand, sort_keys=True)
        if key in seen or workload_size(cand) > size:
            continue
        seen.add(key)
        out.append(cand)
        if len(out) >= limit:
            break
    return out


def record_spec(spec, driver):
    """The probes' entry point (once per pytest module): runs the package on every workload and
    writes this rank's records; the host judges them. Skips where the world size does not apply."""
    _ensure_dist()
    dist = _dist()
    world, rank = dist.get_world_size(), dist.get_rank()
    sizes = spec.get("world_sizes")
    if sizes and world not in sizes:
        why = "differential rules apply at world sizes %s, not %d" % (sizes, world)
        return Outcome({r["id"]: why for r in spec["rules"]}, {"skipped": why})
    rules = prepare_rules([dict(r) for r in spec["rules"]])
    whole = tolerance_patterns(rules)
    from infradev_probe import measure

    impl = PackageImpl(spec["package"])
    timeout_s = float(spec.get("collective_timeout_sec", 10))
    budget = spec.get("budget", {})
    deadline_s = float(os.environ.get("INFRADEV_DIFFERENTIAL_DEADLINE_S") or 3 * float(budget.get("seconds", 60)))
    started = time.monotonic()
    agree = dist.new_group(ranks=list(range(world)))
    items = _items(spec, driver, world)
    out = {"format": RECORD_FORMAT, "rank": rank, "world": world, "workloads": [], "unreached": []}
    for n, item in enumerate(items):
        if not _agree_flag(agree, time.monotonic() - started < deadline_s):
            out["unreached"] = [i["index"] for i in items[n:]]
            break
        rec, err = run_one(driver, impl, item["workload"], lambda: measure(memory="host"), timeout_s)
        release_group(rec.group)
        values = {}
        for name, t in rec.values.items():
            values[name] = encode_value(t, any(fnmatch.fnmatchcase(name, p) for p in whole))
        entry = {"index": item["index"], "workload": item["workload"], "error": err, "calls": rec.calls, "values": values}
        if "parent" in item:
            entry["parent"] = item["parent"]
        out["workloads"].append(entry)
    out["seconds"] = round(time.monotonic() - started, 3)
    _write_record(rank, out)
    summary = {"workloads": len(out["workloads"]), "of": len(items), "seconds": out["seconds"], "unreached": len(out["unreached"])}
    print("differential: %s" % json.dumps(summary, sort_keys=True))
    return Outcome({}, summary)


def _write_record(rank, record):
    from infradev_outputs import OUT_DIR_ENV, rank_name, write_atomic

    out_dir = os.environ.get(OUT_DIR_ENV)
    if not out_dir:
        raise SpecError("the differential records need the launcher's out dir (INFRADEV_OUT_DIR is not set)")
    data = json.dumps(record, separators=(",", ":"), allow_nan=False, default=str).encode("utf-8")
    if len(data) > RECORD_FILE_CAP:
        raise SpecError("rank %d's differential records take %d bytes, over the cap of %d: fewer or smaller workloads (budget.workloads)" % (rank, len(data), RECORD_FILE_CAP))
    fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        write_atomic(rank_name(rank, RECORD_SUFFIX), data, fd)
    finally:
        os.close(fd)


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


# ---------------------------------------------------------------------------------------------
# Judging (on the host: stdlib only, over JSON; nothing of the sandbox is imported or unpickled)

# dtype -> struct format of one little-endian entry (torch writes the host's order: little-endian here)
_STRUCT_CODES = {"float64": "<d", "float32": "<f", "float16": "<e", "int64": "<q", "int32": "<i", "int16": "<h", "int8": "<b", "uint8": "<B", "bool": "<?"}


def decode_numbers(value):
    """The entries of an encoded value as Python numbers (bfloat16 widened to float32 bit by bit)."""
    raw = base64.b64decode(value["data"])
    dtype = value["dtype"]
    if dtype == "bfloat16":
        if len(raw) % 2:
            raise ValueError("%d bytes are not a whole number of bfloat16 entries" % len(raw))
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for (h,) in struct.iter_unpack("<H", raw)]
    code = _STRUCT_CODES.get(dtype)
    if code is None:
        raise SpecError("values of dtype %s cannot be compared with a tolerance" % dtype)
    size = struct.calcsize(code)
    if len(raw) % size:
        raise ValueError("%d bytes are not a whole number of %s entries" % (len(raw), dtype))
    return [x for (x,) in struct.iter_unpack(code, raw)]


def _close(a, b, rtol, atol):
    if a == b:
        return True
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        if math.isinf(a) or math.isinf(b):
            return False
    return abs(a - b) <= atol + rtol * abs(b)


def compare_encoded(rule, sub_values, gold_values):
    """None when every value golden recorded (matching the rule's `values` patterns) equals the
    submission's (bitwise, or within rtol / atol); else the first difference, as a message."""
    patterns = rule.get("values") or ["*"]
    for name, gold in gold_values.items():
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        mine = sub_values.get(name)
        if mine is None:
            return "value %r: golden recorded it, the submission did not get that far" % (name,)
        if mine.get("dtype") != gold["dtype"] or list(mine.get("shape") or []) != list(gold["shape"]):
            return "value %r: %s%s, golden %s%s" % (name, mine.get("dtype"), mine.get("shape"), gold["dtype"], gold["shape"])
        if rule.get("compare", "bitwise") == "bitwise":
            if mine.get("sha256") == gold["sha256"]:
                continue
            numel = math.prod(gold["shape"]) if gold["shape"] else 1
            if "data" in mine and "data" in gold:
                a, b = base64.b64decode(mine["data"]), base64.b64decode(gold["data"])
                e = max(1, len(b) // max(1, numel))
                diff = [i for i in range(0, len(b), e) if a[i:i + e] != b[i:i + e]]
                if diff:
                    at = diff[0] // e
                    try:
                        x, y = decode_numbers(mine)[at], decode_numbers(gold)[at]
                    except Exception:
                        x, y = a[diff[0]:diff[0] + e].hex(), b[diff[0]:diff[0] + e].hex()
                    return "value %r: %d of %d entries differ bitwise (first at flat index %d: %r, golden %r)" % (name, len(diff), numel, at, x, y)
            return "value %r: differs bitwise from golden's (%s%s, sha256 %s, golden %s)" % (name, gold["dtype"], gold["shape"], str(mine.get("sha256"))[:12], gold["sha256"][:12])
        if mine.get("sha256") == gold["sha256"]:
            continue
        if "data" not in mine or "data" not in gold:
            return "value %r: its entries did not come out of the session (needed for the tolerance compare)" % (name,)
        rtol, atol = float(rule.get("rtol", 0.0)), float(rule.get("atol", 0.0))
        a, b = decode_numbers(mine), decode_numbers(gold)
        if len(a) != len(b):
            return "value %r: %d entries, golden %d" % (name, len(a), len(b))
        bad = [i for i, (x, y) in enumerate(zip(a, b)) if not _close(x, y, rtol, atol)]
        if bad:
            at = bad[0]
            return "value %r: %d of %d entries beyond rtol=%g atol=%g (first at flat index %d: %r, golden %r)" % (
                name, len(bad), len(b), rtol, atol, at, a[at], b[at])
    return None


def evaluate(rules, sub_entry, gold_entry):
    """rule id -> message for every rule the submission's run of one workload (on one rank) breaks."""
    out = {}
    for rule in rules:
        if sub_entry.get("error"):
            out[rule["id"]] = str(sub_entry["error"])
            continue
        if rule["metric"] == "values":
            msg = compare_encoded(rule, sub_entry.get("values") or {}, gold_entry.get("values") or {})
        else:
            msg = check_resource_rule(rule, sub_entry.get("calls") or {}, gold_entry.get("calls") or {})
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


def _by_index(record):
    return {json.dumps(w["index"]): w for w in (record.get("workloads") or [])}


def judge(rules, golden, submission, every=False):
    """golden, submission: {rank: record}. -> {"failures": {rule id: {index, rank, message,
    workload}}, "compared": n}: per rule the first workload (golden's order) and the lowest rank where
    it fails; with every, also "all": {rule id: [every failing index, golden's order]} (shrink rounds). A workload golden raised on is left out (a shrink candidate the driver cannot run);
    one the submission did not record fails every rule."""
    rules = prepare_rules([dict(r) for r in rules])
    failures = {}
    ranks = sorted(golden, key=int)
    gold_recs = {r: _by_index(golden[r]) for r in ranks}
    sub_recs = {}
    for r in ranks:
        rec = submission.get(r)
        sub_recs[r] = _by_index(rec) if isinstance(rec, dict) else None
    order = [json.dumps(w["index"]) for w in (golden[ranks[0]].get("workloads") or [])] if ranks else []
    compared = 0
    every_failing = {}
    for key in order:
        if any(gold_recs[r].get(key, {}).get("error") or key not in gold_recs[r] for r in ranks):
            continue
        compared += 1
        workload = gold_recs[ranks[0]][key]["workload"]
        for r in ranks:
            subs = sub_recs[r]
            if subs is None:
                found = {rule["id"]: "rank %s: the session wrote no differential records" % r for rule in rules}
            elif key not in subs:
                found = {rule["id"]: "the submission did not finish this workload (the session's deadline, or it stopped early)" for rule in rules}
            elif json.dumps(subs[key].get("workload"), sort_keys=True) != json.dumps(workload, sort_keys=True):
                found = {rule["id"]: "the session ran another workload under this index" for rule in rules}
            else:
                try:
                    found = evaluate(rules, subs[key], gold_recs[r][key])
                except SpecError:
                    raise
                except Exception as e:  # records the session wrote that do not parse: the submission's
                    found = {rule["id"]: "the session's records do not read (%s: %s)" % (type(e).__name__, e) for rule in rules}
            for rid, msg in found.items():
                if every and json.loads(key) not in every_failing.setdefault(rid, []):
                    every_failing[rid].append(json.loads(key))
                if rid not in failures:
                    failures[rid] = {"index": json.loads(key), "rank": int(r), "message": "rank %s: %s" % (r, msg), "workload": workload}
    out = {"failures": failures, "compared": compared}
    if every:
        out["all"] = every_failing
    return out


def _main(argv):
    """`compare` / `compare-all`: stdin {rules, golden: {rank: record}, submission: {rank: record}}
    -> stdout judge()'s answer (compare-all: with every failing index per rule), or {"spec_error": message}."""
    if argv[1:] not in (["compare"], ["compare-all"]):
        sys.stderr.write("usage: python3 -I -S infradev_differential.py compare|compare-all < input.json\n")
        return 2
    data = json.load(sys.stdin)
    try:
        out = judge(data["rules"], data["golden"], data["submission"], every=argv[1] == "compare-all")
    except SpecError as e:
        out = {"spec_error": str(e)}
    json.dump(out, sys.stdout, separators=(",", ":"), default=str)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
