"""The launcher's command line and its run: sessions, restarts after a hang or crash, launch.json,
and the result bundle, the last line of its stdout (bundle.py)."""

import _signal  # the C module: `signal` builds its enums at import (~8 ms before the ranks start)
import os
import sys
import time

from infradev_outputs import is_temp_name, write_json_atomic

from . import procs
from .session import Progress, run_session

# Exit codes; each goes with exactly one launch status, and every one of them comes with a bundle.
EXIT_CODES = {"ok": 0, "tests_failed": 1, "fail_fast": 1, "hang": 2, "crash": 2, "run_timeout": 2, "interrupted": 2, "launch_error": 3}
NONCE_ENV = "INFRADEV_BUNDLE_NONCE"
USAGE = (
    "infradev_launch.py --nproc N --out-dir DIR [--per-test-timeout SEC] [--run-timeout SEC] [--grace SEC] "
    "[--launcher builtin|torchrun] [--no-continue] [--plugin NAME]... [--stop-on-fail NODEID]... -- <pytest args...>"
)


class UsageError(Exception):
    pass


class OutDirError(OSError):
    pass


class StopFlag:
    """Set by SIGTERM / SIGINT (the handler runs in the main thread); the session loop polls it,
    kills the ranks and still reports."""

    def __init__(self):
        self.signum = None

    def set(self, signum):
        self.signum = signum

    def is_set(self):
        return self.signum is not None

    @property
    def reason(self):
        import signal

        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return "signal %s" % self.signum


def _positive(text):
    value = float(text)
    if not value > 0:
        raise ValueError("must be > 0 (got %s)" % text)
    return value


def _non_negative(text):
    value = float(text)
    if not value >= 0:
        raise ValueError("must be >= 0 (got %s)" % text)
    return value


def _nproc(text):
    value = int(text)
    if value < 1:
        raise ValueError("must be an integer >= 1 (got %s)" % text)
    return value


def _plugin(text):
    if not text or text.startswith("-") or "\0" in text:
        raise ValueError("must be a plugin module name (got %r)" % text)
    return text


def _nodeid(text):
    if not text or "\0" in text:
        raise ValueError("must be a pytest node id (got %r)" % text)
    return text


def _launcher(text):
    if text not in ("builtin", "torchrun"):
        raise ValueError("must be builtin or torchrun (got %s)" % text)
    return text


# The launcher's options, once: (flag, destination, convert or None for a switch, default, help).
# A switch stores `not default`. Required options have the default REQUIRED; a default of APPEND
# makes a repeatable option collecting a list.
REQUIRED = object()
APPEND = object()
OPTIONS = (
    ("--nproc", "nproc", _nproc, REQUIRED, "number of ranks"),
    ("--out-dir", "out_dir", str, None, "folder for logs, JUnit XML and JSON results (required, here or in the launch spec)"),
    ("--per-test-timeout", "per_test_timeout", _positive, 300.0, "seconds one test may run on a rank (default 300)"),
    ("--run-timeout", "run_timeout", _positive, 3600.0, "seconds the whole run may take (default 3600)"),
    ("--desync-after", "desync_after", _non_negative, 10.0, "seconds every rank may stay blocked in different collective calls before the session is stopped as a hang (default 10; 0: wait for the per-test limit)"),
    ("--startup-timeout", "startup_timeout", _positive, 600.0, "seconds a rank may take to start pytest and collect (default 600)"),
    ("--grace", "grace", _positive, 5.0, "seconds the other ranks get after one exits mid-session (default 5)"),
    ("--kill-grace", "kill_grace", _positive, 2.0, "seconds between SIGTERM and SIGKILL (default 2)"),
    ("--launcher", "launcher", _launcher, "builtin", "builtin (default) or torchrun"),
    ("--no-fallback", "no_fallback", None, False, "with --launcher torchrun: a broken torchrun is a launch error"),
    ("--no-continue", "cont", None, True, "stop after a hang or crash"),
    ("--max-restarts", "max_restarts", int, 20, "restarts after hangs / crashes (default 20)"),
    ("--python", "python", str, sys.executable, "interpreter for the ranks (default: this one)"),
    ("--plugin", "plugins", _plugin, APPEND, "a pytest plugin every rank loads (-p NAME; repeatable)"),
    ("--remove-out-dir", "remove_out_dir", None, False, "empty the out dir once the bundle is built (the next session's code cannot read this one's logs)"),
    ("--stop-on-fail", "stop_on_fail", _nodeid, APPEND, "a test id whose failure, error or skip on any rank stops the run there: status fail_fast, the tests not reached missing (repeatable)"),
)


class Config:
    """The parsed command line (attributes named by OPTIONS' destinations, plus pytest_args)."""

    def __init__(self, **values):
        self.__dict__.update(values)


def _parse_plain(own):
    """The common case without argparse, whose import (with shutil, for the help formatter) is about
    a third of the launcher's own start-up, and that start-up adds to every run. Anything this does
    not fully understand (help, an abbreviation, a bad value, a missing option) returns None and
    goes to argparse, which then gives the usual messages."""
    by_flag = {o[0]: o for o in OPTIONS}
    values = {}
    i = 0
    while i < len(own):
        arg = own[i]
        flag, eq, inline = arg.partition("=")
        option = by_flag.get(flag)
        if option is None:
            return None
        _, dest, convert, default, _ = option
        if convert is None:
            if eq:
                return None
            values[dest] = not default
            i += 1
            continue
        if eq:
            text = inline
        elif i + 1 < len(own):
            text = own[i + 1]
            i += 1
        else:
            return None
        try:
            value = convert(text)
        except ValueError:
            return None
        if default is APPEND:
            values.setdefault(dest, []).append(value)
        else:
            values[dest] = value
        i += 1
    for _, dest, _, default, _ in OPTIONS:
        if dest not in values:
            if default is REQUIRED:
                return None
            values[dest] = [] if default is APPEND else default
    return Config(**values)


def _parse_argparse(own):
    import argparse

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            raise UsageError(message)

    def typed(convert):
        def run(text):
            try:
                return convert(text)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc))
        run.__name__ = convert.__name__.strip("_")
        return run

    parser = Parser(prog="infradev_launch.py", usage=USAGE, add_help=True)
    for flag, dest, convert, default, text in OPTIONS:
        if convert is None:
            parser.add_argument(flag, dest=dest, action="store_false" if default else "store_true", help=text)
        elif default is REQUIRED:
            parser.add_argument(flag, dest=dest, type=typed(convert), required=True, help=text)
        elif default is APPEND:
            parser.add_argument(flag, dest=dest, type=typed(convert), action="append", default=[], help=text)
        else:
            parser.add_argument(flag, dest=dest, type=typed(convert), default=default, help=text)
    try:
        return Config(**vars(parser.parse_args(own)))
    except ValueError as exc:
        raise UsageError(str(exc))


LAUNCH_SPEC_ENV = "INFRADEV_LAUNCH_SPEC_HEX"


def launch_spec(environ):
    """The out dir, pytest args and plugins runRanks passes in the environment (hex of the rank-spec
    format, infradev_outputs.encode_spec) rather than in argv: /proc/<pid>/cmdline is readable by
    every process of the sandbox, /proc/<pid>/environ not once the launcher is non-dumpable. Popped."""
    from infradev_outputs import decode_spec

    text = environ.pop(LAUNCH_SPEC_ENV, None)
    if text is None:
        return None
    try:
        return decode_spec(bytes.fromhex(text))
    except ValueError as exc:
        raise UsageError("%s: %s" % (LAUNCH_SPEC_ENV, exc))


def parse_args(argv, spec=None):
    if "--" in argv:
        cut = argv.index("--")
        own, pytest_args = argv[:cut], argv[cut + 1:]
    else:
        own, pytest_args = argv, []
    cfg = _parse_plain(own) or _parse_argparse(own)
    if spec is not None:
        if pytest_args or cfg.out_dir is not None:
            raise UsageError("give the out dir and pytest args either on the command line or in %s, not both" % LAUNCH_SPEC_ENV)
        cfg.out_dir = spec["out_dir"] or None
        pytest_args = spec["args"]
        try:
            cfg.plugins = list(cfg.plugins) + [_plugin(p) for p in spec["plugins"]]
        except ValueError as exc:
            raise UsageError("%s: plugin %s" % (LAUNCH_SPEC_ENV, exc))
        cfg.stop_on_fail = list(cfg.stop_on_fail) + spec["stop_on_fail"]
    if cfg.out_dir is None:
        raise UsageError("the following arguments are required: --out-dir")
    cfg.pytest_args = pytest_args
    cfg.out_dir_arg = cfg.out_dir
    cfg.out_dir = os.path.abspath(cfg.out_dir)
    cfg.out_fd = None
    return cfg


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_out_dir(path):
    """A descriptor of the out dir, created as needed, every later access relative to it. No
    component may be a symlink (the code under test could plant one to send the launcher's files
    elsewhere): a relative path is walked from the cwd, an absolute one from /, each component opened
    with O_NOFOLLOW (runRanks passes a path relative to the cwd, so only the workspace's own
    folders are checked)."""
    fd = os.open("/" if os.path.isabs(path) else ".", _DIR_FLAGS)
    try:
        for part in path.split("/"):
            if part in ("", "."):
                continue
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                try:
                    nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise OutDirError("out dir %s: cannot use %r: %s" % (path, part, exc.strerror or exc))
            except OSError as exc:
                raise OutDirError("out dir %s: %r is a symlink or not a folder (%s); refusing to use it" % (path, part, exc.strerror or exc))
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _stale(name):
    """Files of an earlier run in the out dir: rank<digit>....<ext>, launch.json, torchrun.log, skip.json,
    temporary files."""
    if name in ("launch.json", "torchrun.log", "skip.json") or is_temp_name(name):
        return True
    return name.startswith("rank") and name[4:5].isdigit() and "." in name


def _prepare_out_dir(cfg):
    fd = cfg.out_fd
    for name in os.listdir(fd):
        if _stale(name):
            try:
                os.unlink(name, dir_fd=fd)  # a planted link goes itself; its target stays untouched
            except FileNotFoundError:
                pass
            except IsADirectoryError:
                try:
                    os.rmdir(name, dir_fd=fd)
                except OSError:
                    pass


def _skip_after(per_rank, events):
    """Tests a restart leaves out: finished on every rank, plus each test that hung or crashed."""
    finished = set.intersection(*(set(r) for r in per_rank)) if per_rank else set()
    culprits = {e["test"] for e in events if e["kind"] in ("hang", "crash") and e.get("test")}
    return finished | culprits


def _collected_ids(result):
    first = next((c for c in result.collected if c), None)
    if not first:
        return []
    return list(first.get("ids", [])) + list(first.get("deselected_by_skip_list", []))


def _status(sessions, events, launch_error, summary, collection_errors):
    if launch_error:
        return "launch_error"
    for kind in ("interrupted", "run_timeout"):
        if any(e["kind"] == kind for e in events):
            return kind
    if events:
        return events[0]["kind"]
    last = sessions[-1]
    if summary["failed"] or summary["error"] or collection_errors or any(c not in (0, 5) for c in last.exit_codes):
        return "tests_failed"
    return "ok"


def run(cfg, stop):
    """The whole run; returns (launch summary, the bundle's other parts)."""
    t_launch = time.monotonic()
    run_deadline = t_launch + cfg.run_timeout
    _prepare_out_dir(cfg)
    launcher = cfg.launcher
    sessions, events, notes = [], [], []
    launch_error = None
    skip = set()
    collected, collection_errors, collection_skips = None, [], []
    progress = Progress()
    while True:
        result = run_session(cfg, len(sessions), launcher, skip, stop, run_deadline, t_launch, progress)
        from . import report  # loaded by run_session while the ranks started, not before them
        if result.start_failure:
            if cfg.no_fallback:
                launch_error = result.start_failure
                sessions.append(result)
                break
            notes.append(result.start_failure + "; fell back to the built-in launcher")
            launcher = "builtin"
            continue
        sessions.append(result)
        result.killed = report.killed_records(result, cfg)
        if collected is None:
            collected = _collected_ids(result)
            collection_errors = next((c.get("errors", []) for c in result.collected if c), [])
            collection_skips = next((c.get("skipped", []) for c in result.collected if c), [])
        if result.launch_error:
            launch_error = result.launch_error
            break
        event = result.event
        if event is None:
            break
        events.append(event)
        if event["kind"] not in ("hang", "crash") or not cfg.cont or not event.get("test"):
            break
        if stop.is_set():
            break
        if len(sessions) > cfg.max_restarts:
            notes.append("stopped after %d restarts (--max-restarts)" % cfg.max_restarts)
            break
        skip = _skip_after(report.rank_records(cfg.nproc, sessions), events)
        if not [t for t in _collected_ids(result) if t not in skip]:
            break
    from . import integrity

    per_rank = report.rank_records(cfg.nproc, sessions)
    for rank, records in enumerate(per_rank):
        try:
            report.write_junit(cfg, rank, records)
            report.write_probe_json(cfg, rank, records)
        except OSError as exc:  # for the agent only; the host has the bundle
            notes.append("could not write rank%d.xml / rank%d.probe.json: %s" % (rank, rank, exc))
    summary = report.merged_summary(per_rank, collected or [])
    status = _status(sessions, events, launch_error, summary, collection_errors)
    survivors = sum(s.survivors for s in sessions)
    if survivors:
        notes.append("%d processes could not be killed" % survivors)
    launch = {
        "launcher": sessions[-1].launcher if sessions else launcher,
        "launcher_requested": cfg.launcher,
        "nproc": cfg.nproc,
        "status": status,
        "exit_codes": sessions[-1].exit_codes if sessions else [],
        "duration_s": round(time.monotonic() - t_launch, 3),
        "restarts": max(0, len(sessions) - 1),
        "events": events,
        "collected": collected or [],
        "collection_errors": collection_errors,
        "collection_skips": collection_skips[:100],
        "summary": summary,
        "sessions": [s.summary() for s in sessions],
        "error": launch_error,
        "notes": notes,
        "pytest_args": cfg.pytest_args,
        "plugins": cfg.plugins,
        "per_test_timeout_s": cfg.per_test_timeout,
        "run_timeout_s": cfg.run_timeout,
        "hardening": dict(procs.HARDENING),
    }
    try:
        write_json_atomic("launch.json", launch, cfg.out_fd)
    except OSError as exc:
        launch["notes"].append("could not write launch.json: %s" % exc)
    known = set(collected or []) | {i for recs in per_rank for i in recs}
    checks = integrity.integrity(cfg, sessions, known)
    return launch, {"collected": collected or [], "per_rank": per_rank, "integrity": checks, "logs": _bundle_logs(cfg), "attachments": _bundle_attachments(cfg)}


def _bundle_logs(cfg):
    """(name, bytes) of the logs the host keeps as artifacts: each file's tail only."""
    from infradev_outputs import rank_name, read_bytes

    from .bundle import CAPS

    cap = CAPS["log_tail_bytes"]
    out = []
    for rank in range(cfg.nproc):
        for suffix in ("log", "stacks.txt"):
            data = read_bytes(rank_name(rank, suffix), cfg.out_fd, cap=cap, tail=True)
            if data:
                out.append((rank_name(rank, suffix), data))
    data = read_bytes("torchrun.log", cfg.out_fd, cap=cap, tail=True)
    if data:
        out.append(("torchrun.log", data))
    return out


def _bundle_attachments(cfg):
    """(rank, name, bytes) of the records probes wrote for the host to judge (ATTACHMENTS), each whole
    (a file over its cap is left out, never cut: the host then reads its records as missing)."""
    from infradev_outputs import ATTACHMENTS, rank_name, read_bytes

    from .bundle import CAPS

    out = []
    for rank in range(cfg.nproc):
        for suffix in ATTACHMENTS:
            data = read_bytes(rank_name(rank, suffix), cfg.out_fd, cap=CAPS["attachments_bytes"] + 1)
            if data is not None and len(data) <= CAPS["attachments_bytes"]:
                out.append((rank, suffix, data))
    return out


def _one_line(launch, out_dir):
    status = launch["status"]
    s = launch["summary"]
    counts = "%d passed, %d failed, %d errors, %d skipped of %d on %d ranks" % (
        s["passed"], s["failed"], s["error"], s["skipped"], s["total"], launch["nproc"])
    if status == "launch_error":
        return "infradev_launch: launch error: %s" % launch["error"]
    if launch["events"]:
        return "infradev_launch: %s: %s; %s (%s)" % (status, launch["events"][0]["detail"], counts, out_dir)
    return "infradev_launch: %s: %s in %.1f s" % (status, counts, launch["duration_s"])


def _launch_error(nproc, launcher, message):
    return {
        "launcher": launcher, "launcher_requested": launcher, "nproc": nproc, "status": "launch_error",
        "exit_codes": [], "duration_s": 0.0, "restarts": 0, "events": [], "collected": [],
        "collection_errors": [], "summary": None, "sessions": [], "error": message, "notes": [],
        "hardening": dict(procs.HARDENING),
    }


def _write_launch_error(out_dir, out_fd, launch):
    """launch.json for a run that never started, for the agent (the host has the bundle)."""
    if not out_dir and out_fd is None:
        return  # no out dir given, or it could not be opened: nowhere safe to write
    try:
        fd = out_fd if out_fd is not None else open_out_dir(out_dir)
        try:
            write_json_atomic("launch.json", launch, fd)
        finally:
            if out_fd is None:
                os.close(fd)
    except OSError:
        pass


def empty_out_dir(cfg):
    """Remove everything in the out dir (never following a link: entries are unlinked relative to
    its descriptor, folders removed with shutil.rmtree's descriptor-based walk)."""
    fd = cfg.out_fd
    if fd is None:
        return
    import shutil

    for name in os.listdir(fd):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            if st.st_mode & 0o170000 == 0o040000:
                shutil.rmtree(name, dir_fd=fd)
            else:
                os.unlink(name, dir_fd=fd)
        except OSError:
            pass


def print_bundle(line):
    """The bundle goes last on stdout, in one write, and nothing follows it."""
    out = sys.stdout
    out.flush()
    data = line.encode("ascii")
    fd = out.fileno()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _raw_option(argv, name):
    own = argv[:argv.index("--")] if "--" in argv else argv
    for i, arg in enumerate(own):
        if arg == name and i + 1 < len(own):
            return own[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    # The host's nonce for the bundle, out of the environment before anything is started.
    nonce = os.environ.pop(NONCE_ENV, "")
    procs.harden()  # non-dumpable + subreaper, before any rank exists
    from .bundle import bundle_line, minimal_bundle_line

    try:
        cfg = parse_args(argv, launch_spec(os.environ))
    except UsageError as exc:
        sys.stderr.write("infradev_launch: error: %s\nusage: %s\n" % (exc, USAGE))
        launch = _launch_error(None, _raw_option(argv, "--launcher") or "builtin", "usage: %s" % exc)
        _write_launch_error(_raw_option(argv, "--out-dir"), None, launch)
        print_bundle(minimal_bundle_line(nonce, launch))
        return EXIT_CODES["launch_error"]
    stop = StopFlag()
    for sig in (_signal.SIGTERM, _signal.SIGINT):
        _signal.signal(sig, lambda signum, _frame: stop.set(signum))
    try:
        cfg.out_fd = open_out_dir(cfg.out_dir_arg)
        launch, parts = run(cfg, stop)
    except OSError as exc:
        sys.stderr.write("infradev_launch: launch error: %s\n" % exc)
        launch = _launch_error(cfg.nproc, cfg.launcher, str(exc))
        _write_launch_error(None, cfg.out_fd, launch)
        print_bundle(minimal_bundle_line(nonce, launch))
        return EXIT_CODES["launch_error"]
    except Exception as exc:  # a launcher bug: say so in the bundle rather than print none
        import traceback

        traceback.print_exc()
        launch = _launch_error(cfg.nproc, cfg.launcher, "launcher failure: %r" % (exc,))
        _write_launch_error(None, cfg.out_fd, launch)
        print_bundle(minimal_bundle_line(nonce, launch))
        return EXIT_CODES["launch_error"]
    line = _one_line(launch, cfg.out_dir)
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    logs = parts["logs"] + [("launcher.txt", ("\n".join([line] + list(launch.get("notes") or [])) + "\n").encode("utf-8", "replace"))]
    try:
        text = bundle_line(nonce, launch, parts["collected"], parts["per_rank"], parts["integrity"], logs, parts["attachments"])
    except Exception as exc:  # noqa: BLE001 - still a bundle, saying why there are no records
        launch = _launch_error(cfg.nproc, cfg.launcher, "launcher failure while building the bundle: %r" % (exc,))
        text = minimal_bundle_line(nonce, launch)
    if cfg.remove_out_dir:
        empty_out_dir(cfg)
    print_bundle(text)
    return EXIT_CODES[launch["status"]]
