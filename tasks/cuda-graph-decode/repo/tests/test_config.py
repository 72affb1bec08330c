import pytest

from nanodecode import DecoderConfig


def test_defaults_are_valid():
    config = DecoderConfig()
    assert config.head_dim * config.n_heads == config.d_model


@pytest.mark.parametrize("field", ["vocab_size", "d_model", "n_heads", "n_layers", "max_seq_len"])
def test_rejects_non_positive(field):
    with pytest.raises(ValueError, match=field):
        DecoderConfig(**{field: 0})


def test_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="divisible"):
        DecoderConfig(d_model=30, n_heads=4)
