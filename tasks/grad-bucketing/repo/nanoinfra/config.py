"""Configuration of a training run."""

from dataclasses import dataclass


@dataclass
class TrainConfig:
    """Every knob of a run. Invalid values raise ``ValueError`` on construction."""

    in_features: int = 16
    hidden: int = 32
    out_features: int = 4
    batch_size: int = 8  # per rank
    lr: float = 0.05
    steps: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("in_features", "hidden", "out_features", "batch_size", "steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"TrainConfig.{name} must be an integer >= 1 (got {value!r})")
        if not self.lr > 0:
            raise ValueError(f"TrainConfig.lr must be > 0 (got {self.lr!r})")
