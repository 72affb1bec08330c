import torch

from nanodecode import TinyDecoder


def test_forward_sequence_shape(model, config, device):
    tokens = torch.randint(0, config.vocab_size, (2, 5), device=device)
    logits = model.forward_sequence(tokens)
    assert logits.shape == (2, 5, config.vocab_size)
    assert torch.isfinite(logits).all()


def test_same_seed_same_weights(config):
    a, b = TinyDecoder(config, seed=3), TinyDecoder(config, seed=3)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
