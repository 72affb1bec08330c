"""Per-rank results across sessions -> rank{r}.xml (normalized JUnit) and rank{r}.probe.json."""

import os
import re

from infradev_outputs import STATE_RUNNING, cap_text, rank_file, read_jsonl, write_json_atomic

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
        body = message
        if rank in result.stacks:
            body += "\n\nPython stacks of rank %d when it was killed:\n%s" % (rank, result.stacks[rank])
        rec = {
            "nodeid": nodeid, "outcome": "error", "when": "call", "duration_s": elapsed,
            "message": message, "longrepr": cap_text(body), "markers": {}, "session": result.session,
            "killed": event["kind"] if nodeid == culprit or event["kind"] in ("run_timeout", "interrupted") else "aborted",
        }
        rec.update(_EMPTY_MEASURES)
        out.setdefault(rank, {})[nodeid] = rec
    return out


def rank_records(out_dir, nproc, results):
    """Every rank's records, session by session; a later session's record of a test replaces an
    earlier one (a test aborted by another test's hang is run again after the restart)."""
    per_rank = []
    for rank in range(nproc):
        by_session = {}
        for rec in read_jsonl(rank_file(out_dir, rank, "results.jsonl")):
            if "nodeid" in rec:
                by_session.setdefault(int(rec.get("session", 0)), []).append(rec)
        merged = {}
        for result in results:
            for rec in by_session.get(result.session, []):
                merged[rec["nodeid"]] = rec
            for nodeid, rec in getattr(result, "killed", {}).get(rank, {}).items():
                if not any(r["nodeid"] == nodeid for r in by_session.get(result.session, [])):
                    merged[nodeid] = rec
        per_rank.append(merged)
    return per_rank


def _clean(text):
    return _XML_BAD.sub("?", text or "")


def preload():
    """Import what reading the ranks' files and writing the reports need (see session.run_session)."""
    import json  # noqa: F401
    import xml.etree.ElementTree  # noqa: F401


def write_junit(path, rank, records):
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
    tmp = path + ".tmp"
    ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, path)


def write_probe_json(out_dir, rank, nproc, records):
    kinds = [r.get("memory_kind") for r in records.values() if r.get("memory_kind")]
    memory_kind = kinds[-1] if kinds else None
    write_json_atomic(
        rank_file(out_dir, rank, "probe.json"),
        {"rank": rank, "world_size": nproc, "memory_kind": memory_kind, "tests": records},
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

