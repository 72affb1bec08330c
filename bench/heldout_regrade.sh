#!/bin/bash
# A task's held-out-style patches (bench/heldout/<task>/) graded here (local bwrap sandbox, the task's
# own Python) with `grade-many`, then summarised per patch: Set A / Set B resolved, failing probe
# cases. Repeats issue 22's measurement after a grading change (verdicts must not move).
#   TASK=weight-sync-delta bash bench/heldout_regrade.sh      # -> $OUT/heldout.json (default /tmp/heldout-regrade)
#   ONLY='correct_*' TASK=... bash bench/heldout_regrade.sh   # only the patches whose file name matches
set -u
TASK=${TASK:-weight-sync-delta}
OUT=${OUT:-/tmp/heldout-regrade}
# WORK=<the folder of an interrupted run> resumes it (grade-many keeps finished runs).
WORK=${WORK:-$(mktemp -d /tmp/infradev-heldout-XXXXXX)}
mkdir -p "$OUT" "$WORK/preds"
rm -rf "$WORK/preds"; mkdir -p "$WORK/preds"
for p in bench/heldout/$TASK/${ONLY:-*}.patch; do n=$(basename "$p" .patch); cp "$p" "$WORK/preds/$TASK--${n//_/-}.patch"; done
T0=$(date +%s)
node dist/cli/main.js grade-many --predictions "$WORK/preds" --out "$WORK/camp" --sandbox local \
  --concurrency "${JOBS:-2}" --calibration-dir "$WORK/cal" > "$OUT/grade-many.out" 2> "$OUT/grade-many.err"
echo "grade-many exit $? after $(( $(date +%s) - T0 )) s"
/usr/bin/python3 - "$WORK/camp" "$OUT/heldout.json" <<'PY'
import glob, json, os, sys
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "runs", "*", "grade.json"))):
    g = json.load(open(f))
    name = os.path.basename(os.path.dirname(f))
    fails = sorted({c["id"].split("::")[-1] for c in g.get("cases", []) if c.get("suite") == "probe" and c.get("outcome") != "passed"})
    rows[name] = {"status": g.get("status"), "set_a_resolved": (g.get("official") or {}).get("resolved"), "set_b_resolved": (g.get("with_probes") or {}).get("resolved"), "failing_probes": fails}
    print("%-60s %-8s A=%-5s B=%-5s %d failing probe case(s)" % (name, g.get("status"), rows[name]["set_a_resolved"], rows[name]["set_b_resolved"], len(fails)))
json.dump(rows, open(sys.argv[2], "w"), indent=1)
PY
rm -rf "$WORK"
