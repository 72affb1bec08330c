"""What the ranks sent on the wire, counted by the kernel, recorded beside their collective counters.

The collective counters (infradev_probe._collectives) run inside the ranks, beside the code under
test: code that calls an uncounted original of a collective (dug out of a wrapper's closure, a
backend method reached some other way) is not counted there. Its bytes still cross a socket. With
gloo on CPU every collective is TCP over the loopback of the sandbox's own network namespace, and the
kernel counts what was sent there: the TCP segments that carried data (`TcpExt: TCPOrigDataSent` in
/proc/net/netstat, retransmissions excluded), and the bytes and packets `lo` transmitted
(/proc/net/dev), with the IPv4 / IPv6 packet split (/proc/net/snmp, snmp6) and the retransmitted
segments (`Tcp: RetransSegs`). The ranks cannot lower these counters, and closing a socket does not
take anything back. The launcher reads them before the ranks start and after they are all gone.

This is a second, independent measurement, recorded in the session's integrity record and in the
grade (SessionResult.wire); it is NOT a verdict. What was measured (torch 1.13 + gloo, w=2, on this
2-core machine at load 12-16, docs/security.md):

- TCP payload bytes (lo's bytes less 66 per IPv4 / 86 per IPv6 packet: Ethernet, IP and a TCP header
  with timestamps) are stable: 50 all-reduces of 4 KB, 435,055 and 434,446 bytes in two runs; 200 of
  40 B, 170,098 and 170,169; 5 of 4 MB, 40.33 and 40.14 MB (that 0.5% is retransmissions on lo under
  load, up to 64 KiB each: `payload_bytes_min` subtracts them). An all-reduce smuggled beside each
  counted one doubles them (871,286; 342,064).
- Data segments are not: they depend on how the kernel cut and coalesced the writes, which load
  changes (grad-bucketing's gold official session sent 2,019, 2,342 and 3,959 in three runs).

A verdict needs an upper bound of the honest bytes per op and world size (gloo's algorithm per op,
its per-message framing, process-group set-up and store traffic, which init polls as often as its
timing makes it); that model is not built, so the record carries the raw figures and two ratios for
review (`payload_bytes` against the payload the ranks counted, `measured_segments` against the
segment bounds below). The segment bounds are upper bounds measured with a margin:

    per rank:  calls of op x SEGMENTS_PER_CALL[op](w) + payload bytes / BYTES_PER_SEGMENT
             + process groups made x SEGMENTS_PER_GROUP(w) + store requests x 2
    session:   + BASE_SEGMENTS

The record is taken only where it means something: the network namespace holds nothing but `lo`
(the sandbox's own; `none` shares the host's), and every rank wrote its totals and made no NCCL group
(NCCL traffic is not on these sockets; on GPU NCCL's own counters would be the source, see
docs/security.md). Stdlib only.
"""

import json
import os

# Data segments per rank per call, by op, as a function of the world size (upper bounds: measured
# gloo values are all_reduce 12(w-1), broadcast <= 1.5 + (w-2), barrier 2-4 at w=2 and 6 at w=3).
_RING = lambda w: 14 * (w - 1) + 2  # noqa: E731 - an op of the all-reduce family, or unknown
SEGMENTS_PER_CALL = {
    "all_reduce": lambda w: 13 * (w - 1) + 1,
    "all_reduce_coalesced": _RING,
    "reduce_scatter": _RING,
    "reduce_scatter_tensor": _RING,
    "all_gather": _RING,
    "all_gather_into_tensor": _RING,
    "all_gather_coalesced": _RING,
    "all_to_all": _RING,
    "all_to_all_single": _RING,
    "broadcast": lambda w: 2 * (w - 1) + 1,
    "reduce": lambda w: 4 * (w - 1) + 4,
    "gather": lambda w: 4 * (w - 1) + 4,
    "scatter": lambda w: 4 * (w - 1) + 4,
    "barrier": lambda w: 4 * (w - 1) + 2,
    "send": lambda w: 4,
    "recv": lambda w: 2,
}
# The payload bound (the verdict): at most how many TCP payload bytes the counted calls can have put
# on lo. Per byte a rank counted, by op, at world size w (gloo, torch 1.13, measured 2026-12-03 with
# 1 MiB tensors at w = 2, 3, 4: all_reduce 1.000 / 1.337 / 1.501 = 2(w-1)/w; all_gather 1.008 / 2.000
# / 3.002 = w-1; broadcast, gather, scatter, all_to_all_single (w-1)/w; reduce (w^2-1)/w^2; a send
# its tensor once, a recv nothing). An op not listed gets the largest, w-1.
BYTES_PER_COUNTED_BYTE = {
    "all_reduce": lambda w: 2.0 * (w - 1) / w,
    "all_reduce_coalesced": lambda w: 2.0 * (w - 1) / w,
    "broadcast": lambda w: 1.0,
    "gather": lambda w: 1.0,
    "scatter": lambda w: 1.0,
    "reduce": lambda w: 1.0,
    "all_to_all": lambda w: 1.0,
    "all_to_all_single": lambda w: 1.0,
    "send": lambda w: 1.0,
    "isend": lambda w: 1.0,
    "recv": lambda w: 0.0,
    "irecv": lambda w: 0.0,
    "barrier": lambda w: 0.0,
}
_WIDEST = lambda w: float(max(1, w - 1))  # noqa: E731 - all_gather and anything not measured
# Framing and control messages per counted call and rank: measured at most 186 (w-1) bytes (all_gather
# of one float: 192, 376, 558 bytes per call at w = 2, 3, 4; all_reduce 91, 128, 148; barrier 92, 183).
BYTES_PER_CALL = lambda w: 320 * max(1, w - 1)  # noqa: E731
# A process group made (per rank): its connections' set-up, measured ~490 bytes per rank at w=3.
BYTES_PER_GROUP = lambda w: 4096 * max(1, w)  # noqa: E731
BYTES_PER_STORE_OP = 256  # a request and its reply beyond the keys and values counted
STORE_FACTOR = 4  # a store byte counted by a rank may cross lo as request, reply and a waiter's copy
BASE_BYTES = lambda w: (64 + 16 * w) << 10  # noqa: E731 - rendezvous and teardown: measured < 2 KiB
# The expected payload (not a bound): what honest gloo traffic of the counted calls is, op by op, as
# measured (see BYTES_PER_COUNTED_BYTE), plus framing per call. Its residual (payload less expected)
# is what no counter explains; the grader compares a submission's residual with gold's own in the
# same session (src/grader/grade/wire-judge.ts), where a smuggled collective shows however small a
# share of the session it is.
EXACT_PER_COUNTED_BYTE = {
    "broadcast": lambda w: (w - 1.0) / w,
    "gather": lambda w: (w - 1.0) / w,
    "scatter": lambda w: (w - 1.0) / w,
    "all_to_all": lambda w: (w - 1.0) / w,
    "all_to_all_single": lambda w: (w - 1.0) / w,
    "reduce": lambda w: (w * w - 1.0) / (w * w),
}
FRAMING_PER_CALL = lambda w: 200 * max(1, w - 1)  # noqa: E731 - measured 48-186 (w-1) bytes per call and rank
EXPECTED_PER_GROUP = lambda w: 300 * max(1, w)  # noqa: E731 - a group's set-up, measured ~490 bytes per rank at w=3
# What one retransmitted segment is taken to have carried when judging (not its most, 64 KiB): gloo's
# retransmissions on lo are small. Measured: gold's grad-bucketing probe session (w=2) carried 60.12,
# 60.20 and 60.15 MB with 24, 28 and 13 retransmissions, and a submission 67.05 and 67.35 MB with 27
# and 81: ~5.5 KB per retransmitted segment at most.
RETRANS_ALLOWANCE = 16384
# The verdict holds only beyond this multiple of the bound (the bound is already an upper one).
PAYLOAD_TOLERANCE = 1.25
BYTES_PER_SEGMENT = 32768  # a large payload travels in segments of up to 64 KiB on lo
SEGMENTS_PER_GROUP = lambda w: 20 * (w - 1) + 12  # noqa: E731 - measured 29 per rank at w=2, 48 at w=3
BASE_SEGMENTS = 200  # the launcher's rendezvous, init's store traffic beyond its counted requests
# Per packet on lo: Ethernet 14 + IPv4 20 / IPv6 40 + TCP 20 with the 12 bytes of timestamps.
HEADER_V4 = 66
HEADER_V6 = 86
MAX_SEGMENT_PAYLOAD = 65483  # lo's MTU 65536 less the IPv4 and TCP headers: the most one retransmission carried
COMM_SUFFIX = "comm.json"


def _netstat_field(text, group, field):
    lines = text.splitlines()
    for head, values in zip(lines, lines[1:]):
        if head.startswith(group + ":") and values.startswith(group + ":"):
            names, nums = head.split()[1:], values.split()[1:]
            if field in names and len(nums) == len(names):
                return int(nums[names.index(field)])
    return None


def _table(text, group):
    """{field: int} of one `Group: names` / `Group: values` pair of lines (/proc/net/snmp style)."""
    lines = text.splitlines()
    for head, values in zip(lines, lines[1:]):
        if head.startswith(group + ":") and values.startswith(group + ":"):
            names, nums = head.split()[1:], values.split()[1:]
            if len(nums) == len(names):
                return {n: int(v) for n, v in zip(names, nums) if v.lstrip("-").isdigit()}
    return {}


def _devices():
    """{interface: (tx_bytes, tx_packets)} of this network namespace."""
    out = {}
    with open("/proc/self/net/dev") as f:
        for line in f.read().splitlines()[2:]:
            if ":" not in line:
                continue
            name, rest = line.split(":", 1)
            fields = rest.split()
            out[name.strip()] = (int(fields[8]), int(fields[9]))
    return out


def _snmp6_out_packets():
    try:
        with open("/proc/self/net/snmp6") as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2 and parts[0] == "Ip6OutRequests":
                    return int(parts[1])
    except OSError:
        pass
    return 0


def snapshot():
    """The namespace's kernel counters, or {"skip": why} where they mean nothing."""
    try:
        devices = _devices()
        with open("/proc/self/net/netstat") as f:
            segments = _netstat_field(f.read(), "TcpExt", "TCPOrigDataSent")
        with open("/proc/self/net/snmp") as f:
            snmp = f.read()
    except (OSError, ValueError, IndexError) as exc:
        return {"skip": "no kernel counters (%s)" % exc}
    names = list(devices)
    if names != ["lo"]:
        return {"skip": "network namespace not private (interfaces: %s)" % ", ".join(names[:5])}
    if segments is None:
        return {"skip": "no TCPOrigDataSent in /proc/net/netstat"}
    tx_bytes, tx_packets = devices["lo"]
    return {
        "segments": segments,
        "tx_bytes": tx_bytes,
        "tx_packets": tx_packets,
        "v4_packets": _table(snmp, "Ip").get("OutRequests", 0),
        "v6_packets": _snmp6_out_packets(),
        "retrans_segments": _table(snmp, "Tcp").get("RetransSegs", 0),
    }


def _number(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def clean_comm(obj):
    """A rank's totals as the plugin writes them, typed and capped; None if it is not that."""
    if not isinstance(obj, dict):
        return None
    out = {"calls": {}, "bytes": {}}
    for key in ("calls", "bytes"):
        value = obj.get(key)
        if not isinstance(value, dict):
            return None
        for op, n in list(value.items())[:64]:
            if isinstance(op, str) and _number(n) is not None:
                out[key][op[:64]] = n
    for key in ("groups", "store_ops"):
        out[key] = _number(obj.get(key))
        if out[key] is None:
            return None
    out["store_bytes"] = _number(obj.get("store_bytes")) or 0
    refused = obj.get("refused")
    out["refused"] = [str(r)[:300] for r in refused[:20]] if isinstance(refused, list) else []
    backends = obj.get("backends")
    out["backends"] = [str(b)[:32] for b in backends[:16]] if isinstance(backends, list) else []
    out["backend_counting"] = obj.get("backend_counting") is True
    return out


def read_comm(rank, out_fd):
    from infradev_outputs import rank_name, read_bytes

    data = read_bytes(rank_name(rank, COMM_SUFFIX), out_fd, cap=1 << 20)
    if not data:
        return None
    try:
        return clean_comm(json.loads(data.decode("utf-8", "replace")))
    except ValueError:
        return None


def explained_parts(comms, world):
    """The most data segments the ranks' reported totals explain, by source (see the docstring)."""
    parts = {"base": BASE_SEGMENTS, "calls": 0, "bytes": 0, "groups": 0, "store": 0}
    for comm in comms:
        for op, n in comm["calls"].items():
            parts["calls"] += n * SEGMENTS_PER_CALL.get(op, _RING)(world)
        parts["bytes"] += sum(comm["bytes"].values()) // BYTES_PER_SEGMENT
        parts["groups"] += comm["groups"] * SEGMENTS_PER_GROUP(world)
        parts["store"] += 2 * comm["store_ops"]
    return parts


def payload_bound(comms, world):
    """(bound, parts): the most TCP payload bytes the ranks' counted calls, groups and store requests
    can have put on lo, by source, before PAYLOAD_TOLERANCE."""
    parts = {"base": BASE_BYTES(world), "bytes": 0, "calls": 0, "groups": 0, "store": 0}
    for comm in comms:
        for op, n in comm["bytes"].items():
            parts["bytes"] += int(n * BYTES_PER_COUNTED_BYTE.get(op, _WIDEST)(world))
        parts["calls"] += sum(comm["calls"].values()) * BYTES_PER_CALL(world)
        parts["groups"] += comm["groups"] * BYTES_PER_GROUP(world)
        parts["store"] += comm["store_ops"] * BYTES_PER_STORE_OP + comm.get("store_bytes", 0) * STORE_FACTOR
    return sum(parts.values()), parts


def expected_payload(comms, world):
    """(expected bytes, counted bytes by op): the payload honest gloo traffic of the counted calls puts
    on lo, as measured per op (EXACT_PER_COUNTED_BYTE, else BYTES_PER_COUNTED_BYTE), with framing, the
    store's requests and the process groups' set-up."""
    total = 0.0
    by_op = {}
    for comm in comms:
        for op, n in comm["bytes"].items():
            by_op[op] = by_op.get(op, 0) + n
            ratio = EXACT_PER_COUNTED_BYTE.get(op) or BYTES_PER_COUNTED_BYTE.get(op, _WIDEST)
            total += n * ratio(world)
        total += sum(comm["calls"].values()) * FRAMING_PER_CALL(world)
        total += comm["store_ops"] * BYTES_PER_STORE_OP + comm.get("store_bytes", 0)
        total += comm["groups"] * EXPECTED_PER_GROUP(world)
    return int(total), by_op


def _delta(before, after, key):
    return max(0, after.get(key, 0) - before.get(key, 0))


def check(before, after, comms, world):
    """The session's wire record (a measurement, not a verdict): the kernel's figures, what the ranks'
    totals explain or counted, and their ratios; or `skip` with the reason it does not apply."""
    if "skip" in before or "skip" in after:
        return {"skip": before.get("skip") or after.get("skip")}
    if any(c is None for c in comms):
        return {"skip": "a rank wrote no collective totals"}
    if any(b == "nccl" for c in comms for b in c["backends"]):
        return {"skip": "NCCL groups: their traffic is not on these sockets"}
    measured = _delta(before, after, "segments")
    parts = explained_parts(comms, world)
    explained = sum(parts.values())
    v4, v6 = _delta(before, after, "v4_packets"), _delta(before, after, "v6_packets")
    payload = max(0, _delta(before, after, "tx_bytes") - HEADER_V4 * v4 - HEADER_V6 * v6)
    retrans = _delta(before, after, "retrans_segments")
    counted = sum(n for c in comms for n in c["bytes"].values())
    calls = sum(n for c in comms for n in c["calls"].values())
    payload_min = max(0, payload - MAX_SEGMENT_PAYLOAD * retrans)
    bound, bound_by = payload_bound(comms, world)
    expected, by_op = expected_payload(comms, world)
    return {
        "measured_segments": measured,
        "explained_segments": explained,
        "explained_by": parts,
        "segments_ratio": round(measured / explained, 3) if explained else None,
        "tx_packets": _delta(before, after, "tx_packets"),
        "retrans_segments": retrans,
        "payload_bytes": payload,
        "payload_bytes_min": payload_min,
        "counted_bytes": counted,
        "payload_ratio": round(payload / counted, 3) if counted else None,
        "calls": calls,
        "counted_by_op": dict(sorted(by_op.items())[:64]),
        "expected_payload": expected,
        # What no counted call explains: at most (raw payload) and at least (retransmissions taken out).
        "residual_bytes_max": payload - expected,
        "residual_bytes_min": payload_min - expected,
        # The residual the grader judges: retransmissions taken out at RETRANS_ALLOWANCE each.
        "residual_bytes_judged": payload - RETRANS_ALLOWANCE * retrans - expected,
        # What the expected payload counted per unit, and how many of each: the per-unit figures are
        # upper estimates, so a session with fewer units than gold's is owed the difference
        # (src/grader/grade/wire-judge.ts).
        "expected_units": {
            "calls": calls,
            "groups": sum(c["groups"] for c in comms),
            "store_ops": sum(c["store_ops"] for c in comms),
        },
        "expected_unit_bytes": {"calls": FRAMING_PER_CALL(world), "groups": EXPECTED_PER_GROUP(world), "store_ops": BYTES_PER_STORE_OP},
        "payload_bound": bound,
        "payload_bound_by": bound_by,
        "bound_ratio": round(payload_min / bound, 3) if bound else None,
        # The verdict: lo carried more than every counted call, group and store request can explain.
        "verdict": payload_min > PAYLOAD_TOLERANCE * bound,
    }
