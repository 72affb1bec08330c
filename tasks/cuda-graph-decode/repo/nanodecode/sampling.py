"""Gumbel-max sampling with counter-based noise.

The noise for sequence ``b`` and token ``v`` is a hash of (seed, step, b, v): no generator state, so
the same (seed, step) draws the same noise on every device and in every execution order. ``step`` is
the sampling offset: the engine passes how many tokens it has sampled so far.
"""

from typing import Union

import torch

_MASK32 = 0xFFFFFFFF
IntLike = Union[int, torch.Tensor]


def _mix(x: torch.Tensor) -> torch.Tensor:
    # Every product stays below 2**63: x < 2**32 and the multiplier < 2**27.
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK32
    return x ^ (x >> 16)


def gumbel_noise(seed: IntLike, step: IntLike, batch: int, vocab: int, device) -> torch.Tensor:
    """Standard Gumbel noise of shape (batch, vocab), a pure function of its arguments."""
    rows = torch.arange(batch, device=device, dtype=torch.int64).view(-1, 1)
    cols = torch.arange(vocab, device=device, dtype=torch.int64).view(1, -1)
    x = ((rows * 0x3C6EF35F) & _MASK32) ^ ((cols * 0x27D4EB2F) & _MASK32)
    x = _mix(x ^ ((seed * 0x165667B1) & _MASK32))
    x = _mix(x ^ ((step * 0x2F2C3B5) & _MASK32))
    uniform = ((x >> 8).to(torch.float32) + 0.5) * (1.0 / (1 << 24))
    return -torch.log(-torch.log(uniform))


def sample(logits: torch.Tensor, seed: IntLike, step: IntLike, temperature: float = 1.0) -> torch.Tensor:
    """Next token per row of ``logits`` (batch, vocab) as int64 (batch,). ``temperature == 0`` is greedy."""
    if temperature < 0:
        raise ValueError(f"sample: temperature must be >= 0 (got {temperature})")
    if temperature == 0:
        return torch.argmax(logits, dim=-1)
    noise = gumbel_noise(seed, step, logits.shape[0], logits.shape[1], logits.device)
    return torch.argmax(logits.float() / temperature + noise, dim=-1)
