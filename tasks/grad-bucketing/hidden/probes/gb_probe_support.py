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
