import torch

from nanodecode import sample


def test_same_seed_and_step_same_tokens(device):
    logits = torch.randn(3, 50, device=device)
    assert torch.equal(sample(logits, 1, 4), sample(logits, 1, 4))


def test_greedy_at_zero_temperature(device):
    logits = torch.randn(3, 50, device=device)
    assert torch.equal(sample(logits, 1, 4, temperature=0.0), logits.argmax(-1))


def test_tokens_in_range(device):
    tokens = sample(torch.randn(4, 17, device=device), 0, 0)
    assert tokens.dtype == torch.int64 and tokens.shape == (4,)
    assert ((tokens >= 0) & (tokens < 17)).all()
