"""Independent records of one rank's session, side by side; the launcher reports, the grader judges.

For every rank and session:
  exit_code     the rank's pytest exit code as waitpid saw it (negative: killed by that signal), or
                None when the launcher killed the rank (hang, crash of a peer, timeout, interrupt)
  plugin        counts from the recording plugin's records of that session
  pytest_junit  counts and per-test outcomes from pytest's own --junitxml report (written by pytest's
                junitxml plugin, not ours), or None if absent / unparseable
  summary       counts from pytest's terminal summary line in the rank's log, or None if there is none

Counts are in the units of pytest's summary line, so that all three agree on an honest run: one
count per phase report that pytest's terminal reporter counts. A test whose call passed and whose
teardown failed counts once in `passed` and once in `error`; a failed call with a failed teardown
once in `failed` and once in `error`; xpassed counts as passed, xfailed as skipped; a collection
error is an error, a module skipped at collection (importorskip) a skip; deselected tests and warnings
are not counted. pytest's junit report has one
<testcase> per test, and a second one only for a test whose call failed and whose teardown failed
too, so the junit counts are derived per child element (<failure>, <error>, <skipped>; none:
passed), a lone <error> "failed on teardown with ..." also counting the passed call it replaced
(unless it follows a case of the same test: then it is the second case of a failed call).
`outcomes` are per test (node id) and merged like the plugin's records: error > failed > skipped >
passed.

Known honest disagreement (checked against pytest 7.2; pytest's junit and summary code is the same in
8 and 9): a test that calls pytest.skip() in its teardown after a passed call is "1 passed, 1 skipped"
in the summary and the plugin, but only a <skipped> case in the junit report (junit: one pass fewer,
outcome skipped). pytest.exit() from a test ends pytest with exit code 2.
"""

import re

from infradev_outputs import read_bytes, rank_name

JUNIT_CAP = 64 << 20
LOG_SEGMENT_CAP = 256 << 10
ZERO = ("passed", "failed", "error", "skipped")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# pytest's summary line: "== 1 failed, 2 passed, 1 warning in 0.12s ==" (no "=" with -q), or "no tests ran
# in 0.01s"; the time may be followed by "(0:01:05)". pytest 6 to 9 print it the same way.
_SUMMARY = re.compile(r"^=*\s*(?P<body>[a-z0-9, ]+?) in (?:\d+(?:\.\d+)?)s(?: \([0-9:]+\))?\s*=*$")
_ITEM = re.compile(r"^(\d+) ([a-z]+)$")
_SUMMARY_WORDS = {
    "passed": "passed", "xpassed": "passed", "failed": "failed", "error": "error", "errors": "error",
    "skipped": "skipped", "xfailed": "skipped", "deselected": None, "warning": None, "warnings": None,
    "rerun": None, "reruns": None,
}
_SEVERITY = {"error": 3, "failed": 2, "skipped": 1, "passed": 0}


def zero():
    return {k: 0 for k in ZERO}


def plugin_counts(records, collection_errors, collection_skips=()):
    """Counts (summary units) of every record the plugin wrote in the session, duplicates included:
    the plugin writes one per test, so an extra line someone appended makes the counts disagree;
    plus the collection errors (errors) and modules skipped at collection (skipped), as pytest counts."""
    counts = zero()
    for rec in records:
        phases = rec.get("phases") or {}
        if not phases:  # not the plugin's format: count its outcome once
            counts[rec["outcome"]] += 1
            continue
        for when in ("setup", "call", "teardown"):
            outcome = phases.get(when)
            if outcome == "failed":
                counts["failed" if when == "call" else "error"] += 1
            elif outcome == "skipped":
                counts["skipped"] += 1
            elif outcome == "passed" and when == "call":
                counts["passed"] += 1
    counts["error"] += len(collection_errors)
    counts["skipped"] += len(collection_skips)
    return counts


def junit_address(nodeid, prefix=None):
    """(classname, name) pytest's junitxml writes for a node id (junitxml.mangle_test_address)."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".")
    if names[0].endswith(".py"):
        names[0] = names[0][:-3]
    names[-1] += bracket + params
    classname = ".".join(names[:-1])
    if prefix:
        classname = prefix + "." + classname
    return classname, names[-1]


def parse_pytest_junit(data, known_ids):
    """Counts + outcomes from pytest's own junit XML, or None. Test cases are matched to node ids
    by the address pytest derives from each id (`known_ids`: the plugin's records, the collected ids,
    the collection errors); a case matching none keeps "<classname>::<name>"."""
    if not data:
        return None
    import xml.etree.ElementTree as ET

    try:
        root = ET.fromstring(data)
    except (ET.ParseError, ValueError, RecursionError):
        return None
    if root.tag not in ("testsuites", "testsuite"):
        return None
    by_address = {}
    for nodeid in known_ids:
        by_address.setdefault(junit_address(nodeid), nodeid)
    counts = zero()
    outcomes = {}
    previous = None
    for case in root.iter("testcase"):
        classname, name = case.get("classname") or "", case.get("name") or ""
        split = previous == (classname, name)  # the teardown error of a test whose call failed
        previous = (classname, name)
        nodeid = by_address.get((classname, name)) or "%s::%s" % (classname, name)
        children = [c for c in case if c.tag in ("failure", "error", "skipped")]
        if not children:
            counts["passed"] += 1
            outcome = "passed"
        else:
            outcome = "passed"
            for child in children:
                kind = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                counts[kind] += 1
                if _SEVERITY[kind] > _SEVERITY[outcome]:
                    outcome = kind
            if (not split and len(children) == 1 and children[0].tag == "error"
                    and (children[0].get("message") or "").startswith("failed on teardown with")):
                counts["passed"] += 1  # the passed call, merged by pytest into this case
        if nodeid not in outcomes or _SEVERITY[outcome] > _SEVERITY[outcomes[nodeid]]:
            outcomes[nodeid] = outcome
    out = dict(counts)
    out["outcomes"] = outcomes
    return out


def parse_summary(text):
    """Counts of the last pytest summary line in `text` (a rank's log of one session), or None."""
    for line in reversed(text.splitlines()):
        line = _ANSI.sub("", line).strip()
        if not line or " in " not in line:
            continue
        m = _SUMMARY.match(line)
        if not m:
            continue
        body = m.group("body").strip()
        if body == "no tests ran":
            return zero()
        counts = zero()
        ok = True
        for item in body.split(", "):
            im = _ITEM.match(item.strip())
            if not im or im.group(2) not in _SUMMARY_WORDS:
                ok = False
                break
            key = _SUMMARY_WORDS[im.group(2)]
            if key:
                counts[key] += int(im.group(1))
        if ok:
            return counts
    return None


def session_integrity(cfg, result, rank, known_ids):
    from infradev_outputs import junit_name

    collected = result.collected[rank] if rank < len(result.collected) else None
    errors = (collected or {}).get("errors") or []
    skips = (collected or {}).get("skipped") or []
    records = result.records[rank] if rank < len(result.records) else []
    code = result.exit_codes[rank] if rank < len(result.exit_codes) else None
    if rank in result.killed_ranks:
        code = None
    ids = set(known_ids) | {r["nodeid"] for r in records} | {e.get("nodeid", "") for e in errors + skips}
    ids |= set((collected or {}).get("ids") or [])
    junit = parse_pytest_junit(read_bytes(junit_name(rank, result.session), cfg.out_fd, cap=JUNIT_CAP), ids)
    start = result.log_starts[rank] if rank < len(result.log_starts) else 0
    end = result.log_ends[rank] if rank < len(result.log_ends) else start
    offset = max(start, end - LOG_SEGMENT_CAP)  # this session's part of the log (its end holds the summary)
    log = read_bytes(rank_name(rank, "log"), cfg.out_fd, cap=max(0, end - offset), offset=offset) if end > offset else None
    summary = parse_summary(log.decode("utf-8", "replace")) if log else None
    comm = result.comm[rank] if rank < len(result.comm) else None
    out = {
        "rank": rank,
        "session": result.session,
        "exit_code": code,
        "plugin": plugin_counts(records, errors, skips),
        "pytest_junit": junit,
        "summary": summary,
        "audit": result.audit[rank] if rank < len(result.audit) else None,
        # The plugin's collective totals were written (the last thing pytest does on this rank), and
        # the group= objects the collectives refused.
        "comm_written": comm is not None,
        "refused_groups": (comm or {}).get("refused", []),
    }
    if rank == 0 and result.wire is not None:
        out["wire"] = result.wire
    return out


def integrity(cfg, sessions, known_ids):
    """One entry per rank per session (sessions in order, ranks in order)."""
    out = []
    for result in sessions:
        if result.start_failure:
            continue
        for rank in range(cfg.nproc):
            out.append(session_integrity(cfg, result, rank, known_ids))
    return out
