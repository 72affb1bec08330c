"""Helpers for the launcher / probe tests: write scratch pytest files, run the real launcher on them."""

import json
import os
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SANDBOX_PY = os.path.join(REPO, "python", "sandbox")
LAUNCHER = os.path.join(SANDBOX_PY, "infradev_launch.py")

# Scratch test files share this fixture: one gloo process group per module, torn down with a barrier
# so no rank leaves while another still needs it.
PG_FIXTURE = '''
import os
import pytest
import torch
import torch.distributed as dist


@pytest.fixture(scope="module", autouse=True)
def pg():
    dist.init_process_group("gloo")
    yield
    dist.barrier()
    dist.destroy_process_group()
'''


# Rank 1 blocks in a recv rank 0 never sends; rank 0 goes on to test_after's all_reduce (a hang and,
# for the desync detector, two ranks in different collectives).
HANGING = PG_FIXTURE + '''

def test_before():
    t = torch.ones(2)
    dist.all_reduce(t)


def test_hang():
    t = torch.ones(2)
    if dist.get_rank() == 1:
        dist.recv(t, src=0)  # rank 0 never sends: rank 1 blocks forever


def test_after():
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size()
'''

BUNDLE_PREFIX = "INFRADEV-BUNDLE "


def parse_bundle(stdout):
    """The launcher's result bundle: the last non-empty stdout line, the only one with the prefix."""
    lines = [l for l in stdout.splitlines() if l.strip()]
    bundles = [l for l in lines if l.startswith(BUNDLE_PREFIX)]
    assert len(bundles) == 1 and lines[-1] == bundles[0], "expected exactly one bundle, last: %r" % lines[-3:]
    return json.loads(bundles[0][len(BUNDLE_PREFIX):])


class LaunchRun:
    """One launcher run, seen as the host sees it: through the bundle on its stdout."""

    def __init__(self, out_dir, proc, elapsed_s):
        self.out_dir = out_dir
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.elapsed_s = elapsed_s
        self.bundle = parse_bundle(proc.stdout)
        self.launch = dict(self.bundle["launch"], collected=self.bundle["collected"])
        self.integrity = self.bundle["integrity"]

    def records(self, rank):
        """{nodeid: record} of one rank, from the bundle."""
        [entry] = [r for r in self.bundle["ranks"] if r["rank"] == rank]
        return {rec["nodeid"]: rec for rec in entry["records"]}

    def junit(self, rank):
        """{nodeid: (outcome, message)} of one rank, from the bundle."""
        return {nodeid: (rec["outcome"], rec["message"]) for nodeid, rec in self.records(rank).items()}

    def file_junit(self, rank):
        """{nodeid: (outcome, message)} from the rank{rank}.xml the launcher leaves for the agent."""
        root = ET.parse(os.path.join(self.out_dir, "rank%d.xml" % rank)).getroot()
        cases = {}
        for case in root.iter("testcase"):
            outcome, message = "passed", ""
            for tag, name in (("failure", "failed"), ("error", "error"), ("skipped", "skipped")):
                child = case.find(tag)
                if child is not None:
                    outcome, message = name, child.get("message", "")
            cases[case.get("name")] = (outcome, message)
        return cases

    def log_text(self, name):
        return next((l["text"] for l in self.bundle["logs"] if l["name"] == name), None)

    def probe(self, rank):
        return read_json(os.path.join(self.out_dir, "rank%d.probe.json" % rank))

    def log(self, rank):
        with open(os.path.join(self.out_dir, "rank%d.log" % rank), encoding="utf-8", errors="replace") as f:
            return f.read()


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def processes_mentioning(marker):
    """pids of live processes whose command line contains `marker` (a /proc scan; no psutil)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(name), cmdline))
    return found


@pytest.fixture
def scratch(tmp_path):
    """scratch(files, nproc, *launcher_args) -> LaunchRun: writes the files into a fresh folder and
    runs the launcher there on them."""

    def run(files, nproc, *launcher_args, timeout=240):
        work = tmp_path / "work"
        work.mkdir(exist_ok=True)
        for name, body in files.items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(textwrap.dedent(body))
        out_dir = str(tmp_path / "out")
        cmd = [sys.executable, LAUNCHER, "--nproc", str(nproc), "--out-dir", out_dir] + list(launcher_args)
        if "--" not in launcher_args:
            cmd += ["--", "-q"] + sorted(n for n in files if n.startswith("test_"))
        t0 = time.monotonic()
        proc = subprocess.run(cmd, cwd=str(work), capture_output=True, text=True, timeout=timeout)
        return LaunchRun(out_dir, proc, time.monotonic() - t0)

    return run
