"""Counting wrappers around torch.distributed collectives and point-to-point ops.

The wrappers replace the functions on both `torch.distributed` and `torch.distributed.distributed_c10d`
(usually the same objects: one wrapper per original function, so an alias is never counted twice),
and the collective methods of the ProcessGroup / Backend classes underneath them, so that code calling
`pg.allreduce(...)` directly, or a function bound before the patch, is counted too.

What is counted (measure()'s output): one call per public function call, under its public name
(isend as `isend`, irecv as `irecv`, torch's private spellings under their public names), counted
before it runs, so that a call the backend refuses (gloo has no all_to_all) is still seen as
attempted; and one call per backend call that no public function in progress accounts for, under the
backend op's name. Every backend call is counted exactly once, however deeply nested (no call-depth
skip, see _count_backend_call): the first backend call a public function makes, if it is the op that
function issues, is that function's call; any further one counts on its own. A `group=` argument that
is not None, torch's not-a-member sentinel or an instance of one of the C++ ProcessGroup / Backend
classes (exact type: a Python subclass is refused too) raises TypeError and is recorded (`refused`,
which the launcher reports and the grader reads as tampering): such an object would be handed the
collective and could run whatever it likes below one counted call. Calls are deduplicated by the
work handle they return, not by call depth. The wrappers carry no `__wrapped__`: the uncounted original
is not handed out. Not seen here: what talks to the process group from C++ (torch's
DistributedDataParallel reducer, functional collectives and `torch.ops.c10d.*` through the
dispatcher, NCCL calls made by extensions), and code that digs the originals out of the wrappers'
closures (Python cannot hide them); for gloo the launcher records the kernel's count of what the
ranks sent beside the session's totals (`totals()`, infradev_launcher/wire.py). `install()` runs when infradev_probe is imported;
when torch is not imported yet, it waits for torch.distributed's import and patches right after it.

Process-global state is unavoidable here: the patch itself is process-global, and collectives issued
from autograd threads (backward hooks on CUDA) must reach every active measure, not only the ones
opened on the calling thread.
"""

import importlib.machinery
import inspect
import sys
import threading

# op -> (name of the parameter that holds the payload, "tensor" | "list" | None, fallback position).
# Payload = the tensors the op sends from this rank (see README): the input of gathers and
# reduce-scatters, the chunk of scatter, the tensor of broadcast / reduce / p2p; barrier sends none.
OPS = {
    "all_reduce": ("tensor", "tensor", 0),
    "all_gather": ("tensor", "tensor", 1),
    "all_gather_into_tensor": ("input_tensor", "tensor", 1),
    "_all_gather_base": ("input_tensor", "tensor", 1),
    "reduce_scatter": ("input_list", "list", 1),
    "reduce_scatter_tensor": ("input", "tensor", 1),
    "_reduce_scatter_base": ("input", "tensor", 1),
    "broadcast": ("tensor", "tensor", 0),
    "all_to_all": ("input_tensor_list", "list", 1),
    "all_to_all_single": ("input", "tensor", 1),
    "send": ("tensor", "tensor", 0),
    "recv": ("tensor", "tensor", 0),
    "isend": ("tensor", "tensor", 0),
    "irecv": ("tensor", "tensor", 0),
    "barrier": (None, None, 0),
    "reduce": ("tensor", "tensor", 0),
    "gather": ("tensor", "tensor", 0),
    "scatter": ("tensor", "tensor", 0),
    "all_reduce_coalesced": ("tensors", "list", 0),
    "all_gather_coalesced": ("input_tensor_list", "list", 1),
}

# The private spellings count under their public names: Megatron-style code still calls them.
CANONICAL = {"_all_gather_base": "all_gather_into_tensor", "_reduce_scatter_base": "reduce_scatter_tensor"}

_lock = threading.Lock()
# Active recorders. Replaced (never mutated) under _lock, so a wrapper reads it without locking.
_active = ()


_wrappers = {}  # id(original function) -> wrapper
# Process-wide totals of the whole session, measure() or not: what the launcher compares with the
# traffic the kernel saw (see totals()).
_totals = {"calls": {}, "bytes": {}, "groups": 0, "store_ops": 0, "store_bytes": 0, "refused": [], "backends": []}
_real_group_types = frozenset()  # the C++ ProcessGroup / Backend classes, captured at patch time
_non_member = []  # torch's GroupMember.NON_GROUP_MEMBER sentinel, captured at patch time
_pg_counting = []  # [True] once the ProcessGroup methods are wrapped (reported in totals())
_originals = []  # keeps the originals alive so their ids stay unique
_hook = None
# The rank's in-flight record (infradev_inflight.Inflight), set by the pytest plugin under the launcher:
# the public call this rank's main thread is inside, for the launcher's desync detector.
inflight = None


def push_recorder(recorder):
    global _active
    with _lock:
        _active = _active + (recorder,)


def pop_recorder(recorder):
    global _active
    with _lock:
        _active = tuple(r for r in _active if r is not recorder)


def _tensor_bytes(t):
    try:
        return t.numel() * t.element_size()
    except Exception:  # not a tensor (None, a wrapper subclass without storage): counts 0 bytes
        return 0


def _payload_bytes(payload, kind):
    if payload is None or kind is None:
        return 0
    if kind == "list":
        return sum(_tensor_bytes(t) for t in payload if t is not None)
    return _tensor_bytes(payload)


def _payload_position(fn, param, fallback):
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return fallback
    return names.index(param) if param in names else fallback


def _copy_identity(wrapper, fn):
    """functools.wraps without `__wrapped__`: the wrapper must not hand the uncounted original to
    whoever asks (`dist.all_reduce.__wrapped__(t)` would run a collective nobody counts)."""
    for attr in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(wrapper, attr, getattr(fn, attr))
        except (AttributeError, TypeError):
            pass
    try:
        wrapper.__signature__ = inspect.signature(fn)
    except (TypeError, ValueError):
        pass
    wrapper.__dict__.update({k: v for k, v in getattr(fn, "__dict__", {}).items() if k != "__wrapped__"})
    return wrapper


def _record(active, name, nbytes):
    """One call of `name` with `nbytes` of payload into the session's totals and every recorder in
    `active`. Returns what _unrecord needs to take it back."""
    with _lock:
        _totals["calls"][name] = _totals["calls"].get(name, 0) + 1
        _totals["bytes"][name] = _totals["bytes"].get(name, 0) + nbytes
        for rec in active:
            rec.calls[name] += 1
            rec.bytes[name] += nbytes
    return (active, name, nbytes)


def _unrecord(record):
    """Takes back one _record (the same operation counted twice, see _count_backend_call)."""
    active, name, nbytes = record
    with _lock:
        _totals["calls"][name] = _totals["calls"].get(name, 0) - 1
        _totals["bytes"][name] = _totals["bytes"].get(name, 0) - nbytes
        if _totals["calls"][name] <= 0 and _totals["bytes"][name] <= 0:
            del _totals["calls"][name], _totals["bytes"][name]
        for rec in active:
            rec.calls[name] -= 1
            rec.bytes[name] -= nbytes
            if rec.calls[name] <= 0 and rec.bytes[name] <= 0:
                del rec.calls[name], rec.bytes[name]


def _add_bytes(active, name, nbytes):
    with _lock:
        _totals["bytes"][name] = _totals["bytes"].get(name, 0) + nbytes
        for rec in active:
            rec.bytes[name] += nbytes


# The backend op (PG_METHODS' names) that a public function issues when it is not the function's own
# name: isend is a backend `send`, irecv a `recv` (or recv_anysource).
ISSUES = {"isend": ("send",), "irecv": ("recv",)}


class _Label:
    """A public function's call in progress on this thread: counted when it started (under the public
    name, with its payload), and standing for the first backend call it makes (`covered`)."""

    __slots__ = ("name", "nbytes", "active", "covered", "record")

    def __init__(self, name, nbytes, active):
        self.name, self.nbytes, self.active, self.covered = name, nbytes, active, False
        self.record = _record(active, name, nbytes)

    def issues(self, backend_name):
        return backend_name in ISSUES.get(self.name, (self.name,))


class _Frames(threading.local):
    stack = None  # this thread's counted calls in progress: _Label, or a list (a backend call's inner works)


_frames = _Frames()


def _stack():
    stack = _frames.stack
    if stack is None:
        stack = _frames.stack = []
    return stack


def _count_public_call(name, nbytes, fn, args, kwargs):
    """A public torch.distributed function: counted under its public name before it runs (a call the
    backend refuses -- gloo has no all_to_all -- is still seen as attempted), and the first backend call
    it makes, if that is the op it issues, is that same call, not a second one. torch's private alias of
    a public function (`_all_gather_base` calls `all_gather_into_tensor`) is the same call too: a
    public function called as the first thing inside one of the same name, before any backend call,
    is not counted again."""
    stack = _stack()
    top = stack[-1] if stack else None
    if isinstance(top, _Label) and top.name == name and not top.covered:
        return fn(*args, **kwargs)
    label = _Label(name, nbytes, _active)
    stack.append(label)
    record = inflight
    entered = record is not None and record.enter(name)
    try:
        return fn(*args, **kwargs)
    finally:
        stack.pop()
        if entered:
            record.leave()


def _count_backend_call(name, nbytes, fn, args, kwargs):
    """A ProcessGroup / Backend method. Every call counts, however deeply nested (no call-depth skip):
    either it is the first backend call of a public function in progress on this thread that issues
    this op (isend's `send`) -- that function's count stands for it, and payload beyond what the
    function declared is added to its bytes -- or it is counted here, before it runs (a call that
    raises was still attempted). A call that returns a work handle a nested counted call already
    returned (a backend method implemented over another) is one operation: counted once."""
    stack = _stack()
    top = stack[-1] if stack else None
    if isinstance(top, _Label) and not top.covered and top.issues(name):
        top.covered = True
        record, counted_as = None, top.record
        if nbytes > top.nbytes:
            _add_bytes(top.active, top.name, nbytes - top.nbytes)
    else:
        record = counted_as = _record(_active, name, nbytes)
    inner = []
    stack.append(inner)
    try:
        work = fn(*args, **kwargs)
    finally:
        stack.pop()
    same = [i for i, (w, r) in enumerate(inner) if work is not None and w is work and r is not None]
    rep = counted_as
    if same:
        # One operation counted more than once: keep the count that carries a public function's name
        # where there is one (this call was covered by it), else the first one counted below it.
        keep = None if record is None else same[0]
        if record is not None:
            _unrecord(record)
            rep = None
        for i in same:
            if i != keep:
                _unrecord(inner[i][1])
                inner[i] = (work, None)
    # Up to the backend call this one runs inside, if any (through public functions in between).
    outer = next((f for f in reversed(stack) if isinstance(f, list)), None)
    if outer is not None:
        outer.append((work, rep))
        outer.extend(inner)
    return work


class _Refused(TypeError):
    pass


def check_group(op, group):
    """Raises (and records) unless `group` is None, torch's not-a-member sentinel or an instance of a
    C++ ProcessGroup / Backend class, by exact type: an object of any other type, a Python subclass
    included, would be handed the collective and could run whatever it likes below a counted call."""
    if group is None or type(group) in _real_group_types or any(group is s for s in _non_member):
        return
    what = "%s.%s" % (getattr(type(group), "__module__", "?"), getattr(type(group), "__qualname__", "?"))
    with _lock:
        if len(_totals["refused"]) < 20:
            _totals["refused"].append("%s(group=<%s>)" % (op, what[:200]))
    raise _Refused(
        "torch.distributed.%s: group= must be a torch.distributed ProcessGroup (or None), got an object of type %s" % (op, what)
    )


def _group_argument(fn):
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("group") if "group" in names else None


def totals():
    """The session's totals so far (a copy): calls and bytes per op, process groups made, store ops,
    refused group= objects."""
    with _lock:
        return {"calls": dict(_totals["calls"]), "bytes": dict(_totals["bytes"]), "groups": _totals["groups"],
                "store_ops": _totals["store_ops"], "store_bytes": _totals["store_bytes"], "refused": list(_totals["refused"]),
                "backends": list(_totals["backends"]),
                "backend_counting": bool(_pg_counting)}


def _make_wrapper(fn, op):
    param, kind, fallback = OPS[op]
    name = CANONICAL.get(op, op)
    pos = _payload_position(fn, param, fallback) if param else 0
    gpos = _group_argument(fn)

    def counted(*args, **kwargs):
        group = args[gpos] if gpos is not None and len(args) > gpos else kwargs.get("group")
        check_group(op, group)
        if param is None:
            nbytes = 0
        elif len(args) > pos:
            nbytes = _payload_bytes(args[pos], kind)
        else:
            nbytes = _payload_bytes(kwargs.get(param), kind)
        return _count_public_call(name, nbytes, fn, args, kwargs)

    _copy_identity(counted, fn)
    counted._infradev_op = name
    return counted


# ProcessGroup (and, on torch 2.x, Backend) methods -> (canonical op, position of the payload
# after self; None: no payload). Every torch.distributed collective lands in one of these, so
# wrapping them as well counts code that bypasses the Python functions (`pg.allreduce([t])`,
# `dist.group.WORLD.broadcast(...)`, an original bound before the patch). A call that a public
# function in progress issues is that function's call, not a second one (_count_backend_call).
PG_METHODS = {
    "allreduce": ("all_reduce", 0),
    "allreduce_coalesced": ("all_reduce_coalesced", 0),
    "allgather": ("all_gather", 1),
    "allgather_coalesced": ("all_gather_coalesced", 1),
    "_allgather_base": ("all_gather_into_tensor", 1),
    "allgather_into_tensor_coalesced": ("all_gather_into_tensor", 1),
    "reduce_scatter": ("reduce_scatter", 1),
    "_reduce_scatter_base": ("reduce_scatter_tensor", 1),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor", 1),
    "broadcast": ("broadcast", 0),
    "alltoall": ("all_to_all", 1),
    "alltoall_base": ("all_to_all_single", 1),
    "send": ("send", 0),
    "recv": ("recv", 0),
    "recv_anysource": ("recv", 0),
    "barrier": ("barrier", None),
    "monitored_barrier": ("barrier", None),
    "reduce": ("reduce", 0),
    "gather": ("gather", 1),
    "scatter": ("scatter", 0),
}


def _nested_bytes(obj):
    if isinstance(obj, (list, tuple)):
        return sum(_nested_bytes(o) for o in obj)
    return _tensor_bytes(obj) if obj is not None else 0


def _make_method_wrapper(fn, method):
    name, pos = PG_METHODS[method]

    def counted(self, *args, **kwargs):
        nbytes = _nested_bytes(args[pos]) if pos is not None and len(args) > pos else 0
        return _count_backend_call(name, nbytes, fn, (self,) + args, kwargs)

    _copy_identity(counted, fn)
    counted._infradev_op = name
    return counted


def _process_group_classes():
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if c10d is None:
        return []
    bases = tuple(c for c in (getattr(c10d, "ProcessGroup", None), getattr(c10d, "Backend", None)) if isinstance(c, type))
    if not bases:
        return []
    return [c for c in vars(c10d).values() if isinstance(c, type) and issubclass(c, bases)]


STORE_METHODS = ("set", "get", "add", "compare_set", "wait", "check", "delete_key", "num_keys", "multi_get", "multi_set", "append")


def _store_arg_bytes(obj, depth=0):
    """The bytes a store request carries: its keys and values (str, bytes, lists of them)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    if isinstance(obj, str):
        return len(obj.encode("utf-8", "surrogatepass"))
    if isinstance(obj, (list, tuple)) and depth < 2:
        return sum(_store_arg_bytes(o, depth + 1) for o in obj)
    return 8


def _make_store_wrapper(fn):
    def counted(self, *args, **kwargs):
        nbytes = sum(_store_arg_bytes(a) for a in args) + sum(_store_arg_bytes(v) for v in kwargs.values())
        with _lock:
            _totals["store_ops"] += 1
            _totals["store_bytes"] += nbytes
        result = fn(self, *args, **kwargs)
        if isinstance(result, (bytes, bytearray, list)):  # get / multi_get: the reply's payload came back too
            reply = _store_arg_bytes(result)
            with _lock:
                _totals["store_bytes"] += reply
        return result

    _copy_identity(counted, fn)
    counted._infradev_op = "store"
    return counted


def _patch_stores():
    """Count the store's requests (each one a request and a reply on the wire): init_process_group and
    new_group poll the store while they wait for the other ranks, as often as their timing makes them."""
    c10d = sys.modules.get("torch._C._distributed_c10d")
    base = getattr(c10d, "Store", None) if c10d is not None else None
    if not isinstance(base, type):
        return
    for cls in [c for c in vars(c10d).values() if isinstance(c, type) and issubclass(c, base)]:
        for method in STORE_METHODS:
            current = cls.__dict__.get(method)
            if current is None or getattr(current, "_infradev_op", None):
                continue
            try:
                setattr(cls, method, _make_store_wrapper(current))
            except (TypeError, AttributeError):
                continue
            _originals.append(current)


def _patch_group_creation(modules):
    """Count the process groups made through torch (each connects its ranks: setup traffic)."""
    for mod in modules:
        current = getattr(mod, "_new_process_group_helper", None)
        if current is None or getattr(current, "_infradev_op", None):
            continue

        def made(*args, _fn=current, **kwargs):
            backend = args[3] if len(args) > 3 else kwargs.get("backend")
            with _lock:
                _totals["groups"] += 1
                name = str(backend).lower()[:32]
                if name not in _totals["backends"] and len(_totals["backends"]) < 16:
                    _totals["backends"].append(name)
            return _fn(*args, **kwargs)

        _copy_identity(made, current)
        made._infradev_op = "new_group"
        setattr(mod, "_new_process_group_helper", made)
        _originals.append(current)


def _patch_process_groups():
    """Wrap the collective methods every ProcessGroup / Backend class defines itself. Caller holds _lock."""
    global _real_group_types
    classes = _process_group_classes()
    _real_group_types = _real_group_types | frozenset(classes)
    for cls in classes:
        for method in PG_METHODS:
            current = cls.__dict__.get(method)
            if current is None or getattr(current, "_infradev_op", None):
                continue
            try:
                setattr(cls, method, _make_method_wrapper(current, method))
            except (TypeError, AttributeError):  # a class that refuses new attributes: left as it is
                continue
            _originals.append(current)
            if method == "allreduce" and not _pg_counting:
                _pg_counting.append(True)


def patch_loaded():
    """Wrap every known op on torch.distributed and distributed_c10d, if they are imported. Idempotent."""
    modules = [sys.modules.get("torch.distributed"), sys.modules.get("torch.distributed.distributed_c10d")]
    modules = [m for m in modules if m is not None]
    if not modules:
        return False
    with _lock:
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        sentinel = getattr(getattr(c10d, "GroupMember", None), "NON_GROUP_MEMBER", None)
        if sentinel is not None and not _non_member:
            _non_member.append(sentinel)
        _patch_process_groups()
        _patch_stores()
        _patch_group_creation(modules)
        for op in OPS:
            for mod in modules:
                current = getattr(mod, op, None)
                if current is None or getattr(current, "_infradev_op", None):
                    continue
                wrapper = _wrappers.get(id(current))
                if wrapper is None:
                    wrapper = _make_wrapper(current, op)
                    _wrappers[id(current)] = wrapper
                    _originals.append(current)
                setattr(mod, op, wrapper)
        # Not a measurement: rank > 0 waits for rank 0's store instead of torch's 1 s retry (see there).
        from . import _rendezvous

        _rendezvous.install(modules)
    return True


def is_patched():
    dist = sys.modules.get("torch.distributed")
    fn = getattr(dist, "all_reduce", None) if dist is not None else None
    return bool(getattr(fn, "_infradev_op", None))


class _PatchAfterImport:
    """Meta-path finder: lets torch.distributed import normally, then patches it before anyone
    (a test module's `from torch.distributed import all_reduce`) can bind the originals."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch.distributed":
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        run_module = spec.loader.exec_module

        def exec_then_patch(module):
            run_module(module)
            _remove_hook()
            patch_loaded()

        spec.loader.exec_module = exec_then_patch
        return spec


def _remove_hook():
    global _hook
    if _hook is not None and _hook in sys.meta_path:
        sys.meta_path.remove(_hook)
    _hook = None


def install():
    """Patch torch.distributed now if it is imported, else right after its import. Idempotent."""
    global _hook
    if patch_loaded():
        return
    if _hook is None:
        _hook = _PatchAfterImport()
        sys.meta_path.insert(0, _hook)
