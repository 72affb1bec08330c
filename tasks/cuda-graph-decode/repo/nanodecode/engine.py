"""The decode engine: feeds one token per sequence per step and samples the next one."""

from typing import Optional, Union

import torch

from .cache import KVCache
from .model import TinyDecoder
from .runtime import resolve_device
from .sampling import sample


class DecodeEngine:
    """Owns the KV cache and the decoding state of one batch of sequences.

    ``position`` is the cache slot the next token goes to; ``sampling_step`` is the offset of the
    sampling noise (how many tokens were sampled so far). Both start at 0 and ``reset()`` rewinds them.
    """

    def __init__(
        self,
        model: TinyDecoder,
        batch_size: int,
        seed: int = 0,
        temperature: float = 1.0,
        device: Optional[Union[str, torch.device]] = None,
    ):
        if batch_size < 1:
            raise ValueError(f"DecodeEngine: batch_size must be >= 1 (got {batch_size})")
        if temperature < 0:
            raise ValueError(f"DecodeEngine: temperature must be >= 0 (got {temperature})")
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.config = model.config
        self.batch_size = batch_size
        self.seed = seed
        self.temperature = temperature
        self.cache = KVCache(self.config, batch_size, self.device)
        self.position = 0
        self.sampling_step = 0
        self._last_logits = torch.zeros(batch_size, self.config.vocab_size, device=self.device)

    @property
    def last_logits(self) -> torch.Tensor:
        """Logits of the last step, (batch, vocab); a copy the caller owns."""
        return self._last_logits.clone()

    def reset(self, seed: Optional[int] = None) -> None:
        """Start new sequences: position and sampling step back to 0 (and a new seed if given)."""
        if seed is not None:
            self.seed = seed
        self.position = 0
        self.sampling_step = 0
        self.cache.clear()

    def _check_tokens(self, tokens) -> torch.Tensor:
        tokens = torch.as_tensor(tokens, device=self.device)
        if tokens.shape != (self.batch_size,):
            raise ValueError(f"DecodeEngine.step: expected tokens of shape ({self.batch_size},), got {tuple(tokens.shape)}")
        return tokens.long()

    @torch.no_grad()
    def step(self, tokens) -> torch.Tensor:
        """Feeds ``tokens`` (batch,) at the current position; returns the sampled next tokens (batch,)."""
        if self.position >= self.config.max_seq_len:
            raise RuntimeError(f"DecodeEngine.step: the cache is full (max_seq_len={self.config.max_seq_len}); call reset()")
        tokens = self._check_tokens(tokens)
        logits = self.model.decode_step(tokens, self.position, self.cache)
        self._last_logits.copy_(logits)
        next_tokens = sample(logits, self.seed, self.sampling_step, self.temperature)
        self.position += 1
        self.sampling_step += 1
        return next_tokens

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens: int) -> torch.Tensor:
        """Feeds ``prompt`` (batch, length) one token at a time, then samples ``max_new_tokens`` tokens.

        Returns the new tokens, (batch, max_new_tokens). Continues from the current position; call
        ``reset()`` first to start new sequences.
        """
        prompt = torch.as_tensor(prompt, device=self.device).long()
        if prompt.dim() != 2 or prompt.shape[0] != self.batch_size or prompt.shape[1] < 1:
            raise ValueError(f"DecodeEngine.generate: expected a prompt of shape ({self.batch_size}, length >= 1), got {tuple(prompt.shape)}")
        if max_new_tokens < 1:
            raise ValueError(f"DecodeEngine.generate: max_new_tokens must be >= 1 (got {max_new_tokens})")
        if self.position + prompt.shape[1] + max_new_tokens - 1 > self.config.max_seq_len:
            raise ValueError("DecodeEngine.generate: prompt plus new tokens exceed max_seq_len")
        for i in range(prompt.shape[1]):
            next_tokens = self.step(prompt[:, i])
        new = [next_tokens]
        for _ in range(max_new_tokens - 1):
            next_tokens = self.step(next_tokens)
            new.append(next_tokens)
        return torch.stack(new, dim=1)
