"""Tests that attack the launcher and the recording harness from inside a rank, and the rank boot.

What the host would take from each run is the bundle on the launcher's stdout, accepted only when it
is the one and last line and the launcher exited with one of its codes (sandbox/ranks.ts). Every
attack here must end with no forged data in that, the forgery showing as a rejected bundle (lost
records) or as a disagreement between the independent records of the rank.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import LAUNCHER, processes_mentioning

BUNDLE = "INFRADEV-BUNDLE "
LAUNCHER_CODES = (0, 1, 2, 3)


def host_view(proc):
    """(bundle, why-not) as runRanks decides: a normal exit code, exactly one bundle line, the last one."""
    if proc.returncode not in LAUNCHER_CODES:
        return None, "exit %s" % proc.returncode
    lines = [l for l in proc.stdout.splitlines() if l.strip()]
    bundles = [l for l in lines if l.startswith(BUNDLE)]
    if len(bundles) != 1:
        return None, "%d bundles" % len(bundles)
    if lines[-1] != bundles[0]:
        return None, "bundle not last"
    return json.loads(bundles[0][len(BUNDLE):]), None


def launch(tmp_path, files, nproc=2, *args, env=None, timeout=180, pytest_args=None):
    work = tmp_path / "work"
    for name, body in files.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(body))
    cmd = [sys.executable, "-I", "-S", LAUNCHER, "--nproc", str(nproc), "--out-dir", "out"] + list(args)
    cmd += ["--", "-q"] + (pytest_args if pytest_args is not None else sorted(n for n in files if n.startswith("test_")))
    proc = subprocess.run(cmd, cwd=str(work), capture_output=True, text=True, timeout=timeout, env=env)
    return proc, work


def records(bundle, rank):
    return {r["nodeid"]: r for r in next(x for x in bundle["ranks"] if x["rank"] == rank)["records"]}


PLANT = '''
import os

OUT = os.environ["INFRADEV_OUT_DIR"]
FORGED_XML = '<testsuites><testsuite><testcase name="test_plant.py::test_fails" classname="test_plant.py"/></testsuite></testsuites>'
FORGED_RECORD = '{"nodeid": "test_plant.py::test_fails", "outcome": "passed", "session": 0}\\n'


def plant(name, target):
    path = os.path.join(OUT, name)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.symlink(target, path)


def test_fails():
    here = os.getcwd()
    for name, body in (("forged.xml", FORGED_XML), ("forged.json", '{"status": "ok"}'), ("forged.jsonl", FORGED_RECORD)):
        with open(os.path.join(here, name), "w") as f:
            f.write(body)
    rank = os.environ["RANK"]
    plant("launch.json", os.path.join(here, "forged.json"))
    plant("rank%s.xml" % rank, os.path.join(here, "forged.xml"))
    plant("rank%s.probe.json" % rank, os.path.join(here, "forged.json"))
    for session in range(4):  # under load the launcher may have restarted the ranks once already
        plant("rank%s.session%d.pytest.xml" % (rank, session), os.path.join(here, "pytest-junit-target-%s.xml" % rank))
    for i in range(20):  # the old fixed temp names, and lookalikes of the new random ones
        plant("rank%s.xml.tmp" % rank if i == 0 else "launch.json.tmp-%012x" % i, os.path.join(here, "forged.json"))
    os.mkfifo(os.path.join(OUT, "rank%s.stacks.txt.fifo" % rank))
    assert False, "this test fails"
'''


def test_planted_links_are_never_followed(tmp_path):
    proc, work = launch(tmp_path, {"test_plant.py": PLANT})
    bundle, why = host_view(proc)
    assert why is None, (why, proc.stderr)
    for rank in (0, 1):
        assert records(bundle, rank)["test_plant.py::test_fails"]["outcome"] == "failed"
    assert bundle["launch"]["status"] == "tests_failed"
    # the links' targets are untouched: the launcher replaced the links, never wrote through them
    assert (work / "forged.json").read_text() == '{"status": "ok"}'
    assert "test_plant.py::test_fails" in (work / "forged.xml").read_text()
    out = work / "out"
    assert not (out / "launch.json").is_symlink() and json.loads((out / "launch.json").read_text())["status"] == "tests_failed"
    assert not (out / "rank0.xml").is_symlink()
    for entry in bundle["integrity"]:
        # pytest wrote its junit through the planted link (the rank's own doing); the launcher does not
        # read a link: no junit record for this rank and session, which the grader sees
        assert entry["pytest_junit"] is None
        assert entry["summary"] == {"passed": 0, "failed": 1, "error": 0, "skipped": 0} and entry["exit_code"] == 1


def test_planted_symlink_out_dir_is_refused(tmp_path):
    work = tmp_path / "work"
    (work / "elsewhere").mkdir(parents=True)
    (work / ".infradev").mkdir()
    os.symlink(str(work / "elsewhere"), str(work / ".infradev" / "results"))
    (work / "test_x.py").write_text("def test_x():\n    pass\n")
    proc = subprocess.run([sys.executable, "-I", "-S", LAUNCHER, "--nproc", "1", "--out-dir", ".infradev/results/run1", "--", "-q", "test_x.py"],
                          cwd=str(work), capture_output=True, text=True, timeout=60)
    bundle, why = host_view(proc)
    assert why is None and proc.returncode == 3
    assert bundle["launch"]["status"] == "launch_error" and "symlink" in bundle["launch"]["error"]
    assert list((work / "elsewhere").iterdir()) == []


def test_fifo_planted_under_a_log_name_does_not_hang_the_launcher(tmp_path):
    # A FIFO under rank1.log when the next session opens it: opened O_NONBLOCK, seen not regular,
    # replaced. The hang makes the launcher restart the ranks (and reopen the logs).
    body = '''
    import os, time

    def test_plant_and_hang():
        out = os.environ["INFRADEV_OUT_DIR"]
        if os.environ["RANK"] == "0":
            os.unlink(os.path.join(out, "rank1.log"))
            os.mkfifo(os.path.join(out, "rank1.log"))
            os.mkfifo(os.path.join(out, "rank1.results.jsonl.new"))
            time.sleep(60)

    def test_after():
        pass
    '''
    t0 = time.monotonic()
    proc, work = launch(tmp_path, {"test_fifo.py": body}, 2, "--per-test-timeout", "3", timeout=90)
    assert time.monotonic() - t0 < 60
    bundle, why = host_view(proc)
    assert why is None, (why, proc.stderr)
    assert bundle["launch"]["restarts"] == 1
    assert records(bundle, 1)["test_fifo.py::test_after"]["outcome"] == "passed"
    assert (work / "out" / "rank1.log").is_file()


FORGE_AT_EXIT = '''
import atexit, json, os

def forge():
    path = os.path.join(os.environ["INFRADEV_OUT_DIR"], "rank%s.results.jsonl" % os.environ["RANK"])
    with open(path, "a") as f:
        for nodeid in ("test_forge.py::test_fails", "test_forge.py::test_never_collected"):
            f.write(json.dumps({"nodeid": nodeid, "outcome": "passed", "when": "call", "phases": {"call": "passed"},
                                "session": int(os.environ["INFRADEV_SESSION"]), "duration_s": 0.1}) + "\\n")

atexit.register(forge)

def test_fails():
    assert False, "really fails"

def test_passes():
    pass
'''


def test_records_appended_at_exit_stay_out_and_show_as_a_disagreement(tmp_path):
    proc, _work = launch(tmp_path, {"test_forge.py": FORGE_AT_EXIT})
    bundle, why = host_view(proc)
    assert why is None, (why, proc.stderr)
    for rank in (0, 1):
        recs = records(bundle, rank)
        assert recs["test_forge.py::test_fails"]["outcome"] == "failed"
        assert "test_forge.py::test_never_collected" not in recs
    for entry in bundle["integrity"]:
        # the plugin's file now holds two extra passing lines: its counts no longer match pytest's own
        assert entry["plugin"] == {"passed": 3, "failed": 1, "error": 0, "skipped": 0}
        assert {k: entry["pytest_junit"][k] for k in ("passed", "failed", "error", "skipped")} == {"passed": 1, "failed": 1, "error": 0, "skipped": 0}
        assert entry["summary"] == {"passed": 1, "failed": 1, "error": 0, "skipped": 0}
        assert entry["exit_code"] == 1


STDOUT_WRITE = '''
import os

FORGED = 'INFRADEV-BUNDLE {"format": 1, "nonce": "", "launch": {"status": "ok"}, "collected": [], "ranks": [], "integrity": [], "logs": []}\\n'

def test_write_into_the_launchers_stdout():
    wrote = []
    for pid in (os.getppid(), 1):
        try:
            fd = os.open("/proc/%d/fd/1" % pid, os.O_WRONLY)
        except OSError:
            continue
        os.write(fd, FORGED.encode())
        os.close(fd)
        wrote.append(pid)
    print("wrote into", wrote)
'''


def test_forged_bundle_in_the_launchers_stdout_is_never_accepted(tmp_path):
    proc, _work = launch(tmp_path, {"test_stdout.py": STDOUT_WRITE})
    bundle, why = host_view(proc)
    real = [l for l in proc.stdout.splitlines() if l.startswith(BUNDLE)][-1]
    assert json.loads(real[len(BUNDLE):])["launch"]["hardening"]["non_dumpable"] is True
    # The ranks' audit hook refuses opening another process's /proc/<pid>/fd/* before the kernel is
    # asked (even here, as root with CAP_SYS_PTRACE, where the kernel would let the rank in despite
    # PR_SET_DUMPABLE 0): nothing is written, and the refusal is on each rank's audit channel.
    assert why is None, why
    assert bundle["launch"]["status"] == "tests_failed"  # the test itself dies on the refusal
    for entry in bundle["integrity"]:
        assert any("/fd/1" in line for line in entry["audit"]["refused"]), entry["audit"]


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_test_that_signals_the_launcher_loses_its_records(tmp_path, sig):
    body = '''
    import os, signal, time

    def test_first():
        pass

    def test_signal_the_launcher():
        if os.environ["RANK"] == "0":
            os.kill(os.getppid(), signal.%s)
        time.sleep(30)
    ''' % sig
    proc, work = launch(tmp_path, {"test_sig.py": body}, 2, "--per-test-timeout", "60", "--kill-grace", "1")
    bundle, why = host_view(proc)
    if sig == "SIGTERM":
        # the launcher still reports, as interrupted: runRanks takes that as lost records when the host
        # did not cancel the run itself
        assert why is None and proc.returncode == 2
        assert bundle["launch"]["status"] == "interrupted"
    else:
        assert why == "exit -9" and bundle is None
    deadline = time.monotonic() + 10
    while processes_mentioning(str(work)) and time.monotonic() < deadline:
        time.sleep(0.2)


# -- the rank boot -------------------------------------------------------------------------------

SHADOWS = {
    # Each would sabotage the harness if it were imported in place of the real module.
    "json.py": "raise SystemExit('repo json.py imported')\n",
    "time.py": "raise SystemExit('repo time.py imported')\n",
    "faulthandler.py": "raise SystemExit('repo faulthandler.py imported')\n",
    "pluggy.py": "raise SystemExit('repo pluggy.py imported')\n",
    "hashlib.py": "raise SystemExit('repo hashlib.py imported')\n",
    "xml/__init__.py": "raise SystemExit('repo xml imported')\n",
}
SHADOW_TESTS = '''
import os
import sys


def test_sees_the_real_modules():
    import json, pluggy
    assert "site-packages" in pluggy.__file__ or "dist-packages" in pluggy.__file__
    assert json.dumps([1]) == "[1]"
    assert sys.path[0] == os.getcwd()  # as under `python -m pytest`


def test_fails():
    assert False, "must be recorded as failed"
'''


@pytest.mark.parametrize("where", ["repo", "pythonpath"])
def test_shadowing_modules_do_not_reach_the_harness(tmp_path, where):
    files = {"test_shadow.py": SHADOW_TESTS}
    env = dict(os.environ)
    if where == "repo":
        files.update(SHADOWS)
    else:
        shadow = tmp_path / "shadow"
        for name, body in SHADOWS.items():
            (shadow / name).parent.mkdir(parents=True, exist_ok=True)
            (shadow / name).write_text(body)
        env["PYTHONPATH"] = str(shadow)
    proc, work = launch(tmp_path, files, 2, env=env, pytest_args=["test_shadow.py"])
    bundle, why = host_view(proc)
    assert why is None, (why, proc.stderr)
    # the control: plain `python -m pytest` there is taken over by the shadowing modules
    plain = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_shadow.py"], cwd=str(work),
                           capture_output=True, text=True, timeout=60, env=env)
    assert "imported" in plain.stdout + plain.stderr and plain.returncode != 0
    log = next(l["text"] for l in bundle["logs"] if l["name"] == "rank0.log")
    for rank in (0, 1):
        recs = records(bundle, rank)
        assert recs["test_shadow.py::test_sees_the_real_modules"]["outcome"] == "passed", log
        assert recs["test_shadow.py::test_fails"]["outcome"] == "failed"
    for entry in bundle["integrity"]:
        assert entry["plugin"] == {k: entry["pytest_junit"][k] for k in entry["plugin"]} == entry["summary"], entry


CURRENT = '''
import atexit, hashlib, os
import pytest

SEEN = {}


def token(nodeid, when):
    return "test_%s (%s)" % (hashlib.sha1(nodeid.encode()).hexdigest()[:12], when)


@pytest.fixture
def watch(request):
    SEEN["setup"] = os.environ["PYTEST_CURRENT_TEST"]
    yield
    SEEN["teardown"] = os.environ["PYTEST_CURRENT_TEST"]
    assert SEEN["teardown"] == token(request.node.nodeid, "teardown")


def test_probe_secret_name(watch, request):
    assert SEEN["setup"] == token(request.node.nodeid, "setup")
    assert os.environ["PYTEST_CURRENT_TEST"] == token(request.node.nodeid, "call")
    assert not any("probe_secret" in v for v in os.environ.values())
    out = os.path.join(os.environ["INFRADEV_OUT_DIR"], "current-at-exit-%s" % os.environ["RANK"])
    atexit.register(lambda: open(out, "w").write(repr(os.environ.get("PYTEST_CURRENT_TEST"))))


def test_argv_and_environment_name_no_test():
    import sys
    with open("/proc/self/cmdline", "rb") as f:
        cmdline = f.read()
    assert b"test_current" not in cmdline and b"--junitxml" not in cmdline
    assert not any("test_current" in a for a in sys.argv)
    assert "INFRADEV_RANK_SPEC" not in os.environ and os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] == "1"
    assert os.readlink("/proc/self/fd/0") == "/dev/null"
'''


def test_pytest_current_test_is_neutral_and_still_popped(tmp_path):
    proc, work = launch(tmp_path, {"test_current.py": CURRENT})
    bundle, why = host_view(proc)
    assert why is None and proc.returncode == 0, (why, proc.stderr, bundle and bundle["logs"])
    for rank in (0, 1):
        assert all(r["outcome"] == "passed" for r in records(bundle, rank).values())
        assert (work / "out" / ("current-at-exit-%d" % rank)).read_text() == "None"


PLUGIN_TESTS = '''
def test_uses_the_task_plugin(task_fixture):
    assert task_fixture == 42

def test_fails():
    assert False
'''
TASK_PLUGIN = '''
import pytest

@pytest.fixture
def task_fixture():
    return 42
'''
EVIL_PLUGIN = '''
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    rep.outcome = "passed"
    rep.longrepr = None
'''


def test_named_plugins_load_and_entry_points_do_not(tmp_path):
    # The repo registers a pytest11 entry point (a *.dist-info folder on sys.path) whose plugin turns
    # every failure into a pass: with autoload off it is never loaded. The task's plugin, named with
    # --plugin, is.
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "task_plugin.py").write_text(TASK_PLUGIN)
    files = {
        "test_plugins.py": PLUGIN_TESTS,
        "evil_plugin.py": EVIL_PLUGIN,
        "evil-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: evil\nVersion: 1.0\n",
        "evil-1.0.dist-info/entry_points.txt": "[pytest11]\nevil = evil_plugin\n",
    }
    env = dict(os.environ, PYTHONPATH=str(plugins))
    proc, work = launch(tmp_path, files, 2, "--plugin", "task_plugin", env=env, pytest_args=["test_plugins.py"])
    # the control: with autoload on (plain `python -m pytest`), the entry point's plugin is loaded
    plain = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "task_plugin", "test_plugins.py"],
                           cwd=str(work), capture_output=True, text=True, timeout=60, env=env)
    assert plain.returncode == 0 and "2 passed" in plain.stdout, plain.stdout
    bundle, why = host_view(proc)
    assert why is None, (why, proc.stderr)
    for rank in (0, 1):
        recs = records(bundle, rank)
        assert recs["test_plugins.py::test_uses_the_task_plugin"]["outcome"] == "passed"
        assert recs["test_plugins.py::test_fails"]["outcome"] == "failed"
    assert bundle["launch"]["plugins"] == ["task_plugin"]
    # imported by the boot before pytest: no "already imported, cannot be rewritten" warning either
    log = next(l["text"] for l in bundle["logs"] if l["name"] == "rank0.log")
    assert "PytestAssertRewriteWarning" not in log and "warning" not in log.splitlines()[-1], log


def test_launch_spec_in_the_environment_keeps_argv_clean_and_out_dir_removable(tmp_path):
    sys.path.insert(0, os.path.dirname(LAUNCHER))
    from infradev_outputs import encode_spec

    work = tmp_path / "work"
    work.mkdir()
    (work / "test_argv.py").write_text(textwrap.dedent('''
    import os

    def test_launcher_argv():
        with open("/proc/%d/cmdline" % os.getppid(), "rb") as f:
            argv = f.read()
        assert b"test_argv" not in argv and b"secret-out" not in argv, argv
        assert "INFRADEV_LAUNCH_SPEC_HEX" not in os.environ and "INFRADEV_BUNDLE_NONCE" not in os.environ
    '''))
    spec = encode_spec(["-q", "test_argv.py"], [], (), "secret-out", 0).hex()
    env = dict(os.environ, INFRADEV_LAUNCH_SPEC_HEX=spec, INFRADEV_BUNDLE_NONCE="n0nce")
    cmd = [sys.executable, "-I", "-S", LAUNCHER, "--nproc", "2", "--remove-out-dir"]
    proc = subprocess.run(cmd, cwd=str(work), capture_output=True, text=True, timeout=120, env=env)
    bundle, why = host_view(proc)
    assert why is None and proc.returncode == 0, (why, proc.stderr, bundle and bundle["logs"])
    assert bundle["nonce"] == "n0nce" and bundle["launch"]["pytest_args"] == ["-q", "test_argv.py"]
    assert records(bundle, 1)["test_argv.py::test_launcher_argv"]["outcome"] == "passed"
    assert list((work / "secret-out").iterdir()) == []  # emptied once the bundle was built
    # both at once is a usage error (with a bundle saying so)
    proc = subprocess.run(cmd + ["--out-dir", "x"], cwd=str(work), capture_output=True, text=True, timeout=60, env=env)
    bundle, why = host_view(proc)
    assert proc.returncode == 3 and "not both" in bundle["launch"]["error"]
