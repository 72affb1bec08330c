import pytest

from nanoinfra.config import TrainConfig


def test_defaults_are_valid():
    config = TrainConfig()
    assert config.batch_size >= 1 and config.lr > 0
    assert config.bucket_cap_mb > 0
    assert config.grad_accum_steps == 1


def test_bucket_cap_and_accumulation_are_accepted():
    config = TrainConfig(bucket_cap_mb=0.5, grad_accum_steps=2, batch_size=8)
    assert config.bucket_cap_mb == 0.5 and config.grad_accum_steps == 2


@pytest.mark.parametrize(
    "field, value",
    [
        ("batch_size", 0),
        ("hidden", -1),
        ("lr", 0.0),
        ("steps", 1.5),
        ("bucket_cap_mb", 0),
        ("bucket_cap_mb", -2.0),
        ("grad_accum_steps", 0),
    ],
)
def test_invalid_values_are_rejected(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig(**{field: value})


def test_accumulation_must_divide_the_batch():
    with pytest.raises(ValueError, match="grad_accum_steps"):
        TrainConfig(batch_size=6, grad_accum_steps=4)
