"""verl.utils.groupwise on its own: the statistics against a float64 reference (gaps in the ids,
singletons, other dtypes, the variance floor, the length check) and the label mapping (every kind of
label the prompt names, equality of ids exactly when labels are equal)."""

import uuid

import numpy as np
import pytest
import torch


def _gw():
    from verl.utils import as_torch_index, group_mean_std

    return as_torch_index, group_mean_std


def _reference(scores, gidx, eps):
    x = scores.double().tolist()
    ids = gidx.tolist()
    G = max(ids) + 1
    mean, std, cnt = [0.0] * G, [1.0] * G, [0.0] * G
    for g in range(G):
        v = [x[i] for i in range(len(x)) if ids[i] == g]
        cnt[g] = float(len(v))
        if len(v) >= 2:
            m = sum(v) / len(v)
            var = sum((a - m) ** 2 for a in v) / (len(v) - 1)
            mean[g], std[g] = m, max(var, eps) ** 0.5
    f64 = torch.float64
    return torch.tensor(mean, dtype=f64), torch.tensor(std, dtype=f64), torch.tensor(cnt, dtype=f64)


def _check(scores, gidx, eps=1e-6, rtol=1e-5, atol=1e-5):
    _, group_mean_std = _gw()
    m, s, c = group_mean_std(scores, gidx, eps=eps, device="cpu")
    rm, rs, rc = _reference(scores, gidx, eps)
    for t in (m, s, c):
        assert t.dtype == torch.float32 and t.shape == rm.shape and t.device.type == "cpu"
    assert torch.equal(c, rc.float())
    assert torch.allclose(m.double(), rm, rtol=rtol, atol=atol), (m, rm)
    assert torch.allclose(s.double(), rs, rtol=rtol, atol=atol), (s, rs)


@pytest.mark.probe(promise="group-stats", kind="numerical")
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stats_random_groups_with_gaps(seed):
    g = torch.Generator().manual_seed(seed)
    gidx = torch.randint(0, 40, (600,), generator=g) * 2  # every odd id unused, some even ones singletons or empty
    gidx[:5] = torch.tensor([81, 83, 85, 85, 87])  # singletons 81, 83, 87 and a pair at 85
    scores = torch.randn(600, generator=g) * 3.0 + 1.0
    _check(scores, gidx)


@pytest.mark.probe(promise="group-stats", kind="numerical")
def test_unused_ids_and_singletons_are_mean0_std1():
    _, group_mean_std = _gw()
    scores = torch.tensor([5.0, 7.0, 4.0, -2.0])
    gidx = torch.tensor([3, 3, 6, 0])
    m, s, c = group_mean_std(scores, gidx, device="cpu")
    assert m.shape == (7,)
    assert c.tolist() == [1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 1.0]
    for k in (0, 1, 2, 4, 5, 6):
        assert m[k].item() == 0.0 and s[k].item() == 1.0, (k, m, s)
    assert m[3].item() == pytest.approx(6.0) and s[3].item() == pytest.approx(2.0**0.5, rel=1e-6)


@pytest.mark.probe(promise="group-stats", kind="numerical")
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.int64, torch.float16])
def test_stats_other_score_dtypes(dtype):
    g = torch.Generator().manual_seed(11)
    gidx = torch.randint(0, 9, (200,), generator=g)
    scores = (torch.randn(200, generator=g) * 4).to(dtype)
    _check(scores.float(), gidx)  # the reference on the values as given
    _, group_mean_std = _gw()
    a = group_mean_std(scores, gidx, device="cpu")
    b = group_mean_std(scores.float(), gidx, device="cpu")
    for x, y in zip(a, b):
        assert x.dtype == torch.float32
        assert torch.allclose(x, y, rtol=1e-6, atol=1e-6)


@pytest.mark.probe(promise="group-stats", kind="numerical")
@pytest.mark.parametrize("eps", [1e-6, 1e-2, 0.5])
def test_variance_floor(eps):
    scores = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.1, 2.0, 4.0, 2.0, 2.5])
    gidx = torch.tensor([0, 0, 0, 1, 1, 2, 2, 3, 3])
    _check(scores, gidx, eps=eps)


@pytest.mark.probe(promise="group-stats", kind="numerical")
def test_a_single_group():
    """Every position in group 0: G = 1, one mean / std / count (not the empty result of G = 0)."""
    scores = torch.tensor([1.0, 4.0, 2.0, 7.0])
    _check(scores, torch.zeros(4, dtype=torch.long))


@pytest.mark.probe(promise="group-stats", kind="numerical")
def test_a_single_position():
    """One score with id 3: G = max(gidx) + 1 = 4, three unused ids and a singleton (mean 0, std 1,
    counts 0, 0, 0, 1); only an empty gidx gives empty results."""
    _, group_mean_std = _gw()
    m, s, c = group_mean_std(torch.tensor([2.5]), torch.tensor([3]), device="cpu")
    for t in (m, s, c):
        assert t.dtype == torch.float32 and tuple(t.shape) == (4,), (m, s, c)
    assert c.tolist() == [0.0, 0.0, 0.0, 1.0] and m.tolist() == [0.0] * 4 and s.tolist() == [1.0] * 4
    _check(torch.tensor([-1.0]), torch.tensor([0]))


@pytest.mark.probe(promise="group-stats", kind="numerical")
def test_default_eps_is_1e_minus_6():
    """Called without eps, the floor is the contract's default 1e-6: a group of variance 0.125 keeps
    its std (a larger default floor would raise it)."""
    _, group_mean_std = _gw()
    scores = torch.tensor([1.0, 1.5, 3.0, 3.0, 3.0])
    gidx = torch.tensor([0, 0, 1, 1, 1])
    m, s, c = group_mean_std(scores, gidx, device="cpu")
    rm, rs, rc = _reference(scores, gidx, 1e-6)
    assert torch.allclose(s.double(), rs, rtol=1e-5, atol=1e-6), (s, rs)
    assert s[0].item() == pytest.approx(0.125**0.5, rel=1e-5) and s[1].item() == pytest.approx(1e-3, rel=1e-3)


@pytest.mark.probe(promise="group-stats", kind="condition")
def test_length_mismatch_raises():
    _, group_mean_std = _gw()
    with pytest.raises(ValueError):
        group_mean_std(torch.zeros(5), torch.zeros(4, dtype=torch.long), device="cpu")


@pytest.mark.probe(promise="group-stats", kind="numerical")
def test_two_dim_inputs_are_flattened():
    _, group_mean_std = _gw()
    scores = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    gidx = torch.tensor([[0, 1, 0, 1], [2, 2, 0, 1], [2, 0, 1, 2]])
    m, s, c = group_mean_std(scores, gidx, device="cpu")
    rm, rs, rc = _reference(scores.flatten(), gidx.flatten(), 1e-6)
    assert torch.allclose(m.double(), rm) and torch.allclose(s.double(), rs) and torch.equal(c, rc.float())


@pytest.mark.probe(promise="group-stats", kind="numerical")
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int16, torch.uint8])
def test_ids_of_any_integer_dtype(idx_dtype):
    """gidx is an integer tensor: the ids mean the same whatever its integer dtype."""
    _, group_mean_std = _gw()
    g = torch.Generator().manual_seed(23)
    gidx = torch.randint(0, 7, (120,), generator=g)
    scores = torch.randn(120, generator=g)
    want = group_mean_std(scores, gidx, device="cpu")
    got = group_mean_std(scores, gidx.to(idx_dtype), device="cpu")
    for x, y in zip(got, want):
        assert x.dtype == torch.float32 and torch.allclose(x, y, rtol=1e-6, atol=1e-6)


def _same_partition(ids, labels):
    ids = ids.tolist()
    n = len(labels)
    for i in range(n):
        for j in range(n):
            assert (ids[i] == ids[j]) == (labels[i] == labels[j]), (i, j, labels[i], labels[j], ids)


def _check_index(index, want_labels, want_values=None, contiguous=False):
    as_torch_index, _ = _gw()
    ids = as_torch_index(index, device="cpu")
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.long and ids.dim() == 1 and ids.device.type == "cpu"
    assert ids.numel() == len(want_labels)
    _same_partition(ids, want_labels)
    if want_values is not None:
        assert ids.tolist() == list(want_values)
    if contiguous:
        assert sorted(set(ids.tolist())) == list(range(len(set(want_labels))))
    return ids


@pytest.mark.probe(promise="index-labels", kind="state")
def test_uuid_strings_are_factorised():
    us = [str(uuid.UUID(int=(k * 2654435761) % (1 << 127))) for k in range(1, 30)]
    labels = [us[(i * 7) % len(us)] for i in range(200)]
    _check_index(np.array(labels, dtype=object), labels, contiguous=True)
    _check_index(labels, labels, contiguous=True)


@pytest.mark.probe(promise="index-labels", kind="state")
def test_integer_labels_keep_their_value():
    vals = [17, 3, 17, 250, 3, 0, 99]
    _check_index(vals, vals, want_values=vals)
    _check_index(np.array(vals, dtype=np.int32), vals, want_values=vals)
    _check_index(torch.tensor(vals, dtype=torch.int16), vals, want_values=vals)
    _check_index(torch.tensor(vals, dtype=torch.int32), vals, want_values=vals)
    _check_index(torch.tensor(vals, dtype=torch.uint8), vals, want_values=vals)
    _check_index(torch.tensor(vals, dtype=torch.int64), vals, want_values=vals)
    _check_index(np.array(vals, dtype=object), vals, want_values=vals)
    _check_index([str(v) for v in vals], vals, want_values=vals)
    _check_index(torch.tensor([True, False, True]), [1, 0, 1], want_values=[1, 0, 1])
    _check_index([True, False, False], [1, 0, 0], want_values=[1, 0, 0])


@pytest.mark.probe(promise="index-labels", kind="state")
@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8])
def test_every_integer_tensor_dtype_keeps_its_value(dtype):
    """"integer and bool tensors" keep their value, whatever the integer dtype (int8 included)."""
    vals = [17, 3, 17, 120, 3, 0, 99]
    _check_index(torch.tensor(vals, dtype=dtype), vals, want_values=vals)
    _check_index(torch.tensor(vals, dtype=dtype).reshape(7, 1), vals, want_values=vals)


@pytest.mark.probe(promise="index-labels", kind="state")
def test_numpy_object_array_mixing_strings_and_numbers_compares_as_strings():
    """The trainer's index is a numpy array: one of dtype object that mixes strings and numbers is
    "a list mixing strings and numbers": 5 and "5" share an id, "x" and 12 do not."""
    labels = ["x", 5, "5", "y", "x", 12, "12", "y", 5]
    as_str = [str(v) for v in labels]
    _check_index(np.array(labels, dtype=object), as_str, contiguous=True)
    _check_index(np.array(labels, dtype=object).reshape(3, 3), as_str, contiguous=True)


@pytest.mark.probe(promise="index-labels", kind="state")
def test_near_integer_floats_round():
    vals = [4.0000002, 4.0, 7.9999999, 8.0, 2.0]
    _check_index(np.array(vals), [4, 4, 8, 8, 2], want_values=[4, 4, 8, 8, 2])
    _check_index(torch.tensor(vals, dtype=torch.float64), [4, 4, 8, 8, 2], want_values=[4, 4, 8, 8, 2])


@pytest.mark.probe(promise="index-labels", kind="state")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_float_tensors_of_every_precision_round(dtype):
    """Float label tensors of any float dtype (half precision included) hold near-integer labels that
    keep their value."""
    vals = [4.0, 2.0, 4.0, 0.0, 7.0, -3.0]
    _check_index(torch.tensor(vals, dtype=dtype), vals, want_values=[int(v) for v in vals])


@pytest.mark.probe(promise="index-labels", kind="state")
def test_mixed_labels_compare_as_strings_and_shapes_flatten():
    labels = ["x", 5, "5", "y", "x", 5.5]
    as_str = [str(v) for v in labels]
    _check_index(labels, as_str, contiguous=True)
    grid = np.array([[3, 1], [1, 3], [2, 2]])
    _check_index(grid, grid.reshape(-1).tolist(), want_values=grid.reshape(-1).tolist())
    _check_index(torch.tensor(grid), grid.reshape(-1).tolist(), want_values=grid.reshape(-1).tolist())


@pytest.mark.probe(promise="index-labels", kind="state")
def test_a_zero_dim_label_array_gives_a_1d_tensor_of_one_id():
    """"1-D ... one id per label (inputs of any shape are flattened)": a 0-d numpy array (shape ())
    holds one label and gives ids of shape (1,), as a 0-d tensor does."""
    _check_index(np.array(7), [7], want_values=[7])
    _check_index(np.array(7, dtype=np.int32), [7], want_values=[7])
    _check_index(np.array(3.0), [3], want_values=[3])
    _check_index(np.array("prompt-0"), ["prompt-0"], contiguous=True)
    _check_index(torch.tensor(5), [5], want_values=[5])


@pytest.mark.probe(promise="index-labels", kind="state")
def test_labels_of_other_tensor_dtypes_are_factorised():
    """A tensor of labels that are neither integers nor near-integer floats (complex) is "other
    labels": factorised, equal ids exactly for equal labels."""
    labels = [1 + 1j, 2 + 0j, 1 + 1j, 0.5j, 2 + 0j]
    _check_index(torch.tensor(labels, dtype=torch.complex64), labels)


@pytest.mark.probe(promise="index-labels", kind="state")
def test_complex_labels_differing_in_the_fifth_decimal_get_different_ids():
    """"Same id exactly when their labels are equal": complex labels 1.99999+1j and 2.00001+1j are not
    equal (they differ past the four decimals torch prints), so they get two ids; nor are labels that
    differ only in the imaginary part (1+1j, 1+2j) or only past the integer part (1.2, 1.4)."""
    labels = [1.99999 + 1j, 2.00001 + 1j, 1.99999 + 1j, 2.00001 + 1j, 2.00001 + 1j]
    as_c64 = torch.tensor(labels, dtype=torch.complex64)
    _check_index(as_c64, as_c64.tolist())
    labels = [1 + 1j, 1 + 2j, 1 + 1j, 1.2 + 0j, 1.4 + 0j, 1 + 2j, 1.4 + 0j]
    as_c64 = torch.tensor(labels, dtype=torch.complex64)
    _check_index(as_c64, as_c64.tolist())


@pytest.mark.probe(promise="device-policy", kind="state")
def test_empty_ids_give_empty_results_on_the_requested_device():
    """Empty gidx: three empty float32 tensors, on the device asked for ('meta': a second device on
    any machine; no kernel has to run for an empty result)."""
    _, group_mean_std = _gw()
    for dev in ("meta", "cpu"):
        out = group_mean_std(torch.empty(0), torch.empty(0, dtype=torch.long), device=dev)
        assert len(out) == 3
        for t in out:
            assert t.device.type == dev and t.dtype == torch.float32 and tuple(t.shape) == (0,), (dev, t)


@pytest.mark.probe(promise="device-policy", kind="state")
def test_device_policy(monkeypatch):
    """'meta' stands for a second device on any machine: ids can be moved there, no kernel runs."""
    as_torch_index, group_mean_std = _gw()
    monkeypatch.setenv("VERL_FORCE_DEVICE", "meta")
    for labels in ([3, 1, 3], ["u-1", "u-2", "u-1"], torch.tensor([2, 2, 5]), np.array([1.0, 2.0]), torch.tensor([1.0, 2.0])):
        assert as_torch_index(labels).device.type == "meta", labels
        assert as_torch_index(labels, device="cpu").device.type == "cpu", labels
    m, s, c = group_mean_std(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0, 0, 1]), device="cpu")
    assert m.device.type == s.device.type == c.device.type == "cpu"
    assert torch.allclose(m, torch.tensor([1.5, 0.0]))
    monkeypatch.delenv("VERL_FORCE_DEVICE")
    assert as_torch_index(["a", "b"]).device.type == "cpu"  # pytest sets PYTEST_CURRENT_TEST
    assert all(t.device.type == "cpu" for t in group_mean_std(torch.tensor([1.0, 3.0]), torch.tensor([0, 0])))


@pytest.mark.probe(promise="device-policy", kind="state")
def test_integer_strings_and_object_arrays_land_on_the_device(monkeypatch):
    """Integer strings and object arrays of integers keep their value (as in test_integer_labels_keep_their_value)
    and, like every other label, land on the explicit device, else on VERL_FORCE_DEVICE's ('meta')."""
    as_torch_index, _ = _gw()
    labels = (["7", "3", "7"], ("12", "4"), np.array(["7", "3"]), np.array([5, 2, 5], dtype=object))
    for lab in labels:
        assert as_torch_index(lab, device="meta").device.type == "meta", lab
    monkeypatch.setenv("VERL_FORCE_DEVICE", "meta")
    for lab in labels:
        ids = as_torch_index(lab)
        assert ids.device.type == "meta" and ids.dtype == torch.long and ids.dim() == 1, (lab, ids)
        assert as_torch_index(lab, device="cpu").device.type == "cpu", lab


@pytest.mark.probe(promise="exports", kind="state")
def test_both_helpers_are_exported_and_listed_in_all():
    """The interface contract: verl/utils/groupwise.py has __all__ = ["as_torch_index", "group_mean_std"];
    verl.utils re-exports both names and lists them in its __all__."""
    import verl.utils
    import verl.utils.groupwise as gw

    for name in ("as_torch_index", "group_mean_std"):
        assert name in gw.__all__, (name, getattr(gw, "__all__", None))
        assert name in verl.utils.__all__, name
        assert getattr(verl.utils, name) is getattr(gw, name)
    star = {}
    exec("from verl.utils.groupwise import *", star)
    assert star["as_torch_index"] is gw.as_torch_index and star["group_mean_std"] is gw.group_mean_std
