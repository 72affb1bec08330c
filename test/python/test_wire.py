"""The launcher's wire record (infradev_launcher/wire.py) on 2 real gloo ranks in a private network
namespace (bwrap --unshare-net, as the local sandbox runs them): an adversary who has read the
counters digs the uncounted backend method out of the counting wrapper's closure and smuggles an
all-reduce past the counters; the kernel's count of the bytes lo carried still holds it.

These tests assert that the record is taken, that it sees what the counters miss (on payloads large
enough that the set-up traffic and the retransmissions lo sees under load are small beside them),
and the launcher's verdict: the smuggled session is beyond the bound its counted calls allow, the
honest one within (the grader's gold-referenced rule is src/grader/grade/wire-judge.ts's)."""

import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import LAUNCHER, PG_FIXTURE, LaunchRun

N, FLOATS = 8, 1 << 18  # 8 all-reduces of 1 MiB per rank

BODY = PG_FIXTURE + '''
from infradev_probe import measure

N, FLOATS = %d, %d


def _uncounted(pg, name):
    f = getattr(type(pg), name)
    for cell in getattr(f, "__closure__", None) or ():
        v = cell.cell_contents
        if callable(v) and getattr(v, "__name__", "") == name:
            return v
    raise AssertionError("no original in the closure")


def test_all_reduces():
    t = torch.ones(FLOATS)
    pg = dist.distributed_c10d._get_default_group()
    smuggle = os.environ.get("SMUGGLE") == "1"
    with measure() as m:
        for _ in range(N):
            dist.all_reduce(t)
            if smuggle:
                _uncounted(pg, "allreduce")(pg, [t]).wait()
    assert dict(m.calls) == {"all_reduce": N}
''' % (N, FLOATS)

BWRAP = shutil.which("bwrap")


def launch(tmp_path, smuggle):
    work = tmp_path / ("smuggle" if smuggle else "honest")
    work.mkdir()
    (work / "test_wire_probe.py").write_text(BODY)
    out_dir = str(work / "out")
    os.makedirs(out_dir)
    cmd = [BWRAP, "--dev-bind", "/", "/", "--unshare-net", "--proc", "/proc", "--die-with-parent",
           sys.executable, LAUNCHER, "--nproc", "2", "--out-dir", out_dir, "--per-test-timeout", "120",
           "--", "-q", "test_wire_probe.py"]
    env = dict(os.environ, SMUGGLE="1" if smuggle else "0", OMP_NUM_THREADS="1")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=str(work), capture_output=True, text=True, timeout=300, env=env)
    run = LaunchRun(out_dir, proc, time.monotonic() - t0)
    assert run.returncode == 0, run.stderr[-3000:]
    for rank in range(2):
        assert all(o == "passed" for o, _ in run.junit(rank).values()), run.junit(rank)
    [wire] = [i["wire"] for i in run.integrity if "wire" in i]
    return wire


@pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap for a private network namespace")
def test_bytes_smuggled_past_the_counters_show_in_the_wire_record(tmp_path):
    honest = launch(tmp_path, smuggle=False)
    smuggled = launch(tmp_path, smuggle=True)
    payload = 2 * N * FLOATS * 4  # what the two ranks counted; a ring all-reduce at w=2 sends each rank's tensor once
    for rec in (honest, smuggled):
        assert "skip" not in rec, rec
        # The counters were fooled: the same calls and bytes in both sessions (plus the fixture's closing barrier).
        assert rec["counted_bytes"] == payload and rec["calls"] == 2 * (N + 1), rec
    # The kernel was not: it carried the honest payload once, the smuggled one twice. The lower bound
    # (retransmissions on lo taken off at their largest) against the upper: no load makes them cross.
    assert payload <= honest["payload_bytes"] <= 1.25 * payload, honest
    assert smuggled["payload_bytes_min"] >= 1.9 * payload, smuggled
    assert smuggled["payload_bytes_min"] > honest["payload_bytes"] + 0.8 * payload, (honest, smuggled)
    # The launcher's verdict (wire.py's payload bound): the honest session within it, the smuggled
    # one beyond 1.25 x what its counted calls can carry. The residual (payload less what the counted
    # calls are expected to carry) is about the smuggled payload, and near nothing honest.
    assert honest["verdict"] is False and honest["bound_ratio"] < 1.25, honest
    assert smuggled["verdict"] is True, smuggled
    assert honest["residual_bytes_judged"] < 0.1 * payload, honest
    assert smuggled["residual_bytes_judged"] > 0.8 * payload, smuggled
    assert honest["counted_by_op"] == smuggled["counted_by_op"] == {"all_reduce": payload, "barrier": 0}, (honest, smuggled)
