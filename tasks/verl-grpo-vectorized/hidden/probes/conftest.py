"""The probes import verl from the repository root (the folder holding verl/), whatever folder the
grader places them in. Group statistics are checked on CPU (the device policy picks CPU under pytest;
VERL_FORCE_DEVICE is pinned so that a session that set it elsewhere cannot move them)."""

import os
import sys
from pathlib import Path

os.environ["VERL_FORCE_DEVICE"] = "cpu"

REPO_ROOT = next((p for p in Path(__file__).resolve().parents if (p / "verl").is_dir()), None)
if REPO_ROOT is not None and str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
