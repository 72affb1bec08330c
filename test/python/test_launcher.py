"""The rank launcher with real gloo ranks: all-pass sessions, a hang, a crash, launch errors."""

import json
import os
import sys

import pytest

from conftest import HANGING, PG_FIXTURE, processes_mentioning

PASSING = PG_FIXTURE + '''

def test_sum():
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t.tolist() == [float(dist.get_world_size())] * 4


def test_env():
    assert os.environ["LOCAL_RANK"] == os.environ["RANK"]
    assert os.environ["LOCAL_WORLD_SIZE"] == os.environ["WORLD_SIZE"]
    assert os.environ["MASTER_ADDR"] == "127.0.0.1"
    assert os.environ["NCCL_NVLS_ENABLE"] == "0"
    assert os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert os.environ["NVSHMEM_DISABLE_NVLS"] == "1"
    import infradev_probe  # importable from the tests: PYTHONPATH starts with python/sandbox


@pytest.mark.parametrize("n", [1, 2])
def test_param(n):
    assert n > 0


@pytest.mark.skip(reason="not today")
def test_skipped():
    pass
'''
IDS = ["test_ok.py::test_sum", "test_ok.py::test_env", "test_ok.py::test_param[1]", "test_ok.py::test_param[2]", "test_ok.py::test_skipped"]


@pytest.mark.parametrize("nproc", [2, 4])
def test_all_pass(scratch, nproc):
    run = scratch({"test_ok.py": PASSING}, nproc, "--per-test-timeout", "60")
    assert run.returncode == 0, run.stderr
    launch = run.launch
    assert launch["status"] == "ok"
    assert launch["nproc"] == nproc and launch["launcher"] == "builtin"
    assert launch["exit_codes"] == [0] * nproc
    assert launch["collected"] == IDS
    assert launch["events"] == [] and launch["restarts"] == 0
    assert launch["hardening"] == {"non_dumpable": True, "subreaper": True, "seccomp": True}
    # progress on stderr, counting up to the total; the bundle is the last stdout line (conftest checks)
    progress = [json.loads(l.split(" ", 1)[1]) for l in run.stderr.splitlines() if l.startswith("INFRADEV-PROGRESS ")]
    assert progress and progress[-1] == {"done": 5, "total": 5}
    assert [p["done"] for p in progress] == sorted(p["done"] for p in progress)
    assert [(e["rank"], e["session"]) for e in run.integrity] == [(r, 0) for r in range(nproc)]
    for entry in run.integrity:
        assert entry["exit_code"] == 0
        assert entry["plugin"] == entry["summary"] == {"passed": 4, "failed": 0, "error": 0, "skipped": 1}
    for rank in range(nproc):
        assert run.file_junit(rank) == run.junit(rank)  # the agent's copy says what the host's does
        cases = run.junit(rank)
        assert list(cases) == IDS
        assert cases["test_ok.py::test_skipped"] == ("skipped", "not today")
        assert all(cases[i][0] == "passed" for i in IDS[:-1])
        probe = run.probe(rank)
        assert probe["rank"] == rank and probe["world_size"] == nproc
        assert probe["tests"]["test_ok.py::test_sum"]["calls"] == {"all_reduce": 1}
        assert probe["tests"]["test_ok.py::test_sum"]["bytes"] == {"all_reduce": 16}


def test_hang_is_reported_and_the_suite_continues(scratch, tmp_path):
    limit = 5.0
    run = scratch({"test_hang.py": HANGING}, 2, "--per-test-timeout", str(limit))
    assert run.returncode == 2, run.stderr
    launch = run.launch
    assert launch["status"] == "hang"
    [event] = launch["events"]
    assert event["kind"] == "hang" and event["rank"] == 1 and event["test"] == "test_hang.py::test_hang"
    assert limit < event["after_s"] < limit + 3
    assert launch["restarts"] == 1
    r0, r1 = run.junit(0), run.junit(1)
    assert r1["test_hang.py::test_hang"][0] == "error"
    assert r1["test_hang.py::test_hang"][1].startswith("hang: test_hang.py::test_hang did not finish within 5 s on rank 1")
    assert r0["test_hang.py::test_hang"][0] == "passed"  # rank 0 skipped the recv and went on
    # the test after the hang still ran, on both ranks, after the restart
    assert r0["test_hang.py::test_after"][0] == "passed" and r1["test_hang.py::test_after"][0] == "passed"
    assert r0["test_hang.py::test_before"][0] == "passed" and r1["test_hang.py::test_before"][0] == "passed"
    with open(run.out_dir + "/rank1.stacks.txt") as f:
        assert "in test_hang" in f.read()  # faulthandler dump of the stuck rank
    assert processes_mentioning(str(tmp_path)) == []


def test_hang_without_continue(scratch, tmp_path):
    run = scratch({"test_hang.py": HANGING}, 2, "--per-test-timeout", "3", "--no-continue")
    assert run.returncode == 2
    assert run.launch["status"] == "hang" and run.launch["restarts"] == 0
    r0, r1 = run.junit(0), run.junit(1)
    assert r1["test_hang.py::test_hang"][0] == "error"
    assert "test_hang.py::test_after" not in r1  # never reached on rank 1
    # rank 0 was waiting in test_after when it was killed: an error that names the real culprit
    assert r0["test_hang.py::test_after"][0] == "error"
    assert r0["test_hang.py::test_after"][1].startswith("aborted:")
    assert processes_mentioning(str(tmp_path)) == []


CRASHING = PG_FIXTURE.replace("    dist.barrier()\n", "") + '''

def test_before():
    t = torch.ones(2)
    dist.all_reduce(t)


def test_crash():
    if dist.get_rank() == 1:
        os._exit(3)
    t = torch.ones(2)
    dist.all_reduce(t)


def test_after():
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size()
'''


def test_rank_exit_mid_test_is_a_crash(scratch, tmp_path):
    run = scratch({"test_crash.py": CRASHING}, 2, "--per-test-timeout", "30", "--grace", "2")
    assert run.returncode == 2, run.stderr
    launch = run.launch
    assert launch["status"] == "crash"
    [event] = launch["events"]
    assert event["kind"] == "crash" and event["rank"] == 1 and event["test"] == "test_crash.py::test_crash"
    assert event["exit_code"] == 3
    r0, r1 = run.junit(0), run.junit(1)
    assert r1["test_crash.py::test_crash"] == ("error", "crash: rank 1 exited with code 3 while running test_crash.py::test_crash")
    assert r0["test_crash.py::test_crash"][0] in ("failed", "error")  # its peer vanished mid-collective
    assert r0["test_crash.py::test_after"][0] == "passed" and r1["test_crash.py::test_after"][0] == "passed"
    assert processes_mentioning(str(tmp_path)) == []


def test_launch_errors(scratch):
    run = scratch({"test_x.py": "def test_x():\n    pass\n"}, 2, "--", "--no-such-pytest-flag", "test_x.py")
    assert run.returncode == 3
    assert run.launch["status"] == "launch_error"
    assert "unrecognized arguments: --no-such-pytest-flag" in run.launch["error"]
    run = scratch({}, 0)
    assert run.returncode == 3 and "--nproc" in run.stderr
    assert run.launch["status"] == "launch_error"


def test_collection_error_fails_the_run(scratch):
    run = scratch({"test_ok.py": "def test_ok():\n    pass\n", "test_broken.py": "import no_such_module\n"}, 2)
    assert run.returncode == 1
    assert run.launch["status"] == "tests_failed"
    [err] = run.launch["collection_errors"]
    assert err["file"] == "test_broken.py" and "no_such_module" in err["message"]
    assert run.junit(0) == {"test_ok.py::test_ok": ("passed", "")}


STOP_ON_FAIL = PG_FIXTURE + '''

def test_first():
    dist.barrier()


def test_not_listed_fails():
    assert False, "a failure --stop-on-fail does not list"


def test_listed_fails_on_rank_1():
    dist.barrier()
    assert dist.get_rank() == 0, "fails on rank 1 only"


def test_never_reached():
    import time

    time.sleep(10)  # the stop lands within a poll (0.2 s): long before this ends
'''


def test_stop_on_fail_ends_the_run_at_the_first_listed_failure(scratch):
    """task check's mutants: one failing case is their verdict, the rest of the session is not run."""
    listed = "test_stop.py::test_listed_fails_on_rank_1"
    run = scratch({"test_stop.py": STOP_ON_FAIL}, 2, "--per-test-timeout", "60", "--stop-on-fail", listed, "--stop-on-fail", "test_stop.py::test_first")
    assert run.returncode == 1, run.stderr
    assert run.launch["status"] == "fail_fast" and run.launch["restarts"] == 0
    [event] = run.launch["events"]
    assert (event["kind"], event["rank"], event["test"]) == ("fail_fast", 1, listed)
    assert "failed on rank 1" in event["detail"]
    for rank in (0, 1):
        recs = run.records(rank)
        assert recs["test_stop.py::test_first"]["outcome"] == "passed"
        assert recs["test_stop.py::test_not_listed_fails"]["outcome"] == "failed"
        # Not run, or caught running (waiting in its barrier) when the launcher stopped the ranks.
        never = recs.get("test_stop.py::test_never_reached")
        assert never is None or (never["outcome"] == "error" and never.get("killed")), never
    assert run.records(1)[listed]["outcome"] == "failed"
    # Without the option the same file runs to its end.
    full = scratch({"test_stop.py": STOP_ON_FAIL}, 2, "--per-test-timeout", "60")
    assert full.launch["status"] == "tests_failed" and full.launch["events"] == []
    assert full.records(0)["test_stop.py::test_never_reached"]["outcome"] == "passed"


def test_torchrun_falls_back_or_runs(scratch):
    """Debian's torchrun on Python 3.11 dies before starting a rank: the run falls back, with a note."""
    run = scratch({"test_x.py": "def test_x():\n    pass\n"}, 2, "--launcher", "torchrun")
    assert run.returncode == 0, run.stderr
    assert run.launch["launcher_requested"] == "torchrun"
    if run.launch["launcher"] == "builtin":
        assert "fell back to the built-in launcher" in run.launch["notes"][0]
    TORCHRUN_WORKS.append(run.launch["launcher"] == "torchrun")
    assert run.junit(1) == {"test_x.py::test_x": ("passed", "")}


def test_real_torchrun_hang(scratch, tmp_path):
    if not TORCHRUN_WORKS or not TORCHRUN_WORKS[0]:
        pytest.skip("torchrun does not work here (the previous test fell back)")
    run = scratch({"test_hang.py": HANGING}, 2, "--launcher", "torchrun", "--no-fallback", "--per-test-timeout", "3")
    assert run.returncode == 2, run.stderr
    assert run.launch["launcher"] == "torchrun"
    event = run.launch["events"][0]
    assert event["kind"] == "hang" and event["rank"] == 1 and event["test"] == "test_hang.py::test_hang"
    r0, r1 = run.junit(0), run.junit(1)
    assert r1["test_hang.py::test_hang"][0] == "error"
    assert r0["test_hang.py::test_after"][0] == "passed" and r1["test_hang.py::test_after"][0] == "passed"
    with open(run.out_dir + "/rank1.stacks.txt") as f:
        assert "in test_hang" in f.read()
    assert processes_mentioning(str(tmp_path)) == []


TORCHRUN_WORKS = []


def test_leftover_processes_are_killed(scratch, tmp_path):
    """A test that leaves a daemon behind, in a session of its own: it still does not survive."""
    marker = str(tmp_path / "daemon-marker")
    body = (
        "import subprocess, sys\n\n"
        "def test_spawn():\n"
        "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', %r], start_new_session=True)\n" % marker
    )
    run = scratch({"test_spawn.py": body}, 2)
    assert run.returncode == 0, run.stderr
    assert processes_mentioning(marker) == []


# Without torch (cheaper): rank 0 stands for a peer left waiting in a collective.
CRASHING_NO_TORCH = '''
import os
import time


def test_before():
    pass


def test_crash():
    if os.environ["RANK"] == "1":
        os._exit(3)
    time.sleep(60)


def test_after():
    pass
'''
FAKE_TORCHRUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_torchrun_python.py")


def test_torchrun_path_crash_with_a_stand_in_torchrun(scratch, tmp_path, monkeypatch):
    """The torchrun code path (rank entry wrapper, pid / exit files) against a torchrun stand-in."""
    monkeypatch.setenv("INFRADEV_REAL_PYTHON", sys.executable)
    run = scratch({"test_crash.py": CRASHING_NO_TORCH}, 2, "--launcher", "torchrun", "--no-fallback", "--python", FAKE_TORCHRUN,
                  "--per-test-timeout", "30", "--grace", "2")
    assert run.returncode == 2, run.stderr
    assert run.launch["launcher"] == "torchrun"
    [event] = run.launch["events"]
    assert event["kind"] == "crash" and event["rank"] == 1 and event["test"] == "test_crash.py::test_crash"
    assert event["exit_code"] == 3
    r0, r1 = run.junit(0), run.junit(1)
    assert r1["test_crash.py::test_crash"][0] == "error"
    assert r0["test_crash.py::test_after"][0] == "passed" and r1["test_crash.py::test_after"][0] == "passed"
    assert processes_mentioning(str(tmp_path)) == []


def test_sigterm_to_the_launcher_kills_the_ranks_and_still_reports(tmp_path):
    import json
    import signal
    import subprocess
    import time

    from conftest import LAUNCHER

    work = tmp_path / "work"
    work.mkdir()
    (work / "test_hang.py").write_text(HANGING)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, LAUNCHER, "--nproc", "2", "--out-dir", str(out), "--per-test-timeout", "120",
                             "--", "-q", "test_hang.py"], cwd=str(work), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # wait until rank 1 is stuck in test_hang
        try:
            state = json.loads((out / "rank1.current.json").read_text())
        except (OSError, ValueError):
            state = {}
        if state.get("nodeid") == "test_hang.py::test_hang":
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 2, stderr
    assert json.loads(stdout.splitlines()[-1].split(" ", 1)[1])["launch"]["status"] == "interrupted"
    launch = json.loads((out / "launch.json").read_text())
    assert launch["status"] == "interrupted" and launch["events"][0]["kind"] == "interrupted"
    assert "SIGTERM" in launch["events"][0]["detail"]
    assert processes_mentioning(str(tmp_path)) == []


def test_option_forms_and_help(tmp_path):
    """Both option spellings, switches and abbreviations give the same run; bad values and --help
    behave as argparse's (the common case is parsed without importing argparse)."""
    import json
    import subprocess

    from conftest import LAUNCHER

    work = tmp_path / "work"
    work.mkdir()
    (work / "test_x.py").write_text("def test_x():\n    pass\n")

    def go(*own):
        out = tmp_path / ("out%d" % len(list(tmp_path.iterdir())))
        proc = subprocess.run([sys.executable, "-S", LAUNCHER] + [a.replace("OUT", str(out)) for a in own] + ["--", "-q", "test_x.py"],
                              cwd=str(work), capture_output=True, text=True, timeout=120)
        launch_json = out / "launch.json"
        return proc, (json.loads(launch_json.read_text()) if launch_json.exists() else None)

    for own in (["--nproc", "2", "--out-dir", "OUT", "--per-test-timeout", "30"],
                ["--nproc=2", "--out-dir=OUT", "--per-test-timeout=30", "--no-continue"],
                ["--npr", "2", "--out-d", "OUT", "--per-test", "30"]):  # abbreviations: argparse's path
        proc, launch = go(*own)
        assert proc.returncode == 0, (own, proc.stderr)
        assert launch["status"] == "ok" and launch["nproc"] == 2 and launch["per_test_timeout_s"] == 30.0, own

    for own, message in ((["--nproc", "0", "--out-dir", "OUT"], "argument --nproc: must be an integer >= 1 (got 0)"),
                         (["--nproc", "2", "--out-dir", "OUT", "--grace", "-1"], "argument --grace: must be > 0 (got -1)"),
                         (["--nproc", "2", "--out-dir", "OUT", "--launcher", "mpirun"], "argument --launcher: must be builtin or torchrun"),
                         (["--nproc", "2", "--out-dir", "OUT", "--bogus"], "unrecognized arguments: --bogus"),
                         (["--out-dir", "OUT"], "the following arguments are required: --nproc")):
        proc, launch = go(*own)
        assert proc.returncode == 3, own
        assert message in proc.stderr, (own, proc.stderr)
        assert launch["status"] == "launch_error" and message in launch["error"], own

    help_run = subprocess.run([sys.executable, LAUNCHER, "--help"], capture_output=True, text=True, timeout=60)
    assert help_run.returncode == 0
    assert "--per-test-timeout" in help_run.stdout and "--max-restarts" in help_run.stdout


INHERIT = '''
import os


def test_no_inherited_descriptor():
    # The number may be reused by the rank itself (pytest opens files): what must not be there is
    # the pipe, known by its inode.
    pipe = tuple(int(x) for x in os.environ["LEAKED_PIPE"].split(":"))
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.fstat(int(name))
        except OSError:
            continue
        assert (st.st_dev, st.st_ino) != pipe, "rank %s inherited the pipe as fd %s" % (os.environ["RANK"], name)
'''


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "waitpid-polling"])
def test_ranks_get_no_inherited_descriptor_and_exits_are_seen(tmp_path, pidfd):
    """A descriptor the launcher's parent left inheritable (here a pipe) is not passed on to the ranks,
    as subprocess's close_fds would not; with and without pidfds to wait on."""
    import json
    import subprocess

    from conftest import LAUNCHER

    work = tmp_path / "work"
    work.mkdir()
    (work / "test_fd.py").write_text(INHERIT)
    out = tmp_path / "out"
    r, w = os.pipe()
    os.set_inheritable(w, True)
    env = dict(os.environ, LEAKED_PIPE="%d:%d" % (os.fstat(w).st_dev, os.fstat(w).st_ino))
    if not pidfd:
        env["INFRADEV_LAUNCHER_NO_PIDFD"] = "1"
    try:
        proc = subprocess.run([sys.executable, LAUNCHER, "--nproc", "2", "--out-dir", str(out), "--", "-q", "test_fd.py"],
                              cwd=str(work), capture_output=True, text=True, timeout=120, pass_fds=(w,), env=env)
    finally:
        os.close(r)
        os.close(w)
    assert proc.returncode == 0, proc.stderr + (out / "rank0.log").read_text()
    launch = json.loads((out / "launch.json").read_text())
    assert launch["status"] == "ok" and launch["exit_codes"] == [0, 0]
    assert launch["summary"]["passed"] == 1


PLUGIN_OK = '''
import os

import pytest

os.environ["PLUGIN_MODULE_RAN"] = "yes"


@pytest.fixture
def from_plugin():
    return 42
'''


def test_a_path_plugin_is_loaded_from_its_file_and_gives_its_fixtures(scratch):
    """`--plugin path:<file>` (how the probe sessions load the probes' conftest): the module's code
    runs before the tests, its fixtures reach them; the file's folder is not put on sys.path."""
    test = '''
import os
import sys


def test_uses_it(from_plugin):
    assert from_plugin == 42 and os.environ["PLUGIN_MODULE_RAN"] == "yes"
    assert "qzkfirstpl" in sys.modules and os.path.abspath("sub") not in [os.path.abspath(p) for p in sys.path]
'''
    run = scratch({"sub/qzkfirstpl.py": PLUGIN_OK, "test_p.py": test}, 2, "--plugin", "path:sub/qzkfirstpl.py", "--", "-q", "test_p.py")
    assert run.returncode == 0, run.stderr
    for rank in range(2):
        assert run.junit(rank) == {"test_p.py::test_uses_it": ("passed", "")}


def test_a_path_plugin_that_does_not_import_ends_the_rank_as_a_broken_conftest_does(scratch):
    """A plugin file that raises on import (a submission broke what it imports): exit 4 and the
    error on stderr on every rank, as pytest ends on a conftest that does not import; never exit 1
    without a report (which reads as records cut by code in the rank)."""
    run = scratch({"qzkbadplug.py": "raise ImportError('the package is broken')\n", "test_p.py": "def test_x():\n    pass\n"}, 2, "--plugin", "path:qzkbadplug.py", "--", "-q", "test_p.py")
    assert run.returncode != 0
    assert [e["exit_code"] for e in run.integrity] == [4, 4]
    for rank in range(2):
        assert "the package is broken" in run.log(rank) and "ImportError while loading conftest" in run.log(rank)


ATTACHING_TEST = '''
import os

from infradev_outputs import OUT_DIR_ENV, rank_name, write_atomic


def test_records_for_the_host():
    rank = int(os.environ["RANK"])
    fd = os.open(os.environ[OUT_DIR_ENV], os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic(rank_name(rank, "differential.json"), ('{"rank": %d}' % rank).encode(), fd)
    finally:
        os.close(fd)
'''


def test_records_a_probe_writes_for_the_host_leave_in_the_bundle_and_stale_ones_do_not(scratch, tmp_path):
    """rank<r>.differential.json (the golden-differential recorder's output) travels whole in the
    bundle's `attachments`; one left in the out dir by an earlier run (or planted) is removed first."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "rank1.differential.json").write_text('{"planted": true}')
    run = scratch({"test_rec.py": ATTACHING_TEST}, 2)
    assert run.returncode == 0, run.stderr
    got = {(a["rank"], a["name"]): a["text"] for a in run.bundle["attachments"]}
    assert got == {(0, "differential.json"): '{"rank": 0}', (1, "differential.json"): '{"rank": 1}'}
    assert run.bundle["attachments_dropped"] == 0
    # a session that writes none carries none, even where an earlier run left some
    run = scratch({"test_rec.py": "def test_records_for_the_host():\n    pass\n"}, 2)
    assert run.bundle["attachments"] == [] and run.bundle["attachments_dropped"] == 0
