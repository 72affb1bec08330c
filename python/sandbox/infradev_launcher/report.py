"""Per-rank results across sessions -> the bundle's records, rank{r}.xml (normalized JUnit) and
rank{r}.probe.json (those two files are for the agent to read; the host reads only the bundle)."""

import os
import re

from infradev_outputs import LONGREPR_CAP, STATE_RUNNING, cap_text, jsonl_dicts, rank_name, read_bytes, write_atomic, write_json_atomic

SEVERITY = {"error": 3, "failed": 2, "passed": 1, "skipped": 0}
_XML_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_EMPTY_MEASURES = {
    "wall_time_s": None, "peak_memory_bytes": None, "peak_memory_delta_bytes": None,
    "reserved_memory_bytes": None, "memory_kind": None, "calls": {}, "bytes": {},
}


def killed_records(result, cfg):
    """{rank: {nodeid: record}} for tests that were running when the launcher killed their rank."""
    event = result.event
    if event is None:
        return {}
    out = {}
    for rank, state in enumerate(result.final_states):
        if not state or state.get("state") != STATE_RUNNING or not state.get("nodeid"):
            continue
        nodeid = state["nodeid"]
        elapsed = max(0.0, result.ended_at - float(state.get("since", result.ended_at)))
        culprit = event.get("test")
        if event["kind"] == "hang" and nodeid == culprit:
            message = "hang: %s did not finish within %g s on rank %d; killed after %.1f s" % (
                nodeid, cfg.per_test_timeout, rank, elapsed)
        elif event["kind"] == "crash" and nodeid == culprit:
            message = "crash: " + event["detail"]
            if rank == event["rank"]:
                elapsed = float(event["after_s"])
        elif event["kind"] in ("run_timeout", "interrupted"):
            message = "%s: killed while running (%s)" % (event["kind"], event["detail"])
        else:
            message = "aborted: rank %d was killed while running this test because %s" % (rank, event["detail"])
        coll = event.get("collective")
        if event["kind"] == "hang" and nodeid == culprit and isinstance(coll, dict) and coll.get("text"):
            message += "; " + coll["text"]
        body = message
        if rank in result.stacks:
            body += "\n\nPython stacks of rank %d when it was killed:\n%s" % (rank, result.stacks[rank])
        rec = {
            "nodeid": nodeid, "outcome": "error", "when": "call", "phases": {}, "xfail": False, "duration_s": elapsed,
            "message": message, "longrepr": cap_text(body), "markers": {}, "session": result.session,
            "killed": event["kind"] if nodeid == culprit or event["kind"] in ("run_timeout", "interrupted") else "aborted",
        }
        rec.update(_EMPTY_MEASURES)
        out.setdefault(rank, {})[nodeid] = rec
    return out


RESULTS_CAP = 256 << 20  # bytes of one session's results.jsonl the launcher reads


def session_records(cfg, rank, session, start):
    """Every record the plugin appended to rank{r}.results.jsonl during `session`, in file order
    (from `start`, the size before the session; from 0 if the file shrank, i.e. was replaced).
    A line cut by a kill mid-write, or not a JSON object with a string nodeid, is dropped."""
    name = rank_name(rank, "results.jsonl")
    data = read_bytes(name, cfg.out_fd, cap=RESULTS_CAP, offset=start)
    if not data and start:
        data = read_bytes(name, cfg.out_fd, cap=RESULTS_CAP)
    return [
        clean_record(rec, session)
        for rec in jsonl_dicts(data)
        if isinstance(rec.get("nodeid"), str) and rec.get("session", session) == session
    ]


OUTCOMES = ("passed", "failed", "error", "skipped")
PHASES = ("setup", "call", "teardown")
NODEID_CAP = 2048
MESSAGE_CAP = 1024
MEASURE_KEYS_CAP = 64


def _text(value, cap):
    if value is None:
        return ""
    return cap_text(value if isinstance(value, str) else str(value), cap)


def _number(value, integer=False):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return int(value) if integer else float(value)


def _counter(value):
    out = {}
    if isinstance(value, dict):
        for key, n in list(value.items())[:MEASURE_KEYS_CAP]:
            n = _number(n, integer=True)
            if isinstance(key, str) and n is not None:
                out[key[:64]] = n
    return out


def clean_record(rec, session):
    """A record with the plugin's schema, whatever the file held: known keys, typed values, capped
    strings (the code under test can write anything into the out dir)."""
    phases = rec.get("phases")
    probe = (rec.get("markers") or {}).get("probe") if isinstance(rec.get("markers"), dict) else None
    markers = {}
    if isinstance(probe, dict):
        markers = {"probe": {"promise": _text(probe.get("promise"), 512) if probe.get("promise") is not None else None,
                             "kind": _text(probe.get("kind"), 64) if probe.get("kind") is not None else None}}
    out = {
        "nodeid": rec["nodeid"][:NODEID_CAP],
        "outcome": rec.get("outcome") if rec.get("outcome") in OUTCOMES else "error",
        "when": rec.get("when") if rec.get("when") in PHASES else "call",
        "phases": {k: v for k, v in phases.items() if k in PHASES and v in ("passed", "failed", "skipped")} if isinstance(phases, dict) else {},
        "xfail": rec.get("xfail") is True,
        "duration_s": max(0.0, _number(rec.get("duration_s")) or 0.0),
        "message": _text(rec.get("message"), MESSAGE_CAP),
        "longrepr": _text(rec.get("longrepr"), LONGREPR_CAP),
        "markers": markers,
        "session": session,
        "wall_time_s": _number(rec.get("wall_time_s")),
        "peak_memory_bytes": _number(rec.get("peak_memory_bytes"), integer=True),
        "peak_memory_delta_bytes": _number(rec.get("peak_memory_delta_bytes"), integer=True),
        "reserved_memory_bytes": _number(rec.get("reserved_memory_bytes"), integer=True),
        "memory_kind": rec.get("memory_kind")[:32] if isinstance(rec.get("memory_kind"), str) else None,
        "calls": _counter(rec.get("calls")),
        "bytes": _counter(rec.get("bytes")),
    }
    return out


def rank_records(nproc, results):
    """Every rank's records, session by session. Within a session only tests the rank collected
    count, and the first record of a test is the plugin's (it writes one per test when the test
    finishes): a later line for the same test, or a line for a test the rank did not collect, is not
    the plugin's and stays out (it still counts in the integrity's plugin counts, where it shows). A
    later session's record of a test replaces an earlier one (a test aborted by another test's hang
    is run again after the restart)."""
    per_rank = []
    for rank in range(nproc):
        merged = {}
        for result in results:
            recs = result.records[rank] if rank < len(result.records) else []
            collected = result.collected[rank] if rank < len(result.collected) else None
            allowed = set(collected["ids"]) if collected else set()
            first = {}
            for rec in recs:
                if rec["nodeid"] in allowed:
                    first.setdefault(rec["nodeid"], rec)
            merged.update(first)
            for nodeid, rec in getattr(result, "killed", {}).get(rank, {}).items():
                if nodeid not in first:
                    merged[nodeid] = rec
        per_rank.append(merged)
    return per_rank


def _clean(text):
    return _XML_BAD.sub("?", text if isinstance(text, str) else str(text or ""))


def preload():
    """Import what reading the ranks' files and writing the reports need (see session.run_session)."""
    import json  # noqa: F401
    import xml.etree.ElementTree  # noqa: F401


def write_junit(cfg, rank, records):
    import xml.etree.ElementTree as ET  # loaded by preload() while the ranks start

    counts = {"failed": 0, "error": 0, "skipped": 0}
    total_time = 0.0
    suite = ET.Element("testsuite", name="infradev.rank%d" % rank)
    for nodeid, rec in records.items():
        t = float(rec.get("duration_s") or 0.0)
        total_time += t
        case = ET.SubElement(suite, "testcase", name=_clean(nodeid), classname=_clean(nodeid.split("::")[0]), time="%.3f" % t)
        outcome = rec.get("outcome")
        if outcome in counts:
            counts[outcome] += 1
            tag = {"failed": "failure", "error": "error", "skipped": "skipped"}[outcome]
            child = ET.SubElement(case, tag, message=_clean(rec.get("message") or outcome))
            child.text = _clean(rec.get("longrepr") or rec.get("message") or "")
    suite.set("tests", str(len(records)))
    suite.set("failures", str(counts["failed"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    suite.set("time", "%.3f" % total_time)
    root = ET.Element("testsuites")
    root.append(suite)
    write_atomic(rank_name(rank, "xml"), ET.tostring(root, encoding="utf-8", xml_declaration=True), cfg.out_fd)


def write_probe_json(cfg, rank, records):
    kinds = [r.get("memory_kind") for r in records.values() if isinstance(r.get("memory_kind"), str)]
    memory_kind = kinds[-1] if kinds else None
    write_json_atomic(
        rank_name(rank, "probe.json"),
        {"rank": rank, "world_size": cfg.nproc, "memory_kind": memory_kind, "tests": records},
        cfg.out_fd,
    )


def merged_summary(per_rank, collected):
    """Counts of merged outcomes (error > failed > passed > skipped; missing on a rank = failed)."""
    ids = list(dict.fromkeys(list(collected) + [i for recs in per_rank for i in recs]))
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "missing_on_some_rank": 0}
    for nodeid in ids:
        worst = "skipped"
        missing = False
        for recs in per_rank:
            rec = recs.get(nodeid)
            outcome = rec.get("outcome", "error") if rec else "failed"
            missing = missing or rec is None
            if SEVERITY.get(outcome, 3) > SEVERITY[worst]:
                worst = outcome
        counts[worst] += 1
        counts["missing_on_some_rank"] += int(missing)
    counts["total"] = len(ids)
    return counts

