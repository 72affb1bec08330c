"""One rank under torchrun: `infradev_rank_entry.py` (torchrun's worker script).

torchrun hides its workers' pids and exit codes from whoever started it, and closes every
descriptor but 0-2 of its workers. So the launcher hands the rank spec to the torchrun agent in
INFRADEV_RANK_SPEC_HEX; this wrapper pops it, adds this rank's --junitxml, and starts the rank boot
(`python -s infradev_rank_boot.py`, see there) with the spec on its stdin (a sealed memfd). It sends
the rank's output to OUT_DIR/rank{RANK}.log, records the pytest process in rank{RANK}.entry.json
and its exit code in rank{RANK}.exit.json, for the launcher's crash detection.
"""

import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from infradev_outputs import (  # noqa: E402
    RANK_BOOT, SPEC_ENV, SPEC_HEX_ENV, decode_spec, encode_spec, junit_name, open_append, rank_file, spec_fd, write_json_atomic,
)


def main(argv):
    if argv:
        sys.stderr.write("infradev_rank_entry.py: takes no arguments (the spec is in %s)\n" % SPEC_HEX_ENV)
        return 2
    hex_spec = os.environ.pop(SPEC_HEX_ENV, None)
    if not hex_spec:
        sys.stderr.write("infradev_rank_entry.py: %s is not set\n" % SPEC_HEX_ENV)
        return 2
    spec = decode_spec(bytes.fromhex(hex_spec))
    out_dir = spec["out_dir"]
    rank = int(os.environ.get("RANK", "0"))
    args = spec["args"] + ["--junitxml=" + os.path.join(out_dir, junit_name(rank, spec["session"]))]
    data = encode_spec(args, spec["plugins"], spec["skip"], out_dir, spec["session"])
    log = open_append(rank_file(out_dir, rank, "log"))
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    stdin = spec_fd(data)
    env = dict(os.environ, **{SPEC_ENV: "fd:0"})
    boot = os.path.join(os.path.dirname(os.path.abspath(__file__)), RANK_BOOT)
    try:
        child = subprocess.Popen([sys.executable, "-s", boot], stdin=stdin, env=env)
    finally:
        os.close(stdin)
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
