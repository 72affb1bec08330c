"""What the ranks sent on the wire, counted by the kernel, against what their collective counters say.

The collective counters (infradev_probe._collectives) run inside the ranks, beside the code under
test: code that calls an uncounted original of a collective (dug out of a closure, a backend method
reached some other way) is not counted there. Its bytes still cross a socket. With gloo on CPU every
collective is TCP over the loopback of the sandbox's own network namespace, and the kernel counts
every segment that carried data in that namespace (`TcpExt: TCPOrigDataSent` in /proc/net/netstat,
retransmissions and pure ACKs excluded). The ranks cannot lower that counter, and closing a socket
does not take its segments back. The launcher reads it before the ranks start and after they are all
gone, and compares it with the most that the ranks' reported totals (calls per op, process groups
made, store requests; rank{r}.comm.json, written by the plugin when pytest ends) can explain:

    per rank:  calls of op x SEGMENTS_PER_CALL[op](w) + payload bytes / BYTES_PER_SEGMENT
             + process groups made x SEGMENTS_PER_GROUP(w) + store requests x 2
    session:   + BASE_SEGMENTS

The constants are upper bounds, measured on torch 1.13 + gloo (world sizes 2 and 3, see
docs/security.md) with a margin: honest traffic always stays below the bound, and so a session whose
kernel count exceeds the bound by more than TOLERANCE (a factor) sent traffic no counted call explains.
One uncounted all-reduce costs about 12 x (w - 1) data segments per rank, whatever its size.

The check runs only where it means something: the network namespace holds nothing but `lo` (the
sandbox's own; `none` shares the host's), and every rank wrote its totals and made no NCCL group
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
BYTES_PER_SEGMENT = 32768  # a large payload travels in segments of up to 64 KiB on lo
SEGMENTS_PER_GROUP = lambda w: 20 * (w - 1) + 12  # noqa: E731 - measured 29 per rank at w=2, 48 at w=3
BASE_SEGMENTS = 200  # the launcher's rendezvous, init's store traffic beyond its counted requests
# Honest sessions vary more than the bounds' margin under load: grad-bucketing's gold official session
# (w=2) sent 2,019, 2,342 and 3,959 data segments in three runs on a shared 2-core machine (explained:
# about 3,050-3,600). 3x keeps every honest run seen below it; it catches only blatant smuggling.
TOLERANCE = 3.0
COMM_SUFFIX = "comm.json"


def _netstat_field(text, group, field):
    lines = text.splitlines()
    for head, values in zip(lines, lines[1:]):
        if head.startswith(group + ":") and values.startswith(group + ":"):
            names, nums = head.split()[1:], values.split()[1:]
            if field in names and len(nums) == len(names):
                return int(nums[names.index(field)])
    return None


def _interfaces():
    with open("/proc/self/net/dev") as f:
        return [line.split(":", 1)[0].strip() for line in f.read().splitlines()[2:] if ":" in line]


def snapshot():
    """{"segments": n} in this network namespace, or {"skip": why} where the count means nothing."""
    try:
        names = _interfaces()
        with open("/proc/self/net/netstat") as f:
            segments = _netstat_field(f.read(), "TcpExt", "TCPOrigDataSent")
    except (OSError, ValueError) as exc:
        return {"skip": "no kernel counters (%s)" % exc}
    if names != ["lo"]:
        return {"skip": "network namespace not private (interfaces: %s)" % ", ".join(names[:5])}
    if segments is None:
        return {"skip": "no TCPOrigDataSent in /proc/net/netstat"}
    return {"segments": segments}


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


def check(before, after, comms, world):
    """The session's wire record: measured and explained segments and whether the first exceeds the
    second beyond TOLERANCE (`excess`), or `skip` with the reason the check does not apply."""
    if "skip" in before or "skip" in after:
        return {"skip": before.get("skip") or after.get("skip")}
    if any(c is None for c in comms):
        return {"skip": "a rank wrote no collective totals"}
    if any(b == "nccl" for c in comms for b in c["backends"]):
        return {"skip": "NCCL groups: their traffic is not on these sockets"}
    measured = max(0, after["segments"] - before["segments"])
    parts = explained_parts(comms, world)
    explained = sum(parts.values())
    return {
        "measured_segments": measured,
        "explained_segments": explained,
        "explained_by": parts,
        "calls": sum(n for c in comms for n in c["calls"].values()),
        "tolerance": TOLERANCE,
        "excess": measured > explained * TOLERANCE,
    }
