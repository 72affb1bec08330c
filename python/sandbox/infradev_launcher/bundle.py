"""The result bundle: the one line `INFRADEV-BUNDLE <json>` the launcher prints last on its stdout.

The host learns results only from this line (sandbox/ranks.ts); it reads nothing in the out dir.
Everything in it is capped so that the line stays bounded whatever the ranks wrote (CAPS; the
budgets are bytes of the serialized JSON, measured, so the whole line is at most BUNDLE_MAX):

  records      per rank, round-robin over tests (so a cut hits every rank's last tests alike):
               full (longrepr <= 4000 chars, message <= 1024) while the records take < 12 MiB,
               then reduced (message <= 200 chars, no longrepr / measurements) up to 18 MiB, then
               dropped (counted in `records_dropped`; the host counts such a test as missing).
  collected    node ids <= 2048 chars each, up to 3 MiB (then `collected_dropped`).
  integrity    per-test `outcomes` of pytest's junit up to 5 MiB in all (then an entry's outcomes
               are left out and `outcomes_truncated` is true; its counts always stay).
  logs         each rank log's and stacks file's last 64 KiB, torchrun.log's, the launcher's
               summary; up to 2 MiB in all (then 4 KiB tails, then left out).
  launch       events <= 100 (detail <= 2048 chars), collection errors <= 100 (message <= 4096),
               notes <= 20, pytest args as given (the host chose them), up to 3 MiB.
  attachments  per rank, the records a probe wrote for the host to judge (rank<r>.differential.json:
               python/host/infradev_differential.py), each whole or not at all, up to 24 MiB in all
               (then left out, counted in `attachments_dropped`: the host reads that as records missing).
10,000 tests on 2 ranks keep every record: in full when they pass (~9 MiB with 100-char ids); when all fail with
short tracebacks the later ones are reduced (~19 MiB in all).
"""

import json

from infradev_outputs import cap_text

BUNDLE_PREFIX = "INFRADEV-BUNDLE "
BUNDLE_FORMAT = 1
MIB = 1 << 20
CAPS = {
    "records_full_bytes": 12 * MIB,
    "records_max_bytes": 18 * MIB,
    "longrepr_chars": 4000,
    "message_chars": 1024,
    "reduced_message_chars": 200,
    "collected_bytes": 3 * MIB,
    "nodeid_chars": 2048,
    "integrity_outcomes_bytes": 5 * MIB,
    "log_tail_bytes": 64 << 10,
    "logs_bytes": 2 * MIB,
    "launch_bytes": 3 * MIB,
    "events": 100,
    "event_detail_chars": 2048,
    "collection_errors": 100,
    "collection_error_chars": 4096,
    "notes": 20,
    "attachments_bytes": 24 * MIB,
}
BUNDLE_MAX = 56 * MIB


def dumps(obj):
    # ASCII only: the line survives any decoding on the way; no NaN (not JSON).
    return json.dumps(obj, ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=str)


def _reduced(rec):
    return {
        "nodeid": rec["nodeid"], "outcome": rec["outcome"], "when": rec["when"], "duration_s": rec["duration_s"],
        "message": rec["message"][:CAPS["reduced_message_chars"]], "longrepr": "", "markers": rec["markers"],
        "session": rec["session"], "reduced": True, **({"killed": rec["killed"]} if "killed" in rec else {}),
    }


def _full(rec):
    out = dict(rec)
    out["message"] = cap_text(rec.get("message") or "", CAPS["message_chars"])
    out["longrepr"] = cap_text(rec.get("longrepr") or "", CAPS["longrepr_chars"])
    return out


def ranks_json(per_rank):
    """JSON of `ranks`: [{rank, records: [...], records_dropped}] within the record budgets."""
    order = list(dict.fromkeys(nodeid for recs in per_rank for nodeid in recs))
    kept = [[] for _ in per_rank]
    dropped = [0] * len(per_rank)
    used = 0
    for nodeid in order:
        for rank, recs in enumerate(per_rank):
            rec = recs.get(nodeid)
            if rec is None:
                continue
            text = dumps(_full(rec)) if used < CAPS["records_full_bytes"] else None
            if text is None or used + len(text) > CAPS["records_full_bytes"]:
                text = dumps(_reduced(rec))
                if used + len(text) > CAPS["records_max_bytes"]:
                    dropped[rank] += 1
                    continue
            kept[rank].append(text)
            used += len(text) + 1
    parts = []
    for rank, texts in enumerate(kept):
        parts.append('{"rank":%d,"records":[%s],"records_dropped":%d}' % (rank, ",".join(texts), dropped[rank]))
    return "[" + ",".join(parts) + "]", sum(dropped)


def _within(texts, cap):
    """JSON texts -> (a JSON list of those that fit in `cap` bytes, in order; how many did not)."""
    kept, used, dropped = [], 0, 0
    for text in texts:
        if used + len(text) > cap:
            dropped += 1
            continue
        kept.append(text)
        used += len(text) + 1
    return "[" + ",".join(kept) + "]", dropped


def collected_json(ids):
    return _within((dumps(nodeid[:CAPS["nodeid_chars"]]) for nodeid in ids), CAPS["collected_bytes"])


def integrity_json(entries):
    parts, used = [], 0
    for entry in entries:
        entry = dict(entry)
        junit = entry.get("pytest_junit")
        if junit is not None:
            junit = dict(junit)
            outcomes = junit.get("outcomes") or {}
            text = dumps(outcomes)
            if used + len(text) > CAPS["integrity_outcomes_bytes"]:
                junit["outcomes"] = {}
                junit["outcomes_truncated"] = True
            else:
                used += len(text)
            entry["pytest_junit"] = junit
        parts.append(dumps(entry))
    return "[" + ",".join(parts) + "]"


def logs_json(logs):
    """logs: [(name, bytes)] -> JSON of [{name, text}] within the log budget."""
    parts, used = [], 0
    for name, data in logs:
        for cap in (CAPS["log_tail_bytes"], 4096):
            text = dumps({"name": name, "text": data[-cap:].decode("utf-8", "replace")})
            if used + len(text) <= CAPS["logs_bytes"]:
                parts.append(text)
                used += len(text) + 1
                break
    return "[" + ",".join(parts) + "]"


def capped_launch(launch):
    """launch.json's content for the bundle (without `collected`, which is the bundle's own field)."""
    out = {k: v for k, v in launch.items() if k != "collected"}
    events = []
    for e in (launch.get("events") or [])[:CAPS["events"]]:
        e = dict(e)
        e["detail"] = cap_text(e.get("detail") or "", CAPS["event_detail_chars"])
        if isinstance(e.get("test"), str):
            e["test"] = e["test"][:CAPS["nodeid_chars"]]
        events.append(e)
    out["events"] = events
    errors = []
    for err in (launch.get("collection_errors") or [])[:CAPS["collection_errors"]]:
        err = dict(err) if isinstance(err, dict) else {"message": str(err)}
        err["message"] = cap_text(err.get("message") or "", CAPS["collection_error_chars"])
        for key in ("nodeid", "file"):
            if isinstance(err.get(key), str):
                err[key] = err[key][:CAPS["nodeid_chars"]]
        errors.append(err)
    out["collection_errors"] = errors
    out["notes"] = [cap_text(n, 1024) for n in (launch.get("notes") or [])[:CAPS["notes"]]]
    if isinstance(out.get("error"), str):
        out["error"] = cap_text(out["error"], 8192)
    text = dumps(out)
    if len(text) > CAPS["launch_bytes"]:  # only the host's own pytest args can still be long here
        out["pytest_args"] = ["[%d arguments left out: over the bundle's cap]" % len(out.get("pytest_args") or [])]
        text = dumps(out)
    return text


def attachments_json(attachments):
    """attachments: [(rank, name, bytes)] -> (JSON of [{rank, name, text}] within the budget, dropped)."""
    texts = (dumps({"rank": rank, "name": name, "text": data.decode("utf-8", "replace")}) for rank, name, data in attachments)
    return _within(texts, CAPS["attachments_bytes"])


def bundle_line(nonce, launch, collected, per_rank, integrity, logs, attachments=()):
    """The whole line, newline included."""
    attachments_text, attachments_dropped = attachments_json(attachments)
    ranks_text, records_dropped = ranks_json(per_rank)
    collected_text, collected_dropped = collected_json(collected)
    body = "".join((
        '{"format":%d' % BUNDLE_FORMAT,
        ',"nonce":', dumps(nonce),
        ',"launch":', capped_launch(launch),
        ',"collected":', collected_text,
        ',"collected_dropped":%d' % collected_dropped,
        ',"ranks":', ranks_text,
        ',"records_dropped":%d' % records_dropped,
        ',"integrity":', integrity_json(integrity),
        ',"logs":', logs_json(logs),
        ',"attachments":', attachments_text,
        ',"attachments_dropped":%d' % attachments_dropped,
        ',"caps":', dumps(CAPS),
        "}",
    ))
    return BUNDLE_PREFIX + body + "\n"


def minimal_bundle_line(nonce, launch):
    """For a run that never got as far as records (a launch error, a launcher failure)."""
    return bundle_line(nonce, launch, [], [], [], [])
