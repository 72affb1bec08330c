"""What a hang looked like: each rank's position read from the Python stacks faulthandler dumped
(session.dump_stacks), and, when some rank waits in a torch.distributed call, which ranks did not
arrive at that same call.

Diagnosis only, never a verdict: the stacks come from the ranks, i.e. from processes the code under
test runs in, so it could print anything there. A hang is decided by the launcher's clock alone.

faulthandler's format (CPython 3.8+, stable), one block per thread, innermost frame first:
    Thread 0x00007f0796d1a040 (most recent call first):
      File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 1536 in all_reduce
      File "/repo/tests/test_x.py", line 12 in test_sync
    Current thread 0x... (most recent call first):
Parsed by hand (stdlib only: this module runs inside the sandbox).
"""

import os
import re

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):\s*$")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+) in (.+?)\s*$')
# Frames of torch.distributed's Python API: the outermost of them names the call the test made
# (all_reduce, broadcast, barrier, recv, ...); wrappers torch puts around them (c10d_logger) sit in
# the same package.
_DIST_DIR = os.sep + os.path.join("torch", "distributed") + os.sep
# Frames of torch.distributed that never name the call: torch 2.x's logging wrappers around every
# collective (c10d_logger), and functions that do not block on peers. init_process_group, new_group
# and destroy_process_group stay: a rank can wait in them for the others.
_NOT_A_CALL = {"wrapper", "_exception_logger", "_time_logger", "inner", "get_rank", "get_world_size",
               "is_initialized", "_get_default_group", "_rank_not_in_group", "_check_single_tensor",
               "_warn_not_in_group", "_get_group_size"}


def parse_stacks(text):
    """[{"thread": "0x..", "current": bool, "frames": [(file, line, func), ...innermost first]}]"""
    threads = []
    for line in (text or "").splitlines():
        m = _THREAD.match(line)
        if m:
            threads.append({"thread": m.group(2), "current": m.group(1) == "Current thread", "frames": []})
            continue
        f = _FRAME.match(line)
        if f and threads:
            threads[-1]["frames"].append((f.group(1), int(f.group(2)), f.group(3)))
    return threads


def _short(frame):
    path, line, func = frame
    return "%s:%d in %s" % (os.path.basename(path), line, func)


def _is_harness(frame):
    return os.path.basename(frame[0]).startswith("infradev_") or (os.sep + "infradev_") in frame[0]


def _is_dist(frame):
    return _DIST_DIR in frame[0]


def rank_position(text):
    """Where one rank was: {"collective": name or None, "call_site": "file:line in func" of the frame
    that called it, "at": the innermost frame outside torch.distributed}, or None without a stack.
    Every thread is looked at: the one in a torch.distributed call wins (a test may run its
    collectives on a thread of its own); otherwise the main thread ("Current thread": faulthandler's
    handler runs on it)."""
    threads = [t for t in parse_stacks(text) if t["frames"]]
    if not threads:
        return None
    for t in threads:
        frames = t["frames"]
        idx = [i for i, fr in enumerate(frames) if _is_dist(fr) and fr[2] not in _NOT_A_CALL]
        if not idx:
            continue
        outer = max(idx)  # the public call: the outermost torch.distributed frame
        call = frames[outer]
        # The caller, passing over the harness's own wrappers (infradev_probe counts collectives).
        caller = next((fr for fr in frames[outer + 1:] if not _is_harness(fr)), None)
        return {"collective": call[2], "call_site": _short(caller) if caller else None,
                "at": _short(caller) if caller else _short(call)}
    main = next((t for t in threads if t["current"]), threads[0])
    own = next((fr for fr in main["frames"] if not _is_dist(fr)), main["frames"][0])
    return {"collective": None, "call_site": None, "at": _short(own)}


def explain(event, stacks, nproc):
    """A sentence and a record naming the collective a hang waits in and the ranks that did not
    arrive, from the ranks' stacks; None when no rank was seen in a torch.distributed call.
    `event["rank"]` (the rank past its limit) defines the call the others are measured against."""
    pos = {r: rank_position(stacks.get(r, "")) for r in range(nproc)}
    culprit = event.get("rank")
    anchor = pos.get(culprit) if culprit is not None else None
    if not anchor or not anchor.get("collective"):
        anchor = next((p for r, p in sorted(pos.items()) if p and p.get("collective")), None)
    if anchor is None:
        return None
    key = (anchor["collective"], anchor["call_site"])
    waiting = [r for r, p in sorted(pos.items()) if p and (p["collective"], p["call_site"]) == key]
    absent = [r for r in range(nproc) if r not in waiting]
    where = {}
    for r in absent:
        p = pos.get(r)
        if p is None:
            where[r] = "no stack (exited or did not answer)"
        elif p["collective"]:
            where[r] = "in %s at %s" % (p["collective"], p["call_site"] or "?")
        else:
            where[r] = "at %s" % p["at"]
    site = " called at %s" % anchor["call_site"] if anchor["call_site"] else ""
    sentence = "collective hang: rank%s %s wait%s in %s%s" % (
        "s" if len(waiting) > 1 else "", ", ".join(map(str, waiting)), "" if len(waiting) > 1 else "s",
        anchor["collective"], site)
    if absent:
        sentence += "; did not arrive: " + "; ".join("rank %d (%s)" % (r, where[r]) for r in absent)
    else:
        sentence += "; every rank is in it (a collective that never completes, e.g. mismatched sizes or a peer's other group)"
    record = {"text": sentence, "name": anchor["collective"], "call_site": anchor["call_site"], "waiting": waiting,
              "not_arrived": absent, "where": {str(r): w for r, w in where.items()}}
    return sentence, record


def annotate(event, stacks, nproc):
    """Adds the explanation to a hang / run_timeout event in place (detail and `collective`)."""
    if not event or not stacks:
        return
    try:
        got = explain(event, stacks, nproc)
    except Exception:  # noqa: BLE001 - a diagnosis that fails must not cost the session's records
        return
    if got is None:
        return
    sentence, record = got
    event["detail"] = "%s; %s" % (event.get("detail") or "", sentence)
    event["collective"] = record
