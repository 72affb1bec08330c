"""The probe library in one process: peak memory, patching, and the plugin without the launcher."""

import os
import subprocess
import sys
import time

import pytest

from conftest import SANDBOX_PY

sys.path.insert(0, SANDBOX_PY)

import infradev_probe  # noqa: E402  (patches torch.distributed before torch is imported below)
from infradev_probe import _memory, measure  # noqa: E402

torch = pytest.importorskip("torch")
MiB = 1024 * 1024
# Linux batches its RSS counters per CPU (up to ~32 pages per CPU per counter unflushed), so host
# figures can be off by that much; on the 16-core H200 host 512 KiB was not enough.
RSS_SLACK = max(MiB // 2, (os.cpu_count() or 1) * 64 * 4096)


@pytest.fixture(params=["vmhwm", "statm_sampling"])
def rss_method(request, monkeypatch):
    if request.param == "vmhwm" and _memory.host_method() != "vmhwm":
        pytest.skip("this kernel does not let us reset VmHWM")
    monkeypatch.setenv("INFRADEV_PROBE_RSS_METHOD", request.param)
    return request.param


def test_peak_memory_of_a_64mib_tensor_then_a_smaller_block(rss_method):
    with measure(memory="host") as big:
        x = torch.ones(64 * MiB // 4)  # ones: pages are touched, so they count in RSS
        time.sleep(0.03)  # lets the 5 ms sampler see it too
        del x
    with measure(memory="host") as small:
        y = torch.ones(MiB // 4)
        time.sleep(0.03)
        del y
    assert big.memory_kind == small.memory_kind == "host_rss"
    assert big.memory_method == rss_method
    assert big.peak_memory_bytes >= 64 * MiB
    assert big.peak_memory_delta_bytes >= 64 * MiB - RSS_SLACK
    assert small.peak_memory_delta_bytes < 16 * MiB
    assert small.peak_memory_bytes < big.peak_memory_bytes
    assert big.reserved_memory_bytes is None


def test_nested_peak_survives_the_inner_reset(rss_method):
    with measure(memory="host") as outer:
        x = torch.ones(64 * MiB // 4)
        time.sleep(0.03)
        rss_with_x = _memory.current_rss()
        del x
        with measure(memory="host") as inner:
            pass
    # Compared with the RSS seen while x lived (other memory may be freed meanwhile in a busy process).
    assert outer.peak_memory_bytes >= rss_with_x - RSS_SLACK
    assert inner.peak_memory_bytes < rss_with_x - 32 * MiB
    assert inner.peak_memory_delta_bytes < 16 * MiB


def test_patch_is_idempotent_and_shared_by_both_modules():
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    assert infradev_probe.is_patched()
    before = {op: getattr(dist, op) for op in ("all_reduce", "all_gather", "send", "barrier")}
    infradev_probe.install()
    for op, fn in before.items():
        assert getattr(dist, op) is fn and getattr(c10d, op) is fn
        assert fn._infradev_op == op


def test_memory_choice_is_checked():
    with pytest.raises(ValueError, match="memory"):
        measure(memory="gpu")


def test_no_counting_outside_a_measure():
    # A call with no measure open goes straight through; nothing is recorded anywhere.
    m = infradev_probe.Measurement()
    assert m.calls["all_reduce"] == 0 and m.bytes["anything"] == 0


def test_plugin_without_out_dir_only_registers_the_marker(tmp_path):
    (tmp_path / "test_m.py").write_text(
        "import pytest\n\n@pytest.mark.probe(promise='averaged-gradients', kind='numerical')\ndef test_m():\n    pass\n"
    )
    env = dict(os.environ, PYTHONPATH=SANDBOX_PY)
    env.pop("INFRADEV_OUT_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "infradev_probe.plugin", "-p", "no:cacheprovider", "-q", "-W", "error", "--strict-markers", "test_m.py"],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("rank")] == []
