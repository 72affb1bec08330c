#!/bin/bash
# A task's held-out-style patches (bench/heldout/<task>/) graded on the device machine's CPUs (16
# cores; the H200 image's Python: torch 2.11) with `grade-many`, sandbox none, in one device call.
# Carry dist, .device/node.xz and .device/nm.tar.xz (bench/gpu_issue25.sh --prepare-only makes them):
#   run(command="TASK=grad-bucketing bash bench/gpu_heldout_grade.sh", carry=["dist", ".device/node.xz", ".device/nm.tar.xz"])
# Prints per patch: Set A / Set B resolved and the failing probe cases; writes $OUT/heldout.json.
# First run (2026-12-02, grad-bucketing, HARD_S=380, the session's last device minutes): 0 of 15 graded
# before the limit, with no log brought back to say where the time went (gold's calibration at world
# sizes 1, 2, 4 comes first) -- the campaign's logs are now packed into $OUT/logs.tar.gz. Give it 600 s.
set -u
TASK=${TASK:-grad-bucketing}
OUT=${OUT:-/tmp/heldout-out}
mkdir -p "$OUT" /tmp/nodebin /tmp/preds
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .device/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
export PATH=/tmp/nodebin:$PATH PYTHONUNBUFFERED=1
[ -d node_modules ] || tar -xJf .device/nm.tar.xz
for p in bench/heldout/$TASK/*.patch; do n=$(basename "$p" .patch); cp "$p" "/tmp/preds/$TASK--${n//_/-}.patch"; done
T0=$(date +%s)
timeout "${HARD_S:-540}" node dist/cli/main.js grade-many --predictions /tmp/preds --out /tmp/heldout-camp --sandbox none \
  --python python3 --concurrency "${JOBS:-8}" --calibration-dir /tmp/heldout-cal > "$OUT/grade-many.out" 2> "$OUT/grade-many.err"
echo "grade-many exit $? after $(( $(date +%s) - T0 )) s"; tail -3 "$OUT/grade-many.err"
tar -C /tmp/heldout-camp -czf "$OUT/logs.tar.gz" logs jobs 2>/dev/null
python3 - /tmp/heldout-camp "$OUT/heldout.json" <<'PY'
import glob, json, os, sys
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "runs", "*", "grade.json"))):
    g = json.load(open(f))
    name = os.path.basename(os.path.dirname(f))
    fails = sorted({(c.get("probe") or {}).get("promise") or c["id"].split("::")[-1][:40] for c in g.get("cases", []) if c.get("label") and c.get("suite") == "probe"})
    rows.append({"run": name, "status": g.get("status"), "set_a": (g.get("official") or {}).get("resolved"), "set_b": (g.get("with_probes") or {}).get("resolved"), "failing_probes": fails[:8]})
    print("%-60s %-8s A=%-5s B=%-5s %s" % (name, g.get("status"), rows[-1]["set_a"], rows[-1]["set_b"], ",".join(fails[:5])))
json.dump(rows, open(sys.argv[2], "w"), indent=1)
PY
