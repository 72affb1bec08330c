"""The CUDA-graph mode of the engine: it is selectable, and a graph engine decodes."""

import pytest
import torch

from nanodecode import DecodeEngine, cuda_graphs_from_env

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def test_mode_from_environment(monkeypatch):
    monkeypatch.setenv("NANODECODE_CUDA_GRAPHS", "1")
    assert cuda_graphs_from_env() is True
    monkeypatch.setenv("NANODECODE_CUDA_GRAPHS", "0")
    assert cuda_graphs_from_env() is False
    monkeypatch.delenv("NANODECODE_CUDA_GRAPHS")
    assert cuda_graphs_from_env() is False


def test_explicit_argument_wins_over_environment(model, monkeypatch):
    monkeypatch.setenv("NANODECODE_CUDA_GRAPHS", "1")
    engine = DecodeEngine(model, batch_size=2, device="cpu", cuda_graphs=False)
    assert engine.uses_cuda_graphs is False


def test_cuda_graphs_on_cpu_is_refused(model):
    with pytest.raises(ValueError, match="CUDA"):
        DecodeEngine(model, batch_size=2, device="cpu", cuda_graphs=True)


@needs_cuda
def test_graph_engine_generates(model, config):
    engine = DecodeEngine(model, batch_size=2, seed=0, device="cuda", cuda_graphs=True)
    assert engine.uses_cuda_graphs
    prompt = torch.randint(0, config.vocab_size, (2, 3), device="cuda")
    out = engine.generate(prompt, max_new_tokens=6)
    assert out.shape == (2, 6)
    assert ((out >= 0) & (out < config.vocab_size)).all()
    assert engine.position == 8


@needs_cuda
def test_graph_engine_first_step_matches_eager(model, config):
    tokens = torch.tensor([3, 4], device="cuda")
    graph = DecodeEngine(model, batch_size=2, seed=1, device="cuda", cuda_graphs=True)
    eager = DecodeEngine(model, batch_size=2, seed=1, device="cuda", cuda_graphs=False)
    assert torch.equal(graph.step(tokens), eager.step(tokens))
    torch.testing.assert_close(graph.last_logits, eager.last_logits)


@needs_cuda
def test_graph_engine_is_deterministic(model, config):
    prompt = torch.randint(0, config.vocab_size, (2, 4), device="cuda")
    a = DecodeEngine(model, batch_size=2, seed=5, device="cuda", cuda_graphs=True).generate(prompt, 8)
    b = DecodeEngine(model, batch_size=2, seed=5, device="cuda", cuda_graphs=True).generate(prompt, 8)
    assert torch.equal(a, b)
