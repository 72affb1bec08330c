"""The switch and the CPU: the environment variable, the explicit argument, the CUDA check, eager
decoding on the CPU, and the entry points the contract fixes (decode_step and sample take ints or
device tensors). None of these needs a CUDA graph."""

import pytest
import torch

from nanodecode import DecodeEngine, TinyDecoder, cuda_graphs_from_env, sample
from nanodecode.cache import KVCache

TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.mark.probe(promise="env-var-values", kind="condition")
def test_env_var_values(monkeypatch):
    for value, expected in (("1", True), ("0", False), ("1", True), (None, False)):
        if value is None:
            monkeypatch.delenv("NANODECODE_CUDA_GRAPHS", raising=False)
        else:
            monkeypatch.setenv("NANODECODE_CUDA_GRAPHS", value)
        assert cuda_graphs_from_env() is expected, f"NANODECODE_CUDA_GRAPHS={value!r}: expected {expected}"


@pytest.mark.probe(promise="cuda-graphs-need-cuda", kind="condition")
@pytest.mark.parametrize("env", ["0", "1"])
def test_cuda_graphs_need_cuda(config, monkeypatch, env):
    monkeypatch.setenv("NANODECODE_CUDA_GRAPHS", env)
    model = TinyDecoder(config, seed=2)
    with pytest.raises(ValueError, match="(?i)cuda"):
        DecodeEngine(model, batch_size=2, device="cpu", cuda_graphs=True)
    with pytest.raises(ValueError, match="(?i)cuda"):
        DecodeEngine(model, batch_size=2, device=torch.device("cpu"), cuda_graphs=True)


@pytest.mark.probe(promise="eager-works-on-cpu", kind="numerical")
def test_eager_engine_on_cpu(config, monkeypatch):
    # Whatever the mode of the session (and next to CUDA engines when there are any).
    model = TinyDecoder(config, seed=5).eval()
    engine = DecodeEngine(model, batch_size=3, seed=2, device="cpu", cuda_graphs=False)
    assert engine.uses_cuda_graphs is False
    generator = torch.Generator().manual_seed(3)
    history = torch.empty(3, 0, dtype=torch.long)
    for i in range(10):
        tokens = torch.randint(0, config.vocab_size, (3,), generator=generator)
        out = engine.step(tokens)
        history = torch.cat([history, tokens[:, None]], dim=1)
        with torch.no_grad():
            torch.testing.assert_close(engine.last_logits, model.forward_sequence(history)[:, -1], **TOL, msg=lambda m: f"CPU step {i}: {m}")
        assert out.device.type == "cpu" and torch.equal(out, sample(engine.last_logits, 2, i, 1.0))
    engine.reset()
    assert engine.generate(history[:, :2], 3).shape == (3, 3)
    assert engine.position == 4


@pytest.mark.probe(promise="decode-step-int-or-tensor-position", kind="numerical")
def test_decode_step_int_or_tensor_position(model, config, device):
    batch = 3
    caches = {kind: KVCache(config, batch, device) for kind in ("int", "tensor (1,)", "tensor ()")}
    generator = torch.Generator().manual_seed(12)
    history = torch.empty(batch, 0, dtype=torch.long, device=device)
    for position in range(12):
        tokens = torch.randint(0, config.vocab_size, (batch,), generator=generator).to(device)
        history = torch.cat([history, tokens[:, None]], dim=1)
        with torch.no_grad():
            expected = model.forward_sequence(history)[:, -1]
            given = {
                "int": position,
                "tensor (1,)": torch.tensor([position], dtype=torch.long, device=device),
                "tensor ()": torch.tensor(position, dtype=torch.long, device=device),
            }
            for kind, cache in caches.items():
                logits = model.decode_step(tokens, given[kind], cache)
                assert logits.shape == (batch, config.vocab_size)
                torch.testing.assert_close(logits, expected, **TOL, msg=lambda m: f"decode_step with an {kind} position {position}: {m}")


@pytest.mark.probe(promise="sample-int-or-tensor-seed-step", kind="numerical")
def test_sample_int_or_tensor_seed_step(device):
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(0)).to(device)
    for seed, step in ((0, 0), (3, 7), (2**31 - 1, 63)):
        for temperature in (1.0, 0.5):
            want = sample(logits, seed, step, temperature)
            for as_tensor in (lambda v: torch.tensor([v], dtype=torch.long, device=device),
                              lambda v: torch.tensor(v, dtype=torch.long, device=device)):
                got = sample(logits, as_tensor(seed), as_tensor(step), temperature)
                assert torch.equal(got, want), f"seed {seed}, step {step}, temperature {temperature}: tensors gave {got.tolist()}, ints {want.tolist()}"
