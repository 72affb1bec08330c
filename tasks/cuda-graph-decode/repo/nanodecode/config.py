"""Shape of the model and of its cache."""

from dataclasses import dataclass


@dataclass
class DecoderConfig:
    """Every knob of the model. Invalid values raise ``ValueError`` on construction."""

    vocab_size: int = 512
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 4
    mlp_ratio: int = 4
    max_seq_len: int = 128

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "mlp_ratio", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"DecoderConfig.{name} must be an integer >= 1 (got {value!r})")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"DecoderConfig.d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})"
            )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads
