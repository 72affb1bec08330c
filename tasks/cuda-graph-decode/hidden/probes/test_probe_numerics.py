"""Values and state of the engine in the mode under test (NANODECODE_CUDA_GRAPHS from the grader's
mode): every step against a recomputation without a cache, the sampling offset and the seed,
position, the full cache, reset, generate, several engines at once, the caller's outputs.

References are independent of the engine's own state: ``forward_sequence`` over the tokens fed so
far, ``sample`` with the offset the prompt defines, or a second engine fed the same tokens.
"""

import pytest
import torch

from nanodecode import DecodeEngine, sample

TOL = dict(rtol=1e-4, atol=1e-4)


def _recompute(model, history):
    with torch.no_grad():
        return model.forward_sequence(history)[:, -1]


@pytest.mark.probe(promise="each-step-matches-full-recompute", kind="numerical")
@pytest.mark.parametrize("batch,steps", [(3, 64), (1, 9)])
def test_each_step_matches_full_recompute(model, config, device, token_stream, batch, steps):
    engine = DecodeEngine(model, batch_size=batch, seed=11, device=device)
    history = torch.empty(batch, 0, dtype=torch.long, device=device)
    for i, tokens in enumerate(token_stream(steps, batch, 99, device)):
        engine.step(tokens)
        history = torch.cat([history, tokens[:, None]], dim=1)
        torch.testing.assert_close(engine.last_logits, _recompute(model, history), **TOL, msg=lambda m: f"step {i} (batch {batch}): {m}")


@pytest.mark.probe(promise="sampling-offset-advances-each-step", kind="state")
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampling_offset_advances_each_step(model, config, device, token_stream, temperature):
    engine = DecodeEngine(model, batch_size=4, seed=23, temperature=temperature, device=device)
    stream = token_stream(22, 4, 5, device)
    for round_, tokens_of_round in enumerate((stream[:16], stream[16:])):
        for i, tokens in enumerate(tokens_of_round):
            out = engine.step(tokens)
            expected = sample(engine.last_logits, 23, i, temperature)
            assert torch.equal(out, expected), (
                f"round {round_} step {i}: sampled {out.tolist()}, expected {expected.tolist()} (noise offset {i})")
        engine.reset()


@pytest.mark.probe(promise="seed-honoured", kind="state")
@pytest.mark.parametrize("seed", [0, 1, 2**31 - 1])
def test_seed_honoured(model, config, device, token_stream, seed):
    engine = DecodeEngine(model, batch_size=4, seed=seed, device=device)
    for i, tokens in enumerate(token_stream(6, 4, 17, device)):
        out = engine.step(tokens)
        expected = sample(engine.last_logits, seed, i, engine.temperature)
        assert torch.equal(out, expected), f"seed {seed}, step {i}: sampled {out.tolist()}, expected {expected.tolist()}"


@pytest.mark.probe(promise="position-counts-fed-tokens", kind="state")
def test_position_counts_fed_tokens(model, config, device, token_stream):
    engine = DecodeEngine(model, batch_size=2, seed=0, device=device)
    assert engine.position == 0
    for i, tokens in enumerate(token_stream(5, 2, 3, device)):
        engine.step(tokens)
        assert engine.position == i + 1, f"after {i + 1} steps position is {engine.position}"
    prompt = torch.stack(token_stream(3, 2, 4, device), dim=1)
    engine.generate(prompt, 4)
    assert engine.position == 5 + 3 + 4 - 1, f"after 5 steps and generate(3-token prompt, 4): position {engine.position}"
    for _ in range(2):
        engine.reset()
        assert engine.position == 0, "reset() did not bring position back to 0"
        engine.step(prompt[:, 0])
        engine.step(prompt[:, 1])
        assert engine.position == 2, f"2 steps after reset: position {engine.position}"


@pytest.mark.probe(promise="full-cache-raises", kind="condition")
def test_full_cache_raises_at_exactly_max_seq_len(model, config, device, token_stream):
    engine = DecodeEngine(model, batch_size=2, seed=1, device=device)
    stream = token_stream(config.max_seq_len, 2, 8, device)
    history = torch.stack(stream, dim=1)
    for tokens in stream:
        engine.step(tokens)
    assert engine.position == config.max_seq_len
    torch.testing.assert_close(engine.last_logits, _recompute(model, history), **TOL, msg=lambda m: f"the last slot: {m}")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="full"):
            engine.step(stream[0])
    assert engine.position == config.max_seq_len, "a refused step changed position"
    engine.reset()
    engine.step(stream[5])
    torch.testing.assert_close(engine.last_logits, _recompute(model, history[:, 5:6]), **TOL, msg=lambda m: f"after reset: {m}")


def _run(engine, stream):
    outs, logits = [], []
    for tokens in stream:
        outs.append(engine.step(tokens))
        logits.append(engine.last_logits)
    return outs, logits


def _assert_same_run(got, want, what):
    for i, (a, b) in enumerate(zip(got[0], want[0])):
        assert torch.equal(a, b), f"{what}, step {i}: tokens {a.tolist()}, expected {b.tolist()}"
    for i, (a, b) in enumerate(zip(got[1], want[1])):
        torch.testing.assert_close(a, b, **TOL, msg=lambda m: f"{what}, step {i}: {m}")


@pytest.mark.probe(promise="reset-rewinds-every-piece-of-state", kind="state")
def test_reset_rewinds_every_piece_of_state(model, config, device, token_stream):
    stream = token_stream(7, 4, 1, device)
    engine = DecodeEngine(model, batch_size=4, seed=3, device=device)
    first = _run(engine, stream)
    engine.reset()
    _assert_same_run(_run(engine, stream), first, "reset() then the same tokens")
    for seed, stop in ((0, 3), (None, 7), (8, 5), (8, 2), (0, 7)):
        # reset at several positions, to seed 0 (falsy) and back, and without a seed (keeps the last one)
        engine.reset(seed=seed)
        want_seed = 0 if seed is None else seed
        fresh = DecodeEngine(model, batch_size=4, seed=want_seed, device=device)
        _assert_same_run(_run(engine, stream[:stop]), _run(fresh, stream[:stop]), f"after reset(seed={seed}), against a fresh engine with seed {want_seed}")
        assert engine.position == stop


@pytest.mark.probe(promise="generate-is-a-step-loop", kind="state")
@pytest.mark.parametrize("batch,prompt_len,new", [(3, 5, 9), (1, 1, 4)])
def test_generate_is_a_step_loop(model, config, device, token_stream, batch, prompt_len, new):
    prompt = torch.stack(token_stream(prompt_len, batch, 21, device), dim=1)
    out = DecodeEngine(model, batch_size=batch, seed=6, device=device).generate(prompt, new)
    assert out.shape == (batch, new)
    looped = DecodeEngine(model, batch_size=batch, seed=6, device=device)
    for i in range(prompt_len):
        nxt = looped.step(prompt[:, i])
    expected = [nxt]
    for _ in range(new - 1):
        nxt = looped.step(nxt)
        expected.append(nxt)
    expected = torch.stack(expected, dim=1)
    assert torch.equal(out, expected), f"generate returned {out.tolist()}, the step loop {expected.tolist()}"


@pytest.mark.probe(promise="engines-side-by-side", kind="state")
def test_engines_of_one_model_side_by_side(model, config, device, token_stream):
    a_stream, b_stream = token_stream(14, 2, 31, device), token_stream(12, 2, 32, device)
    a = DecodeEngine(model, batch_size=2, seed=1, device=device)
    eager = DecodeEngine(model, batch_size=2, seed=1, device=device, cuda_graphs=False)
    got_a, got_eager, got_b = ([], []), ([], []), ([], [])
    history = []

    def step_a(i):
        for engine, got in ((a, got_a), (eager, got_eager)):
            got[0].append(engine.step(a_stream[i]))
            got[1].append(engine.last_logits)
        history.append(a_stream[i])
        torch.testing.assert_close(got_a[1][-1], _recompute(model, torch.stack(history, dim=1)), **TOL,
                                   msg=lambda m: f"engine a, step {i}: {m}")

    for i in range(3):  # engine a has decoded (and, in graph mode, captured) before engine b exists
        step_a(i)
    b = DecodeEngine(model, batch_size=2, seed=2, device=device)
    for i in range(12):
        got_b[0].append(b.step(b_stream[i]))
        got_b[1].append(b.last_logits)
        if i + 3 < len(a_stream):
            step_a(i + 3)
    _assert_same_run(got_a, got_eager, "engine a against an eager engine fed the same tokens")
    alone = DecodeEngine(model, batch_size=2, seed=2, device=device)
    _assert_same_run(got_b, _run(alone, b_stream), "engine b against the same engine run alone")
    b.reset()
    _assert_same_run(_run(b, b_stream[:4]), _run(DecodeEngine(model, batch_size=2, seed=2, device=device), b_stream[:4]), "engine b after its reset")
    assert a.position == len(a_stream), "building or resetting engine b moved engine a"


@pytest.mark.probe(promise="step-outputs-owned-by-the-caller", kind="state")
def test_outputs_owned_by_the_caller_in_the_mode(model, config, device, token_stream):
    stream = token_stream(8, 3, 41, device)
    engine = DecodeEngine(model, batch_size=3, seed=4, device=device)
    twin = DecodeEngine(model, batch_size=3, seed=4, device=device)
    kept = []
    for i, tokens in enumerate(stream):
        out, logits = engine.step(tokens), engine.last_logits
        kept.append((out, out.clone(), logits, logits.clone()))
        want_out, want_logits = twin.step(tokens), twin.last_logits
        assert torch.equal(out, want_out), f"step {i}: the engine whose outputs the caller scribbled on decoded differently"
        torch.testing.assert_close(logits, want_logits, **TOL)
        out.fill_(7)  # the caller's tensors: writing them must not reach the engine
        logits.fill_(float("nan"))
        kept[-1] = (out, out.clone(), logits, logits.clone())
    for i, (out, snap, logits, lsnap) in enumerate(kept):
        assert torch.equal(out, snap), f"the tokens returned by step {i} changed during later steps"
        assert torch.equal(logits.isnan(), lsnap.isnan()), f"last_logits read after step {i} changed during later steps"
    prompt = torch.stack(stream[:2], dim=1)
    engine.reset()
    first = engine.generate(prompt, 5)
    snapshot = first.clone()
    engine.reset(seed=9)
    engine.generate(prompt, 5)
    assert torch.equal(first, snapshot), "the tensor generate returned changed when the engine decoded again"
