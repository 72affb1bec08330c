import pytest
import torch

from nanodecode import DecodeEngine


def test_generate_shape_and_range(model, config, device):
    engine = DecodeEngine(model, batch_size=2, seed=0, device=device)
    prompt = torch.randint(0, config.vocab_size, (2, 3), device=device)
    out = engine.generate(prompt, max_new_tokens=4)
    assert out.shape == (2, 4)
    assert ((out >= 0) & (out < config.vocab_size)).all()


def test_position_advances_and_reset_rewinds(model, config, device):
    engine = DecodeEngine(model, batch_size=2, seed=0, device=device)
    for _ in range(3):
        engine.step(torch.zeros(2, dtype=torch.long, device=device))
    assert engine.position == 3
    engine.reset()
    assert engine.position == 0


def test_first_step_matches_forward_sequence(model, config, device):
    engine = DecodeEngine(model, batch_size=2, seed=0, device=device)
    tokens = torch.tensor([1, 2], device=device)
    engine.step(tokens)
    expected = model.forward_sequence(tokens[:, None])[:, -1]
    torch.testing.assert_close(engine.last_logits, expected)


def test_same_seed_same_tokens(model, config, device):
    prompt = torch.randint(0, config.vocab_size, (2, 3), device=device)
    a = DecodeEngine(model, batch_size=2, seed=7, device=device).generate(prompt, 5)
    b = DecodeEngine(model, batch_size=2, seed=7, device=device).generate(prompt, 5)
    assert torch.equal(a, b)


def test_full_cache_raises(model, config, device):
    engine = DecodeEngine(model, batch_size=1, seed=0, device=device)
    for _ in range(config.max_seq_len):
        engine.step(torch.zeros(1, dtype=torch.long, device=device))
    with pytest.raises(RuntimeError, match="full"):
        engine.step(torch.zeros(1, dtype=torch.long, device=device))
