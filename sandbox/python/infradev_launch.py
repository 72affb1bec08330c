#!/usr/bin/env python3
"""Runs one pytest session on N ranks; see sandbox/python/README.md for the CLI and output files.

    python3 infradev_launch.py --nproc 2 --out-dir OUT --per-test-timeout 60 -- tests/ -q
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from infradev_launcher.main import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
