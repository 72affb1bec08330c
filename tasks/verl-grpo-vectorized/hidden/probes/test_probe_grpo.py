"""The vectorized GRPO estimator against the loop one ("grpo"), on the inputs the trainer really
sends (uuid-string labels, n responses per prompt, binary or continuous rewards), on the corners the
PR's test leaves out (singleton prompts, all-equal groups, gapped integer labels, Dr.GRPO's
norm_adv_by_std_in_grpo=False, another epsilon), its registration, and its speed."""

import time
import uuid

import numpy as np
import pytest
import torch


def _core():
    from verl.trainer.ppo import core_algos

    return core_algos


def _batch(sizes, seq_len, seed, labels="uuid", rewards="normal", shuffle=True):
    """Groups of the given sizes; one label per group; per-token rewards whose sum is the score."""
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed)
    bs = sum(sizes)
    if labels == "uuid":
        names = [str(uuid.UUID(int=int(rng.integers(1 << 62)) * 7919 + i)) for i in range(len(sizes))]
        index = np.array([names[k] for k, s in enumerate(sizes) for _ in range(s)], dtype=object)
    elif labels == "gapped-int":
        ids = rng.choice(10_000, size=len(sizes), replace=False) * 3 + 11
        index = np.array([ids[k] for k, s in enumerate(sizes) for _ in range(s)], dtype=np.int64)
    else:
        raise ValueError(labels)
    mask = (torch.rand(bs, seq_len, generator=g) < 0.7).float()
    mask[:, 0] = 1.0
    if rewards == "binary":
        score = torch.randint(0, 2, (bs,), generator=g).float()
    elif rewards == "normal":
        score = torch.randn(bs, generator=g) * 2.0 + 0.5
    else:
        raise ValueError(rewards)
    tok = torch.zeros(bs, seq_len)
    last = (mask.cumsum(-1) == mask.sum(-1, keepdim=True)) & (mask > 0)
    tok[last] = score  # outcome reward on the last valid token, as the reward manager writes it
    if shuffle:
        perm = torch.randperm(bs, generator=g)
        tok, mask, index = tok[perm], mask[perm], index[perm.numpy()]
    return tok, mask, index


def _equal_groups_batch(seed):
    """Four prompts whose responses all got the same reward, mixed with normal groups."""
    tok, mask, index = _batch([4, 4, 4, 4, 6, 6], 16, seed, labels="uuid", rewards="normal", shuffle=False)
    scores = torch.tensor([1.0] * 4 + [0.0] * 4 + [-2.5] * 4 + [3.0] * 4)
    for i, s in enumerate(scores.tolist()):
        row = tok[i]
        nz = torch.nonzero(mask[i]).flatten()
        row.zero_()
        row[nz[-1]] = s
    return tok, mask, index


CASES = {
    "uuid-n4-binary": dict(sizes=[4] * 96, seq_len=24, labels="uuid", rewards="binary"),
    "uuid-n8-normal": dict(sizes=[8] * 40, seq_len=32, labels="uuid", rewards="normal"),
    "uuid-uneven-with-singletons": dict(sizes=[1, 5, 1, 3, 2, 1, 7, 1, 4, 1, 2, 6], seq_len=20, labels="uuid", rewards="normal"),
    "gapped-int-with-singletons": dict(sizes=[3, 1, 4, 1, 5, 9, 2, 6, 1, 3], seq_len=12, labels="gapped-int", rewards="normal"),
    "all-singletons": dict(sizes=[1] * 17, seq_len=8, labels="uuid", rewards="normal"),
}


def _compare(tok, mask, index, **kw):
    core = _core()
    a1, r1 = core.compute_grpo_outcome_advantage(token_level_rewards=tok.clone(), response_mask=mask.clone(), index=index, **kw)
    a2, r2 = core.compute_grpo_vectorized_outcome_advantage(token_level_rewards=tok.clone(), response_mask=mask.clone(), index=index, **kw)
    assert a2.shape == r2.shape == tok.shape
    assert torch.allclose(a2, a1, rtol=1e-5, atol=1e-6), f"max |diff| {(a2 - a1).abs().max().item():.3e}"
    assert torch.allclose(r2, r1, rtol=1e-5, atol=1e-6)
    assert torch.equal(a2, r2)
    assert torch.all(a2[mask == 0] == 0)


@pytest.mark.probe(promise="matches-grpo", kind="numerical")
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("norm", [True, False], ids=["std", "no-std"])
def test_matches_loop_estimator(case, norm):
    c = CASES[case]
    for seed in (0, 1):
        tok, mask, index = _batch(c["sizes"], c["seq_len"], seed, labels=c["labels"], rewards=c["rewards"])
        _compare(tok, mask, index, norm_adv_by_std_in_grpo=norm)


@pytest.mark.probe(promise="matches-grpo", kind="numerical")
@pytest.mark.parametrize("epsilon", [1e-3, 1e-2])
def test_matches_loop_estimator_other_epsilon(epsilon):
    tok, mask, index = _batch([2, 3, 1, 4, 8, 1, 5], 10, 7, labels="uuid", rewards="normal")
    _compare(tok, mask, index, epsilon=epsilon)


@pytest.mark.probe(promise="matches-grpo", kind="numerical")
@pytest.mark.parametrize("norm", [True, False], ids=["std", "no-std"])
def test_all_equal_groups_give_zero(norm):
    tok, mask, index = _equal_groups_batch(3)
    _compare(tok, mask, index, norm_adv_by_std_in_grpo=norm)
    core = _core()
    adv, _ = core.compute_grpo_vectorized_outcome_advantage(token_level_rewards=tok, response_mask=mask, index=index, norm_adv_by_std_in_grpo=norm)
    assert torch.all(adv[:16] == 0)


@pytest.mark.probe(promise="matches-grpo", kind="numerical")
def test_singleton_advantage_is_score_over_one_plus_eps():
    core = _core()
    tok = torch.tensor([[0.0, 2.0], [0.0, -3.0], [1.0, 0.0]])
    mask = torch.ones(2, 2).repeat(2, 1)[:3]
    index = np.array(["p", "q", "r"], dtype=object)
    adv, _ = core.compute_grpo_vectorized_outcome_advantage(token_level_rewards=tok, response_mask=mask, index=index, epsilon=0.25)
    want = torch.tensor([2.0, -3.0, 1.0]) / 1.25
    assert torch.allclose(adv, want.unsqueeze(-1).expand(3, 2), rtol=1e-6, atol=1e-7)


@pytest.mark.probe(promise="matches-grpo", kind="numerical")
@pytest.mark.parametrize("norm", [True, False], ids=["std", "no-std"])
def test_a_batch_of_one_response(norm):
    """bs = 1: one prompt with one response, a singleton group (mean 0, std 1, as in "grpo")."""
    tok, mask, index = _batch([1], 6, 4, labels="uuid", rewards="normal")
    _compare(tok, mask, index, norm_adv_by_std_in_grpo=norm)


@pytest.mark.probe(promise="registered-name", kind="state")
def test_registered_under_its_name():
    core = _core()
    assert core.AdvantageEstimator.GRPO_VECTORIZED.value == "grpo_vectorized"
    assert core.AdvantageEstimator("grpo_vectorized") is core.AdvantageEstimator.GRPO_VECTORIZED
    fn = core.compute_grpo_vectorized_outcome_advantage
    assert core.get_adv_estimator_fn("grpo_vectorized") is fn
    assert core.get_adv_estimator_fn(core.AdvantageEstimator.GRPO_VECTORIZED) is fn
    assert core.get_adv_estimator_fn("grpo") is core.compute_grpo_outcome_advantage
    assert core.get_adv_estimator_fn(core.AdvantageEstimator.GRPO) is core.compute_grpo_outcome_advantage


def _best_time(fn, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@pytest.mark.probe(promise="vectorized-speed", kind="resource")
@pytest.mark.parametrize("labels", ["uuid", "gapped-int"])
def test_vectorized_is_faster(labels):
    core = _core()
    tok, mask, index = _batch([4] * 2048, 32, 5, labels=labels, rewards="binary")
    loop = lambda: core.compute_grpo_outcome_advantage(token_level_rewards=tok, response_mask=mask, index=index)  # noqa: E731
    vec = lambda: core.compute_grpo_vectorized_outcome_advantage(token_level_rewards=tok, response_mask=mask, index=index)  # noqa: E731
    vec()  # warm-up (lazy imports, allocator)
    t_vec = _best_time(vec, 5)
    t_loop = _best_time(loop, 3)
    assert t_loop >= 5.0 * t_vec, f"loop {t_loop * 1e3:.2f} ms, vectorized {t_vec * 1e3:.2f} ms: {t_loop / t_vec:.1f}x"
