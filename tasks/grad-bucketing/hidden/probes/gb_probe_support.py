"""Shared pieces of the grad-bucketing probes: a model, per-rank data and float64 references.

The references never trust the code under test: every rank rebuilds every rank's batch from its
seed and recomputes all ranks' gradients itself, in float64 on the CPU.
"""

import copy
import os
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from torch import nn

MIB = 1024 * 1024
RTOL = 1e-4
ATOL = 1e-6

Batch = Tuple[torch.Tensor, torch.Tensor]


def run_device() -> torch.device:
    if os.environ.get("NANOINFRA_DEVICE", "cpu").strip().lower() == "cuda":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


_TEST_GROUP = None


def set_test_group(group) -> None:
    global _TEST_GROUP
    _TEST_GROUP = group


def test_group():
    """The process group of the running probe: every rank's, made afresh for each test so that a
    submission that throws the ranks out of step fails that test only (see conftest.py)."""
    return _TEST_GROUP


def dp(module: nn.Module, **kwargs):
    """``DataParallel(module, **kwargs)`` on this test's own process group (all ranks)."""
    from nanoinfra.parallel import DataParallel

    return DataParallel(module, process_group=test_group(), **kwargs)


def world() -> int:
    return dist.get_world_size()


def rank() -> int:
    return dist.get_rank()


def cap_mb(nbytes: int) -> float:
    """``bucket_cap_mb`` that means exactly ``nbytes`` bytes."""
    return nbytes / MIB


class TwoLayerNet(nn.Module):
    """Parameters of assorted sizes; ``aux`` is used only when the forward asks for it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 24)
        self.mid = nn.Linear(24, 24)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 24))
        self.head = nn.Linear(24, 5)
        self.aux = nn.Linear(24, 5)

    def forward(self, x: torch.Tensor, use_aux: bool = True) -> torch.Tensor:
        h = torch.tanh(self.embed(x))
        h = torch.tanh(self.mid(h)) * self.scale
        out = self.head(h)
        if use_aux:
            out = out + 0.5 * self.aux(h)
        return out


def make_net(device: torch.device, frozen: Sequence[str] = (), seed: int = 11) -> TwoLayerNet:
    torch.manual_seed(seed)
    net = TwoLayerNet()
    for name, param in net.named_parameters():
        if any(name == f or name.startswith(f + ".") for f in frozen):
            param.requires_grad_(False)
    return net.to(device)


def make_batch(step: int, for_rank: int, rows: int = 6) -> Batch:
    gen = torch.Generator().manual_seed(9_000 + 97 * step + for_rank)
    return torch.randn(rows, 8, generator=gen), torch.randn(rows, 5, generator=gen)


def loss_of(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return (out - target).pow(2).mean()


def backward_on(model: nn.Module, batch: Batch, device: torch.device, use_aux: bool = True) -> None:
    x, y = batch
    loss_of(model(x.to(device), use_aux=use_aux), y.to(device)).backward()


def float64_copy(module: nn.Module) -> nn.Module:
    """A float64 CPU copy with the same parameters (and the same frozen ones)."""
    return copy.deepcopy(module).to(device="cpu", dtype=torch.float64)


def local_grads(template: nn.Module, batches: Iterable[Batch], use_aux: bool = True) -> Dict[str, torch.Tensor]:
    """float64 gradients of one rank after backward on each of ``batches`` (accumulated)."""
    net = copy.deepcopy(template)
    for x, y in batches:
        loss_of(net(x.double(), use_aux=use_aux), y.double()).backward()
    return {
        name: (p.grad.clone() if p.grad is not None else torch.zeros_like(p))
        for name, p in net.named_parameters()
        if p.requires_grad
    }


def averaged_grads(template: nn.Module, per_rank: List[Tuple[List[Batch], bool]]) -> Dict[str, torch.Tensor]:
    """The float64 average over ranks of each rank's (accumulated) gradients; missing = zeros."""
    total: Optional[Dict[str, torch.Tensor]] = None
    for batches, use_aux in per_rank:
        grads = local_grads(template, batches, use_aux)
        total = grads if total is None else {k: total[k] + grads[k] for k in total}
    assert total is not None
    return {k: v / len(per_rank) for k, v in total.items()}


def grad_mismatches(module: nn.Module, expected: Dict[str, torch.Tensor]) -> List[str]:
    """Names of parameters whose .grad is missing or differs from ``expected``, with the error."""
    bad = []
    params = dict(module.named_parameters())
    for name, want in expected.items():
        got = params[name].grad
        if got is None:
            bad.append(f"{name}: .grad is None")
            continue
        got = got.detach().to("cpu", torch.float64)
        if got.shape != want.shape or not torch.allclose(got, want, rtol=RTOL, atol=ATOL):
            err = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
            scale = want.abs().max().item()
            bad.append(f"{name}: max abs error {err:.3g} (reference max {scale:.3g})")
    return bad


def trainable_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters() if p.requires_grad)


def trainable_names(module: nn.Module) -> List[str]:
    return [name for name, p in module.named_parameters() if p.requires_grad]


def bucket_names(model) -> List[List[str]]:
    return [list(bucket.param_names) for bucket in model.buckets]


# --- Synthetic-loss models: exact gradients, any dtype mix ----------------------------------------
#
# loss = sum over the used parameters of (p * c).sum(), so p.grad is exactly the coefficient tensor c.
# Coefficients are small integers, so the average over 1, 2 or 4 ranks is exact in float32 as well.


class ParamBag(nn.Module):
    """Parameters named p0, p1, ... with the given numel and dtype, on ``device``."""

    def __init__(self, spec: Sequence[Tuple[int, torch.dtype]], device: torch.device) -> None:
        super().__init__()
        for index, (numel, dtype) in enumerate(spec):
            shape = (numel,) if numel % 2 else (2, numel // 2)
            self.register_parameter(f"p{index}", nn.Parameter(torch.zeros(shape, dtype=dtype, device=device)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # pragma: no cover - never called
        return x


def coefficients(bag: nn.Module, step: int, for_rank: int) -> Dict[str, torch.Tensor]:
    """The float64 gradient rank ``for_rank`` produces at ``step`` for every parameter."""
    out = {}
    for index, (name, param) in enumerate(bag.named_parameters()):
        gen = torch.Generator().manual_seed(50_000 + 1_009 * step + 31 * index + for_rank)
        out[name] = torch.randint(-8, 9, tuple(param.shape), generator=gen).to(torch.float64)
    return out


def synthetic_backward(model: nn.Module, step: int, for_rank: int, used: Optional[Iterable[str]] = None) -> None:
    """backward of the synthetic loss on ``model`` (a DataParallel or the bag itself)."""
    bag = getattr(model, "module", model)
    coef = coefficients(bag, step, for_rank)
    names = set(coef) if used is None else set(used)
    terms = [
        (p * coef[n].to(device=p.device, dtype=p.dtype)).sum().to(torch.float64)
        for n, p in bag.named_parameters()
        if n in names and p.requires_grad
    ]
    if terms:
        torch.stack(terms).sum().backward()


def expected_average(bag: nn.Module, per_rank_steps: Dict[int, List[Tuple[int, Optional[Iterable[str]]]]]) -> Dict[str, torch.Tensor]:
    """float64 average over ranks of each rank's accumulated synthetic gradients; missing = zeros.

    ``per_rank_steps[r]`` lists the (step, used names or None for all) backwards rank r ran.
    """
    names = [n for n, p in bag.named_parameters() if p.requires_grad]
    total = {n: torch.zeros(tuple(p.shape), dtype=torch.float64) for n, p in bag.named_parameters() if p.requires_grad}
    for r, steps in per_rank_steps.items():
        for step, used in steps:
            coef = coefficients(bag, step, r)
            for n in names:
                if used is None or n in set(used):
                    total[n] += coef[n]
    return {n: v / len(per_rank_steps) for n, v in total.items()}


def exact_mismatches(module: nn.Module, expected: Dict[str, torch.Tensor]) -> List[str]:
    """Like grad_mismatches, but the grads must also keep their parameter's dtype and shape."""
    bad = []
    params = dict(module.named_parameters())
    for name, want in expected.items():
        param = params[name]
        got = param.grad
        if got is None:
            bad.append(f"{name}: .grad is None")
            continue
        if got.dtype != param.dtype or got.shape != param.shape:
            bad.append(f"{name}: .grad is {got.dtype}{tuple(got.shape)}, parameter {param.dtype}{tuple(param.shape)}")
            continue
        got64 = got.detach().to("cpu", torch.float64)
        if not torch.allclose(got64, want, rtol=1e-6, atol=1e-7):
            bad.append(f"{name}: max abs error {(got64 - want).abs().max().item():.3g}")
    return bad


def local_snapshot(module: nn.Module) -> Dict[str, Optional[torch.Tensor]]:
    return {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in module.named_parameters()}


def same_grads(module: nn.Module, snapshot: Dict[str, Optional[torch.Tensor]]) -> List[str]:
    """Names whose .grad differs (bitwise, or None-ness) from ``snapshot``."""
    bad = []
    for n, p in module.named_parameters():
        before = snapshot[n]
        if (before is None) != (p.grad is None) or (before is not None and not torch.equal(before, p.grad)):
            bad.append(n)
    return bad


def param_bytes(module: nn.Module, names: Iterable[str]) -> int:
    params = dict(module.named_parameters())
    return sum(params[n].numel() * params[n].element_size() for n in names)


class AllReduceSpy:
    """Replaces ``torch.distributed.all_reduce`` (looked up on the module at call time, as the prompt
    requires) with a recorder that keeps every tensor handed to it, so memory is not recycled while
    the record is compared."""

    def __init__(self, monkeypatch) -> None:
        self.seen: List[torch.Tensor] = []
        self.active = True
        for module in (dist, dist.distributed_c10d):
            original = module.all_reduce

            def recording(tensor, *args, _original=original, **kwargs):
                if self.active:
                    self.seen.append(tensor)
                return _original(tensor, *args, **kwargs)

            monkeypatch.setattr(module, "all_reduce", recording)

    def take(self) -> List[torch.Tensor]:
        seen, self.seen = self.seen, []
        return seen


def signature_of(tensors: Sequence[torch.Tensor]) -> List[Tuple[int, str]]:
    return [(int(t.numel()), str(t.dtype)) for t in tensors]


def gather_objects(obj) -> list:
    """``obj`` from every rank (rank order)."""
    out = [None] * world()
    dist.all_gather_object(out, obj, group=test_group())
    return out


def bucket_bytes(model) -> List[int]:
    return [b.buffer.numel() * b.buffer.element_size() for b in model.buckets]
