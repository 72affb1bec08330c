"""A CPU STAND-IN for the H200, for task authors only (bench/megatron_cpu_screen.py): it lets
Megatron-LM's DDP (megatron-param-layout's code) import and build on Debian's torch 1.13 CPU, so
that probes and mutants can be screened without a GPU. It is NOT how infradev grades: the grader
never loads it, and a verdict made with it is never a task-check result.

Put on PYTHONPATH, Python imports it at start-up. It
- answers imports of torch 2.x-only modules (and Megatron's optional dependencies) that this
  interpreter lacks with MagicMock modules; torch.distributed._shard always (broken on 3.11);
- adds the few torch 2.x names Megatron reads at import (`_coalescing_manager`, `ParamsT`,
  `torch.compile`, the CUDA memory-pool classes) as no-ops;
- with CPUSHIM_CUDA=1: CUDA calls become CPU ones (`current_device()` is "cpu", `.cuda()` is the
  identity, streams are mocks) and every process group is gloo.
What gloo cannot do (reduce-scatter, AVG, some dtypes) fails: those cases are left out of a screen
by running golden first and deselecting what golden fails here."""
import sys, types, importlib.abc, importlib.machinery
from unittest import mock

PREFIXES = ("torch.distributed.checkpoint", "torch.distributed._tensor", "torch.distributed.tensor", "torch.distributed.fsdp._fully_shard", "torch.distributed.device_mesh", "torch._dynamo", "torch.distributed._composable", "torch.nn.attention", "torch.distributed.fsdp", "torch.distributed._symmetric_memory", "torch.utils._pytree", "torch.distributed.algorithms._checkpoint", "torch.distributed.nn", "torch.library", "torch._C._distributed_c10d", "einops", "packaging", "tensorstore", "zarr", "torch.distributed.elastic", "numpy.dtypes", "torch.utils._python_dispatch", "torch._subclasses", "torch.distributed._functional_collectives", "torch.export", "torch.fx.experimental", "torch.amp", "click", "wandb", "transformers", "datasets", "sentencepiece", "tiktoken", "nltk", "yaml", "omegaconf", "flask", "regex", "triton")

FORCE = ("torch.distributed._shard",)

class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        m = mock.MagicMock(name=spec.name)
        m.__path__ = []
        m.__spec__ = spec
        m.__name__ = spec.name
        m.__version__ = "0.0.0"
        return m
    def exec_module(self, module):
        pass

class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.startswith(FORCE):
            return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)
        if not name.startswith(PREFIXES):
            return None
        for f in sys.meta_path:
            if f is self:
                continue
            try:
                s = f.find_spec(name, path, target)
            except Exception:
                s = None
            if s is not None:
                return None
        return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)

sys.meta_path.insert(0, _Finder())

import typing as _typing
if not hasattr(_typing, "override"):  # Python 3.12's typing.override (this Debian has 3.11)
    _typing.override = lambda f: f

import contextlib
import torch
import torch.distributed
if not hasattr(torch.distributed, "_coalescing_manager"):
    torch.distributed._coalescing_manager = lambda *a, **k: contextlib.nullcontext()
import torch.optim.optimizer as _oo
if not hasattr(_oo, "ParamsT"):
    _oo.ParamsT = object
if not hasattr(torch, "compile"):
    def _compile(fn=None, *a, **k):
        return fn if fn is not None else (lambda f: f)
    torch.compile = _compile
for _n in ("DeviceMesh",):
    if not hasattr(torch.distributed, _n):
        setattr(torch.distributed, _n, type(_n, (), {}))
import torch.cuda.memory as _cm
for _n in ("CUDAPluggableAllocator", "MemPool", "use_mem_pool"):
    if not hasattr(_cm, _n):
        setattr(_cm, _n, mock.MagicMock(name=_n))

import os as _os
if _os.environ.get("CPUSHIM_CUDA") == "1":
    torch.cuda.set_device = lambda *a, **k: None
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: "cpu"
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.Stream = mock.MagicMock(name="Stream")
    torch.cuda.current_stream = mock.MagicMock(name="current_stream")
    torch.nn.Module.cuda = lambda self, *a, **k: self
    torch.Tensor.cuda = lambda self, *a, **k: self
    _ipg = torch.distributed.init_process_group
    def _init(*a, **k):
        k["backend"] = "gloo"
        a = a[1:] if a else a
        return _ipg(*a, **k)
    torch.distributed.init_process_group = _init
    _ng = torch.distributed.new_group
    def _new_group(*a, **k):
        k.pop("pg_options", None); k.pop("use_local_synchronization", None); k.pop("group_desc", None)
        k["backend"] = "gloo"
        return _ng(*a, **k)
    torch.distributed.new_group = _new_group
    import torch.distributed.distributed_c10d as _c10d
    if not hasattr(_c10d, "_world"):
        class _World:
            @property
            def pg_map(self):
                return _c10d._pg_map
        _c10d._world = _World()

if _os.environ.get("CPUSHIM_WS1_COLLECTIVES") == "1":
    # Opt-in (megatron-fp32-local-accum's screen): gloo has no bf16 all-reduce, no reduce-scatter,
    # no AVG. In a group of ONE rank every reduction (sum, average, max) of a tensor is that tensor
    # (NCCL's result at world size 1 too), so these become the identity there; any larger group
    # goes to gloo as before. The coalescing manager yields a handle whose wait() returns, as
    # torch 2.x's does.
    import torch.distributed as _dist

    class _DoneHandle:
        def wait(self, *a, **k):
            return True

        def is_completed(self):
            return True

    def _one_rank(group):
        return _dist.get_world_size(group) == 1

    _orig_all_reduce = _dist.all_reduce

    def _all_reduce(tensor, op=_dist.ReduceOp.SUM, group=None, async_op=False):
        if _one_rank(group):
            return _DoneHandle() if async_op else None
        return _orig_all_reduce(tensor, op=op, group=group, async_op=async_op)

    def _make_rs(orig):
        def _reduce_scatter(output, input, op=_dist.ReduceOp.SUM, group=None, async_op=False):
            if _one_rank(group):
                output.copy_(input.view(-1)[: output.numel()].view_as(output))
                return _DoneHandle() if async_op else None
            return orig(output, input, op=op, group=group, async_op=async_op)
        return _reduce_scatter

    _dist.all_reduce = _all_reduce
    for _n in ("reduce_scatter_tensor", "_reduce_scatter_base"):
        if hasattr(_dist, _n):
            setattr(_dist, _n, _make_rs(getattr(_dist, _n)))
    _dist._coalescing_manager = lambda *a, **k: contextlib.nullcontext(_DoneHandle())

if _os.environ.get("CPUSHIM_NO_JIT") == "1":
    # Opt-in: megatron.training imports modules whose @torch.jit.script functions torch 1.13's
    # scripting cannot compile (torch_norm); eager functions suffice to screen a probe of get_model.
    torch.jit.script = lambda fn=None, *a, **k: fn if fn is not None else (lambda f: f)
