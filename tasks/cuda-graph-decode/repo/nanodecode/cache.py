"""The KV cache: keys and values of every layer, allocated once for the whole sequence."""

import torch

from .config import DecoderConfig


class KVCache:
    """``keys[layer]`` / ``values[layer]`` have shape (batch, n_heads, max_seq_len, head_dim)."""

    def __init__(self, config: DecoderConfig, batch_size: int, device: torch.device, dtype=torch.float32):
        if batch_size < 1:
            raise ValueError(f"KVCache: batch_size must be >= 1 (got {batch_size})")
        shape = (config.n_layers, batch_size, config.n_heads, config.max_seq_len, config.head_dim)
        self.config = config
        self.batch_size = batch_size
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)

    @property
    def max_seq_len(self) -> int:
        return self.config.max_seq_len

    def write(self, layer: int, position: int, key: torch.Tensor, value: torch.Tensor) -> None:
        """Stores one position's key and value, each (batch, n_heads, head_dim)."""
        self.keys[layer, :, :, position] = key
        self.values[layer, :, :, position] = value

    def read(self, layer: int, length: int):
        """Keys and values of positions [0, length), each (batch, n_heads, length, head_dim)."""
        return self.keys[layer, :, :, :length], self.values[layer, :, :, :length]

    def clear(self) -> None:
        self.keys.zero_()
        self.values.zero_()
