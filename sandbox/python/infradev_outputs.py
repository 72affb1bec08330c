"""The output-dir contract shared by the rank launcher and the probe plugin.

Every file the two sides exchange is named here, so the launcher, the plugin and the README cannot
drift apart. Stdlib only: the launcher imports this without importing torch or pytest.
"""

import os

# Environment variables the launcher sets for each rank (and the plugin reads).
OUT_DIR_ENV = "INFRADEV_OUT_DIR"
SKIP_FILE_ENV = "INFRADEV_SKIP_FILE"
SESSION_ENV = "INFRADEV_SESSION"

LONGREPR_CAP = 8192

# What every rank runs after the interpreter: the plugin records progress and results; the cache
# provider is off because N ranks would race on one .pytest_cache; a file that fails to import must
# not cost the tests of every other file (its error is reported in collection_errors).
PYTEST_PREFIX = ["-m", "pytest", "-p", "infradev_probe.plugin", "-p", "no:cacheprovider", "--continue-on-collection-errors"]

# States the plugin writes into rank{r}.current.json.
STATE_CONFIGURED = "configured"  # pytest started; importing and collecting
STATE_COLLECTED = "collected"  # collection done, no test started yet
STATE_RUNNING = "running"
STATE_IDLE = "idle"
STATE_FINISHED = "finished"


def rank_file(out_dir, rank, suffix):
    """Path of one per-rank file: rank_file(d, 1, "results.jsonl") -> d/rank1.results.jsonl."""
    return os.path.join(out_dir, "rank%d.%s" % (rank, suffix))


def write_json_atomic(path, obj):
    """Write JSON so a concurrent reader sees either the old or the new file, never half of one."""
    import json  # in each function, not at import: the launcher loads it after starting the ranks

    tmp = "%s.tmp%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=None, separators=(",", ":"), default=str)
    os.replace(tmp, path)


def read_json(path, default=None):
    import json

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return default


def read_jsonl(path):
    """Records of a JSON-lines file; a line cut short by a kill mid-write is dropped."""
    import json

    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    records.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return records


def cap_text(text, limit=LONGREPR_CAP):
    """Keep the head and the tail of a long text (a traceback's end holds the assertion)."""
    if text is None:
        return ""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return "%s\n[... %d chars omitted ...]\n%s" % (text[:head], len(text) - limit, text[-tail:])
