"""The graph path itself: captured once, replayed, cheaper than eager, no allocation, owned outputs.

These build a graph engine explicitly (cuda_graphs=True) and check mechanics, not values, so they
mean the same under every mode; the mode-following probe checks the switch.
"""

import os
import statistics

import pytest
import torch

from infradev_probe import measure
from nanodecode import DecodeEngine

BATCH = 4


def _tokens(config, n, seed, device):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, config.vocab_size, (BATCH,), generator=generator).to(device) for _ in range(n)]


@pytest.mark.probe(promise="graph-captured-once-then-replayed", kind="condition")
def test_graph_captured_once_then_replayed(model, config, cuda, graph_calls):
    steps = 24
    engine = DecodeEngine(model, batch_size=BATCH, seed=0, device=cuda, cuda_graphs=True)
    for tokens in _tokens(config, steps, 1, cuda):
        engine.step(tokens)
    torch.cuda.synchronize()
    assert graph_calls["capture"] == 1, f"{graph_calls['capture']} graph captures in {steps} steps, expected 1"
    assert graph_calls["replay"] >= steps - 3, f"only {graph_calls['replay']} replays in {steps} steps"
    assert graph_calls["decode_step"] <= 3, f"the model's Python decode_step ran {graph_calls['decode_step']} times in {steps} steps"


@pytest.mark.probe(promise="mode-switch-selects-the-path", kind="condition")
def test_mode_switch_selects_the_path(model, config, cuda, graph_calls):
    steps = 10
    engine = DecodeEngine(model, batch_size=BATCH, seed=0, device=cuda)
    for tokens in _tokens(config, steps, 2, cuda):
        engine.step(tokens)
    torch.cuda.synchronize()
    if os.environ.get("NANODECODE_CUDA_GRAPHS", "0") == "1":
        assert engine.uses_cuda_graphs
        assert graph_calls["capture"] == 1 and graph_calls["replay"] >= steps - 3, dict(graph_calls)
    else:
        assert not engine.uses_cuda_graphs
        assert graph_calls["capture"] == 0 and graph_calls["decode_step"] == steps, dict(graph_calls)


@pytest.mark.probe(promise="step-outputs-owned-by-the-caller", kind="state")
def test_step_outputs_owned_by_the_caller(model, config, cuda):
    engine = DecodeEngine(model, batch_size=BATCH, seed=4, device=cuda, cuda_graphs=True)
    outs, snapshots, logits = [], [], []
    for tokens in _tokens(config, 8, 3, cuda):
        out = engine.step(tokens)
        outs.append(out)
        snapshots.append(out.clone())
        logits.append((engine.last_logits, engine.last_logits.clone()))
    for i, (out, snap) in enumerate(zip(outs, snapshots)):
        assert torch.equal(out, snap), f"the tokens returned by step {i} changed during later steps"
    for i, (held, snap) in enumerate(logits):
        assert torch.equal(held, snap), f"last_logits read after step {i} changed during later steps"
    assert len({o.data_ptr() for o in outs}) == len(outs), "steps returned the same storage"


def _per_step_seconds(engine, token_list):
    with measure() as m:
        for tokens in token_list:
            engine.step(tokens)
    return m.wall_time_s / len(token_list)


@pytest.mark.probe(promise="graph-step-cheaper-than-eager", kind="resource")
def test_graph_step_cheaper_than_eager(model, config, cuda):
    token_list = _tokens(config, 40, 6, cuda)
    graph = DecodeEngine(model, batch_size=BATCH, seed=0, device=cuda, cuda_graphs=True)
    eager = DecodeEngine(model, batch_size=BATCH, seed=0, device=cuda, cuda_graphs=False)
    for engine in (graph, eager):  # warm-up: capture, cuBLAS handles, allocator
        for tokens in token_list[:4]:
            engine.step(tokens)
    graph_s, eager_s = [], []
    for _ in range(3):  # interleaved rounds, median of each
        for engine, times in ((graph, graph_s), (eager, eager_s)):
            engine.reset()
            times.append(_per_step_seconds(engine, token_list))
    ratio = statistics.median(graph_s) / statistics.median(eager_s)
    print(f"graph {statistics.median(graph_s) * 1e6:.1f} us/step, eager {statistics.median(eager_s) * 1e6:.1f} us/step, ratio {ratio:.3f}")
    assert ratio <= 0.7, f"a graph step takes {ratio:.2f}x an eager step (expected <= 0.7x)"


@pytest.mark.probe(promise="replay-allocates-no-device-memory", kind="resource")
def test_replay_allocates_no_device_memory(model, config, cuda):
    token_list = _tokens(config, 30, 7, cuda)
    engine = DecodeEngine(model, batch_size=BATCH, seed=0, device=cuda, cuda_graphs=True)
    for tokens in token_list[:3]:
        engine.step(tokens)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(cuda)
    reserved_before = torch.cuda.memory_reserved(cuda)
    kept = []
    with measure() as m:
        for tokens in token_list[3:]:
            kept.append(engine.step(tokens))
    assert m.memory_kind == "cuda", f"measure() watched {m.memory_kind}, not the CUDA allocator"
    growth = m.peak_memory_bytes - before
    # The returned tokens themselves (27 x BATCH int64, in 512-byte blocks) are all that may be new.
    assert growth <= 64 * 1024, f"replaying 27 steps raised the allocator peak by {growth} bytes"
    assert torch.cuda.memory_reserved(cuda) == reserved_before, "replays reserved new device memory"
