"""A small pre-norm decoder-only transformer."""

import math

import torch
import torch.nn.functional as F
from torch import nn

from .cache import KVCache
from .config import DecoderConfig


class Block(nn.Module):
    def __init__(self, config: DecoderConfig):
        super().__init__()
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.norm_attn = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.norm_mlp = nn.LayerNorm(config.d_model)
        self.fc_in = nn.Linear(config.d_model, config.mlp_ratio * config.d_model)
        self.fc_out = nn.Linear(config.mlp_ratio * config.d_model, config.d_model)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        # (batch, length, d_model) -> (batch, n_heads, length, head_dim)
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)

    def _merge_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, length, _ = x.shape
        return x.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc_out(F.gelu(self.fc_in(self.norm_mlp(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Whole sequence, causal attention. x: (batch, length, d_model)."""
        length = x.shape[1]
        q, k, v = self.qkv(self.norm_attn(x)).chunk(3, dim=-1)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        causal = torch.ones(length, length, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        attn = torch.softmax(scores, dim=-1) @ v
        return self.mlp(x + self.proj(self._merge_heads(attn)))

    def forward_cached(self, x: torch.Tensor, layer: int, position: int, cache: KVCache) -> torch.Tensor:
        """One new token per sequence at ``position``. x: (batch, 1, d_model)."""
        q, k, v = self.qkv(self.norm_attn(x)).chunk(3, dim=-1)
        q, k, v = self._split_heads(q), self._split_heads(k), self._split_heads(v)
        cache.write(layer, position, k[:, :, 0], v[:, :, 0])
        keys, values = cache.read(layer, position + 1)
        scores = q @ keys.transpose(-2, -1) / math.sqrt(self.head_dim)
        attn = torch.softmax(scores, dim=-1) @ values
        return self.mlp(x + self.proj(self._merge_heads(attn)))


class TinyDecoder(nn.Module):
    def __init__(self, config: DecoderConfig, seed: int = 0):
        super().__init__()
        self.config = config
        generator_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        torch.random.set_rng_state(generator_state)

    def forward_sequence(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (batch, length, vocab) of a whole sequence, without a cache: the reference path."""
        length = tokens.shape[1]
        if length > self.config.max_seq_len:
            raise ValueError(f"sequence of {length} tokens exceeds max_seq_len={self.config.max_seq_len}")
        positions = torch.arange(length, device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)[None]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.forward_sequence(tokens)

    def decode_step(self, tokens: torch.Tensor, position: int, cache: KVCache) -> torch.Tensor:
        """Logits (batch, vocab) for one token per sequence at ``position``; writes that position of the cache."""
        positions = torch.full((tokens.shape[0],), position, dtype=torch.long, device=tokens.device)
        x = (self.tok_emb(tokens) + self.pos_emb(positions))[:, None]
        for layer, block in enumerate(self.blocks):
            x = block.forward_cached(x, layer, position, cache)
        return self.head(self.norm(x[:, 0]))
