"""The output-dir contract shared by the rank launcher, the rank boot and the probe plugin.

Every file the sides exchange is named here, so the launcher, the plugin and the README cannot
drift apart. Stdlib only, and no imports at module level beyond `os`: the launcher imports this
before it starts the ranks, and every import there adds to the wall time of every run.

Every file in the out dir can be created, replaced or linked by the code under test (it runs in
the ranks, in the same sandbox). So nothing here follows a symlink or opens a non-regular file:
opens use O_NOFOLLOW | O_NONBLOCK (a planted FIFO neither blocks nor is read) and check fstat;
temporary files get random names and are created with O_CREAT | O_EXCL (a planted name fails,
it is never written through).
"""

import os

# Environment variables the launcher sets for each rank (and the plugin reads).
OUT_DIR_ENV = "INFRADEV_OUT_DIR"
SKIP_FILE_ENV = "INFRADEV_SKIP_FILE"  # standalone use of the plugin only; the launcher uses the spec
SESSION_ENV = "INFRADEV_SESSION"
SPEC_ENV = "INFRADEV_RANK_SPEC"  # "fd:N" or a path: the rank boot's spec (popped by the boot)
SPEC_HEX_ENV = "INFRADEV_RANK_SPEC_HEX"  # torchrun path: the spec, hex, for infradev_rank_entry.py

LONGREPR_CAP = 8192

# Per-rank files (rank<r>.<suffix>) a probe writes for the host to judge; the launcher carries each
# whole in its result bundle (`attachments`). Written by python/host/infradev_differential.py.
ATTACHMENTS = ("differential.json",)

# The pytest arguments every rank gets before the run's own: the plugin records progress and
# results; the cache provider is off because N ranks would race on one .pytest_cache; a file that
# fails to import must not cost the tests of every other file (its error is reported in
# collection_errors).
PYTEST_PLUGIN_ARGS = ["-p", "infradev_probe.plugin", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
# `python -m pytest` + the above: how the ranks were started before the rank boot (benchmarks and
# the plugin's standalone tests still use it).
PYTEST_PREFIX = ["-m", "pytest"] + PYTEST_PLUGIN_ARGS
RANK_BOOT = "infradev_rank_boot.py"

# States the plugin writes into rank{r}.current.json.
STATE_CONFIGURED = "configured"  # pytest started; importing and collecting
STATE_COLLECTED = "collected"  # collection done, no test started yet
STATE_RUNNING = "running"
STATE_IDLE = "idle"
STATE_FINISHED = "finished"

_FILE_TYPE = 0o170000
_REGULAR = 0o100000
_OPEN_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def rank_file(out_dir, rank, suffix):
    """Path of one per-rank file: rank_file(d, 1, "results.jsonl") -> d/rank1.results.jsonl."""
    return os.path.join(out_dir, "rank%d.%s" % (rank, suffix))


def rank_name(rank, suffix):
    return "rank%d.%s" % (rank, suffix)


class NotRegular(OSError):
    """The name exists but is not a regular file (a link, FIFO, device, folder): never opened."""


def open_regular(name, flags, dir_fd=None, mode=0o644):
    """os.open that never follows a symlink (ELOOP), never blocks on a FIFO and returns only a
    regular file's descriptor (else NotRegular; the descriptor is closed)."""
    fd = os.open(name, flags | _OPEN_SAFE, mode, dir_fd=dir_fd)
    try:
        if os.fstat(fd).st_mode & _FILE_TYPE != _REGULAR:
            raise NotRegular("%s is not a regular file" % name)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_bytes(name, dir_fd=None, cap=64 << 20, offset=0, tail=False):
    """Up to `cap` bytes of a regular file from `offset` (tail=True: its last `cap` bytes after
    offset); None if it is absent, not regular or unreadable."""
    try:
        fd = open_regular(name, os.O_RDONLY, dir_fd)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(offset, size - cap) if tail else offset
        chunks, left = [], cap
        while left > 0:
            chunk = os.pread(fd, min(left, 1 << 20), start)
            if not chunk:
                break
            chunks.append(chunk)
            start += len(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def file_size(name, dir_fd=None):
    """Size of a regular file (not following links), 0 if absent or not regular."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return 0
    return st.st_size if st.st_mode & _FILE_TYPE == _REGULAR else 0


def open_append(name, dir_fd=None):
    """A descriptor appending to a regular file, created if absent. A name that is something else
    (a planted link or FIFO) is removed first (unlink removes the link, not its target)."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        return open_regular(name, flags, dir_fd)
    except OSError:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        return open_regular(name, flags | os.O_EXCL, dir_fd)


def write_atomic(name, data, dir_fd=None):
    """Write bytes so a concurrent reader sees the old or the new file, never half of one. The
    temporary file has a random name and is created O_EXCL | O_NOFOLLOW (a name planted in advance
    makes the write fail, it is never written through); rename replaces a planted link itself."""
    head, tail = os.path.split(name)
    tmp = os.path.join(head, "%s.tmp-%s" % (tail, os.urandom(6).hex()))
    fd = open_regular(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp, dir_fd)
        raise
    os.close(fd)
    try:
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        _unlink_quietly(tmp, dir_fd)
        raise


def _unlink_quietly(name, dir_fd):
    try:
        os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def is_temp_name(name):
    return ".tmp-" in name


def write_json_atomic(path, obj, dir_fd=None):
    import json  # in each function, not at import: the launcher loads it after starting the ranks

    write_atomic(path, json.dumps(obj, indent=None, separators=(",", ":"), default=str).encode("utf-8"), dir_fd)


def read_json(path, default=None, dir_fd=None, cap=64 << 20):
    import json

    data = read_bytes(path, dir_fd, cap)
    if data is None:
        return default
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return default


def jsonl_dicts(data):
    """The JSON objects of JSON-lines bytes; a line cut short by a kill mid-write (or not an object)
    is dropped."""
    import json

    records = []
    for line in (data or b"").split(b"\n"):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(rec, dict):
            records.append(rec)
    return records


def cap_text(text, limit=LONGREPR_CAP):
    """Keep the head and the tail of a long text (a traceback's end holds the assertion)."""
    if text is None:
        return ""
    if not isinstance(text, str):
        text = str(text)
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    return "%s\n[... %d chars omitted ...]\n%s" % (text[:head], len(text) - limit, text[-tail:])


# The rank spec: what the launcher hands the rank boot, outside argv and the environment (so
# /proc/<rank>/cmdline shows no test paths). Records separated by NUL, each "<key>:<value>"; argv
# strings and pytest node ids cannot hold NUL. Hand-rolled rather than JSON because the launcher
# writes it before the ranks start, and importing json there costs a few ms of every run.
_SPEC_MAGIC = "infradev-rank-spec-1"
_SPEC_LISTS = {"a": "args", "p": "plugins", "s": "skip", "f": "stop_on_fail"}
_SPEC_VALUES = {"o": "out_dir", "n": "session"}


def encode_spec(args, plugins=(), skip=(), out_dir="", session=0, stop_on_fail=()):
    parts = [_SPEC_MAGIC, "o:" + out_dir, "n:%d" % session]
    parts += ["a:" + a for a in args]
    parts += ["p:" + p for p in plugins]
    parts += ["s:" + s for s in skip]
    parts += ["f:" + f for f in stop_on_fail]
    for part in parts:
        if "\0" in part:
            raise ValueError("a rank spec value holds a NUL byte: %r" % part)
    return "\0".join(parts).encode("utf-8", "surrogateescape")


def decode_spec(data):
    parts = data.decode("utf-8", "surrogateescape").split("\0")
    if not parts or parts[0] != _SPEC_MAGIC:
        raise ValueError("not an infradev rank spec")
    spec = {"args": [], "plugins": [], "skip": [], "stop_on_fail": [], "out_dir": "", "session": 0}
    for part in parts[1:]:
        key, sep, value = part.partition(":")
        if not sep:
            raise ValueError("bad rank spec record %r" % part)
        if key in _SPEC_LISTS:
            spec[_SPEC_LISTS[key]].append(value)
        elif key in _SPEC_VALUES:
            spec[_SPEC_VALUES[key]] = int(value) if key == "n" else value
        else:
            raise ValueError("bad rank spec record %r" % part)
    return spec


def spec_fd(data):
    """A read-only descriptor holding `data` at offset 0, for a rank's stdin: a sealed memfd (never
    in any folder; no one can change it), or where memfd_create is refused an unlinked temporary
    file. The caller closes it after starting the rank."""
    try:
        fd = os.memfd_create("infradev-rank-spec", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        import tempfile

        fd, path = tempfile.mkstemp(prefix="infradev-spec-")
        os.unlink(path)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, os.SEEK_SET)
        try:
            import fcntl

            # F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, 0x1 | 0x2 | 0x4 | 0x8)
        except (ImportError, AttributeError, OSError):
            pass  # the temporary-file fallback (no seals): unlinked, so out of reach anyway
    except BaseException:
        os.close(fd)
        raise
    return fd


def junit_name(rank, session):
    """pytest's own --junitxml report of one rank in one session (a restart writes a new one)."""
    return "rank%d.session%d.pytest.xml" % (rank, session)
