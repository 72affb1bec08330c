"""One rank under torchrun: `infradev_rank_entry.py OUT_DIR -- <pytest args>`.

torchrun hides its workers' pids and exit codes from whoever started it, so this wrapper sends the
rank's output to OUT_DIR/rank{RANK}.log, records the pytest process in rank{RANK}.entry.json and its
exit code in rank{RANK}.exit.json, for the launcher's crash detection.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from infradev_outputs import PYTEST_PREFIX, rank_file, write_json_atomic  # noqa: E402


def main(argv):
    out_dir = argv[0]
    pytest_args = argv[2:] if len(argv) > 1 and argv[1] == "--" else argv[1:]
    rank = int(os.environ.get("RANK", "0"))
    log = open(rank_file(out_dir, rank, "log"), "ab")
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    child = subprocess.Popen([sys.executable] + PYTEST_PREFIX + pytest_args, stdin=subprocess.DEVNULL)
    write_json_atomic(rank_file(out_dir, rank, "entry.json"), {"rank": rank, "entry_pid": os.getpid(), "pytest_pid": child.pid})

    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    code = child.wait()
    write_json_atomic(rank_file(out_dir, rank, "exit.json"), {"rank": rank, "code": code, "at": time.time()})
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
