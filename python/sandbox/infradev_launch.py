#!/usr/bin/env python3
"""Runs one pytest session on N ranks; see python/sandbox/README.md for the CLI and output files.

    python3 -S infradev_launch.py --nproc 2 --out-dir OUT --per-test-timeout 60 -- tests/ -q

The launcher needs the standard library only: -S (no site-packages scan, ~6 ms) is optional and
is how runRanks starts it; the ranks themselves run with the full interpreter.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from infradev_launcher.main import main  # noqa: E402

if __name__ == "__main__":
    code = main()
    # Every report is written and closed by now: skip the interpreter's teardown (~6 ms, paid by
    # every run), not anything of the run's.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
