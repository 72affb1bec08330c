"""One session: start the ranks, watch their progress files, stop them on hang / crash / timeout."""

import json
import os
import sys
import time

from infradev_outputs import (
    STATE_CONFIGURED, STATE_FINISHED, STATE_IDLE, STATE_RUNNING, file_size, is_temp_name, junit_name, open_append,
    rank_name, read_bytes, read_json,
)

from . import hang as hang_explain
from .desync import DesyncWatch
from . import procs
from .ranks import start_ranks

POLL_S = 0.2
PYTEST_USAGE_ERROR = 4
STACK_WAIT_S = 1.0
# Files that describe one session only; results.jsonl, the logs and stacks.txt span the whole run.
PER_SESSION = ("current.json", "collected.json", "entry.json", "exit.json", "probe.json", "comm.json", "inflight")
PROGRESS_PREFIX = "INFRADEV-PROGRESS "


class Progress:
    """Tests done / total of the whole run, from rank 0's current.json, printed to stderr as
    `INFRADEV-PROGRESS {"done":n,"total":m}` whenever it changes (runRanks reads the stream). After a
    restart rank 0 runs only what is left: done = total - (left this session - done this session)."""

    def __init__(self, stream=None):
        self.total = None
        self.last = None
        self.stream = stream or sys.stderr

    def update(self, state):
        if not state or not isinstance(state.get("total"), int) or not isinstance(state.get("done"), int):
            return
        if self.total is None:
            self.total = state["total"]
        done = min(self.total, max(0, self.total - (state["total"] - state["done"])))
        if (done, self.total) != self.last:
            self.last = (done, self.total)
            self.stream.write('%s{"done":%d,"total":%d}\n' % (PROGRESS_PREFIX, done, self.total))
            self.stream.flush()


class SessionResult:
    def __init__(self, session, launcher, port):
        self.session = session
        self.launcher = launcher
        self.port = port
        self.exit_codes = []
        self.duration_s = 0.0
        self.event = None  # dict, see make_event
        self.final_states = []  # each rank's last rank{r}.current.json (None: the plugin never started)
        self.collected = []  # each rank's rank{r}.collected.json
        self.stacks = {}  # rank -> Python stacks dumped at a hang
        self.launch_error = None
        self.start_failure = None  # torchrun died before starting any rank
        self.survivors = 0
        self.skipped = 0
        self.ended_at = 0.0  # wall clock when the ranks were stopped (or had all exited)
        self.killed = {}  # rank -> {nodeid: record} of tests killed mid-run (report.killed_records)
        self.killed_ranks = []  # ranks still alive when the session was stopped (the launcher killed them)
        self.log_starts = []  # per rank: where this session's part of rank{r}.log starts
        self.log_ends = []  # per rank: ... and where it ends (its size once the session's processes are gone)
        self.results_starts = []  # per rank: size of rank{r}.results.jsonl before the session
        self.records = []  # per rank: every record the plugin wrote this session, in order (report.session_records)
        self.audit = []  # per rank: what its audit channel said (infradev_audit.parse_channel), None without one
        self.comm = []  # per rank: the collective totals the plugin wrote at the end (wire.read_comm), or None
        self.wire = None  # the kernel's count against the totals (wire.check)

    def summary(self):
        return {
            "session": self.session,
            "launcher": self.launcher,
            "port": self.port,
            "exit_codes": self.exit_codes,
            "duration_s": round(self.duration_s, 3),
            "skipped_from_earlier_sessions": self.skipped,
            "event": self.event["kind"] if self.event else None,
        }


def make_event(kind, rank, test, after_s, detail, session, t_launch, **extra):
    event = {
        "kind": kind,
        "rank": rank,
        "test": test,
        "after_s": round(after_s, 3),
        "detail": detail,
        "session": session,
        "at_s": round(time.monotonic() - t_launch, 3),
    }
    event.update(extra)
    return event


def describe_exit(code):
    if code is None:
        return "was killed"
    if code < 0:
        import signal

        try:
            return "was killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "was killed by signal %d" % -code
    return "exited with code %d" % code


def _unlink(name, dir_fd):
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        os.rmdir(name, dir_fd=dir_fd)  # a folder planted under a file's name: fails unless empty


def _clear_session_files(cfg, session):
    """Per-session files of the ranks (and anything planted under their names) go before a session."""
    fd = cfg.out_fd
    for rank in range(cfg.nproc):
        for suffix in PER_SESSION:
            _unlink(rank_name(rank, suffix), fd)
        _unlink(junit_name(rank, session), fd)
        for suffix in ("results.jsonl", "stacks.txt", "log"):
            name = rank_name(rank, suffix)
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if st.st_mode & 0o170000 != 0o100000:  # a link / FIFO planted under a file the run appends to
                _unlink(name, fd)
    for name in os.listdir(fd):
        if name.startswith("rank") and is_temp_name(name):
            try:
                os.unlink(name, dir_fd=fd)
            except OSError:
                pass


def clean_state(state):
    """A rank's current.json with typed fields, or None (the code under test can write anything there)."""
    if not isinstance(state, dict) or not isinstance(state.get("state"), str):
        return None
    out = {"state": state["state"]}
    nodeid = state.get("nodeid")
    out["nodeid"] = nodeid[:2048] if isinstance(nodeid, str) else None
    for key in ("since",):
        value = state.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) < 1e12:
            out[key] = float(value)
    for key in ("index", "done", "total", "pid", "session", "exitstatus", "tests"):
        value = state.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            out[key] = value
    return out


def _strings(value, cap=2048):
    return [v[:cap] for v in value if isinstance(v, str)] if isinstance(value, list) else []


def clean_collected(obj):
    """A rank's collected.json with typed fields, or None."""
    if not isinstance(obj, dict):
        return None
    errors = []
    for err in obj.get("errors") or []:
        if isinstance(err, dict):
            errors.append({k: (err.get(k) if isinstance(err.get(k), str) else "")[:8192] for k in ("nodeid", "file", "message")})
    skipped = []
    for skip in obj.get("skipped") or []:
        if isinstance(skip, dict):
            skipped.append({k: (skip.get(k) if isinstance(skip.get(k), str) else "")[:8192] for k in ("nodeid", "message")})
    return {"ids": _strings(obj.get("ids")), "deselected_by_skip_list": _strings(obj.get("deselected_by_skip_list")), "errors": errors,
            "skipped": skipped}


def _states(cfg):
    return [clean_state(read_json(rank_name(r, "current.json"), dir_fd=cfg.out_fd, cap=1 << 20)) for r in range(cfg.nproc)]


def _finished(state):
    return bool(state) and state.get("state") == STATE_FINISHED


def _all_collected(states, codes):
    """Every live rank is past import + collection (until then its peers wait for it legitimately)."""
    return all(c is not None or (s and s.get("state") != STATE_CONFIGURED) for s, c in zip(states, codes))


def _startup_hang(cfg, states, codes, now, started_wall, session, t_launch):
    if now - started_wall <= cfg.startup_timeout:
        return None
    slow = [r for r, (s, c) in enumerate(zip(states, codes)) if c is None and (not s or s.get("state") == STATE_CONFIGURED)]
    detail = "rank(s) %s did not finish starting pytest and collecting within %g s" % (", ".join(map(str, slow)), cfg.startup_timeout)
    return make_event("hang", slow[0] if slow else None, None, now - started_wall, detail, session, t_launch, ranks=slow)


def _find_hang(cfg, states, codes, now, ready_at, session, t_launch):
    """A hang event when some live rank is past the per-test limit, else None.

    The test blamed is the earliest (in run order) that any live rank is still running: ranks that
    went ahead are waiting for the ones left in it. It is blamed once it is itself past the limit,
    or once any rank has waited twice the limit (whatever the earliest test's own time). Time spent
    before every rank finished collecting (a first test waiting for a slow peer to start) is not
    counted against a test.
    """
    limit = cfg.per_test_timeout
    if limit is None:
        return None
    running, between = [], []
    for rank, (state, code) in enumerate(zip(states, codes)):
        if code is not None or not state:
            continue
        elapsed = now - max(float(state.get("since", now)), ready_at)
        if state.get("state") == STATE_RUNNING:
            index = state.get("index")
            running.append((index if index is not None else 1 << 30, -elapsed, rank, state.get("nodeid")))
        elif state.get("state") in (STATE_IDLE, STATE_FINISHED) and elapsed > limit:
            between.append((elapsed, rank, state.get("state")))
    if running:
        index, neg_elapsed, rank, test = min(running)
        longest = max(-r[1] for r in running)
        if -neg_elapsed <= limit and longest <= 2 * limit:
            return None
        stuck = sorted(r[2] for r in running if r[3] == test)
        detail = "%s did not finish within %g s on rank(s) %s" % (test, limit, ", ".join(map(str, stuck)))
        ahead = sorted(r[2] for r in running if r[3] != test)
        if ahead:
            detail += " (rank(s) %s went on to later tests and waited there)" % ", ".join(map(str, ahead))
        return make_event("hang", rank, test, -neg_elapsed, detail, session, t_launch, ranks=stuck)
    if between:
        elapsed, rank, state = max(between)
        if state == STATE_FINISHED:
            detail = "rank %d finished its session but did not exit within %g s" % (rank, limit)
        else:
            detail = "rank %d stayed between tests for more than %g s" % (rank, limit)
        return make_event("hang", rank, None, elapsed, detail, session, t_launch, ranks=[rank])
    return None


def _desync_hang(desync, states, codes, now, session, t_launch):
    """A hang event when every rank is stuck in a different collective call (desync.py), else None."""
    found = desync.check(states, codes, now)
    if found is None:
        return None
    rank, test, detail, stuck, stuck_for = found
    return make_event("hang", rank, test, stuck_for, detail, session, t_launch, ranks=stuck, desync=True)


def _earliest_running(states, codes):
    """(rank, nodeid) of the earliest test (in run order) a live rank is running; (None, None) if none."""
    running = [
        (s.get("index") if s.get("index") is not None else 1 << 30, float(s.get("since", 0)), r, s.get("nodeid"))
        for r, (s, c) in enumerate(zip(states, codes))
        if c is None and s and s.get("state") == STATE_RUNNING
    ]
    if not running:
        return None, None
    _index, _since, rank, test = min(running)
    return rank, test


STACKS_CAP = 256 << 10


def dump_stacks(cfg, pids, states, reason):
    """SIGUSR1 each live rank (its plugin registered faulthandler on it) and return what they dumped."""
    import signal

    fd = cfg.out_fd
    offsets = {}
    for rank, pid in enumerate(pids):
        if not pid or not states[rank]:
            continue
        name = rank_name(rank, "stacks.txt")
        try:
            out = open_append(name, fd)
        except OSError:
            continue
        try:
            os.write(out, ("\n===== infradev: stacks of rank %d (pid %d): %s =====\n" % (rank, pid, reason)).encode("utf-8", "replace"))
            offsets[rank] = os.fstat(out).st_size
        finally:
            os.close(out)
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            offsets.pop(rank)
    deadline = time.monotonic() + STACK_WAIT_S
    pending = set(offsets)
    while pending and time.monotonic() < deadline:
        time.sleep(0.05)
        pending = {r for r in pending if file_size(rank_name(r, "stacks.txt"), fd) <= offsets[r]}
    time.sleep(0.05)  # let a dump that has begun complete
    stacks = {}
    for rank, offset in offsets.items():
        data = read_bytes(rank_name(rank, "stacks.txt"), fd, cap=STACKS_CAP, offset=offset)
        stacks[rank] = (data or b"").decode("utf-8", "replace")
    return stacks


class FailWatch:
    """--stop-on-fail: what the ranks appended to rank{r}.results.jsonl since the session began, read
    a poll at a time; `check()` names the first listed test that finished failed, errored or skipped on
    some rank. Only task check's mutants ask for it (one failing case gold passes is all their verdict
    needs); a grade of a submission never does, so nothing the code under test writes there can cut a
    real grade short. A line is read once it is complete; one that is not JSON is passed over."""

    NOT_PASSED = ("failed", "error", "skipped")

    def __init__(self, cfg, starts):
        self.cfg = cfg
        self.ids = frozenset(cfg.stop_on_fail)
        self.offsets = list(starts)
        self.rest = [b""] * cfg.nproc

    def check(self):
        import json  # only for a run that asked for it

        for rank in range(self.cfg.nproc):
            data = read_bytes(rank_name(rank, "results.jsonl"), self.cfg.out_fd, cap=4 << 20, offset=self.offsets[rank])
            if not data:
                continue
            self.offsets[rank] += len(data)
            lines = (self.rest[rank] + data).split(b"\n")
            self.rest[rank] = lines.pop()
            for line in lines:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict) and rec.get("nodeid") in self.ids and rec.get("outcome") in self.NOT_PASSED:
                    return rank, rec["nodeid"], rec["outcome"]
        return None


def _log_tail(cfg, rank, lines=3):
    data = read_bytes(rank_name(rank, "log"), cfg.out_fd, cap=4096, tail=True)
    if data is None:
        return "no log"
    kept = [l.strip() for l in data.decode("utf-8", "replace").splitlines() if l.strip()]
    return " | ".join(kept[-lines:]) or "empty log"


def _watch(cfg, ranks, result, stop, run_deadline, session, t_launch, progress):
    """Poll until the ranks are done or must be stopped (result.event says why). Returns the ranks
    that exited without finishing their session: {rank: (wall clock, exit code)}."""
    abnormal = {}  # rank -> (wall clock when seen, exit code): exits without a finished session
    started_wall = time.time()
    ready_at = None  # wall clock when every live rank had finished collecting
    fails = FailWatch(cfg, result.results_starts) if cfg.stop_on_fail else None
    after = getattr(cfg, "desync_after", 0) or 0
    desync = DesyncWatch(cfg, after) if after > 0 and cfg.nproc > 1 else None
    while True:
        ranks.wait(POLL_S)
        if fails is not None:
            hit = fails.check()
            if hit is not None:
                rank, test, outcome = hit
                detail = "%s %s on rank %d (--stop-on-fail: the rest of the session is not run)" % (test, outcome, rank)
                result.event = make_event("fail_fast", rank, test, 0.0, detail, session, t_launch)
                return abnormal
        if ranks.done():
            return abnormal
        now = time.time()
        codes = ranks.exit_codes()
        states = _states(cfg)
        progress.update(states[0])
        if stop.is_set():
            result.event = make_event("interrupted", None, None, time.monotonic() - t_launch,
                                      "the launcher received %s" % stop.reason, session, t_launch)
            return abnormal
        if time.monotonic() >= run_deadline:
            rank, test = _earliest_running(states, codes)
            detail = "the run exceeded its limit of %g s" % cfg.run_timeout
            if test:
                detail += " while rank %d was running %s" % (rank, test)
            result.event = make_event("run_timeout", rank, test, time.monotonic() - t_launch, detail, session, t_launch)
            result.stacks = dump_stacks(cfg, ranks.signal_pids(), states, detail)
            hang_explain.annotate(result.event, result.stacks, cfg.nproc)
            return abnormal
        times = ranks.exit_times()
        for rank, code in enumerate(codes):
            if code is not None and rank not in abnormal and not _finished(states[rank]):
                abnormal[rank] = (times[rank] or now, code)
        if abnormal:
            # The others would wait forever in a collective with the dead rank: give them `grace`.
            first = min(abnormal, key=lambda r: abnormal[r][0])
            if now - abnormal[first][0] >= cfg.grace:
                return abnormal
            continue
        if ready_at is None and _all_collected(states, codes):
            ready_at = now
        if ready_at is None:
            hang = _startup_hang(cfg, states, codes, now, started_wall, session, t_launch)
        else:
            hang = _find_hang(cfg, states, codes, now, ready_at, session, t_launch)
            if hang is None and desync is not None:
                hang = _desync_hang(desync, states, codes, now, session, t_launch)
        if hang is not None:
            result.event = hang
            result.stacks = dump_stacks(cfg, ranks.signal_pids(), states, hang["detail"])
            hang_explain.annotate(result.event, result.stacks, cfg.nproc)
            return abnormal


def run_session(cfg, session, launcher, skip_ids, stop, run_deadline, t_launch, progress):
    _clear_session_files(cfg, session)
    port = procs.free_port()
    result = SessionResult(session, launcher, port)
    result.skipped = len(skip_ids)
    result.results_starts = [file_size(rank_name(r, "results.jsonl"), cfg.out_fd) for r in range(cfg.nproc)]
    env = procs.base_env(cfg.nproc, port, cfg.out_dir, session)
    from . import wire

    wire_before = wire.snapshot()
    t0 = time.monotonic()
    try:
        ranks = start_ranks(cfg, launcher, env, session, skip_ids)
    except OSError as exc:
        result.launch_error = "could not start the ranks: %s" % exc
        return result
    result.log_starts = list(ranks.log_starts)
    # The ranks take a while to import pytest: load what watching and reporting need now, not before
    # starting them (the launcher's own start-up adds to the wall time of every run).
    from . import report

    report.preload()
    try:
        abnormal = _watch(cfg, ranks, result, stop, run_deadline, session, t_launch, progress)
    except BaseException:  # a bug of ours must not leave the ranks running
        procs.kill_tree(ranks.roots(), cfg.kill_grace, ranks.tracked())
        raise
    killed = False
    result.ended_at = time.time()
    result.killed_ranks = [r for r, code in enumerate(ranks.exit_codes()) if code is None]
    if not ranks.done():
        killed = True
    if killed or not procs.surely_no_descendants():
        result.survivors = procs.kill_tree(ranks.roots(), cfg.kill_grace, ranks.tracked())
    wait_until = time.monotonic() + 5.0
    while not ranks.done() and time.monotonic() < wait_until:
        ranks.wait(0.1)
    if killed:
        procs.reap_orphans(ranks.tracked())
    result.duration_s = time.monotonic() - t0
    result.exit_codes = ranks.exit_codes()
    result.audit = ranks.audit_reports()
    result.final_states = _states(cfg)
    progress.update(result.final_states[0])
    result.collected = [clean_collected(read_json(rank_name(r, "collected.json"), dir_fd=cfg.out_fd)) for r in range(cfg.nproc)]
    # Every process of the session is gone: what the plugin wrote this session is read now, once
    # (a later session's code cannot rewrite it any more).
    result.records = [report.session_records(cfg, r, session, result.results_starts[r]) for r in range(cfg.nproc)]
    result.log_ends = [file_size(rank_name(r, "log"), cfg.out_fd) for r in range(cfg.nproc)]
    result.comm = [wire.read_comm(r, cfg.out_fd) for r in range(cfg.nproc)]
    result.wire = wire.check(wire_before, wire.snapshot(), result.comm, cfg.nproc)
    sys.stderr.write("infradev wire check, session %d: %s\n" % (session, json.dumps(result.wire, sort_keys=True)))
    result.start_failure = ranks.start_failure()
    if result.start_failure or result.event is not None:
        return result
    usage = [r for r, code in enumerate(result.exit_codes) if code == PYTEST_USAGE_ERROR]
    if usage:
        result.launch_error = "pytest usage error (exit 4) on rank %d: %s" % (usage[0], _log_tail(cfg, usage[0]))
        return result
    if not killed:  # everyone exited by themselves: every unfinished exit is abnormal
        times = ranks.exit_times()
        for rank, code in enumerate(result.exit_codes):
            if rank not in abnormal and not _finished(result.final_states[rank]):
                abnormal[rank] = (times[rank] or time.time(), code)
    if abnormal:
        _classify_abnormal(cfg, result, abnormal, session, t_launch)
    return result


def _classify_abnormal(cfg, result, abnormal, session, t_launch):
    first = min(abnormal, key=lambda r: abnormal[r][0])
    seen_at, code = abnormal[first]
    state = result.final_states[first]
    if state is None:
        never = [r for r in sorted(abnormal) if result.final_states[r] is None]
        result.launch_error = "rank %d %s before pytest started (%s)" % (never[0], describe_exit(code), _log_tail(cfg, never[0]))
        return
    test = state.get("nodeid") if state.get("state") == STATE_RUNNING else None
    where = "while running %s" % test if test else "outside any test (state: %s)" % state.get("state")
    after = seen_at - float(state.get("since", seen_at))
    detail = "rank %d %s %s" % (first, describe_exit(code), where)
    result.event = make_event("crash", first, test, after, detail, session, t_launch, exit_code=code)
