import pytest

from nanoinfra.config import TrainConfig


def test_defaults_are_valid():
    config = TrainConfig()
    assert config.batch_size >= 1 and config.lr > 0


@pytest.mark.parametrize("field, value", [("batch_size", 0), ("hidden", -1), ("lr", 0.0), ("steps", 1.5)])
def test_invalid_values_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})
