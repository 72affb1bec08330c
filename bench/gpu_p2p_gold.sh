#!/bin/bash
# One device call after the Megatron tasks got their pass_to_pass suites (from bench/gpu_p2p_megatron.sh):
# gold of both calibrated (3 runs, --sandbox none, side by side on the one GPU) — every pass-to-pass
# case must pass in every run — then the pre-PR base graded (an empty patch) against that calibration:
# its pass-to-pass cases must pass too (task check's rule: a case the base fails is fail-to-pass).
# Here: build dist/; .device/i25/{node.xz,nm.tar.xz}; .device/p2p/ with both Megatron bundles.
#   run(command="bash bench/gpu_p2p_gold.sh", carry=["dist", ".device/i25", ".device/p2p"], timeout_s=600)
# Out: cal-<task>.json, base-<task>.json, summary.txt, logs.tgz.
# Run 2026-12-03 (192 s, ~3.2 device min): gold 3/3 on all 4 pass-to-pass cases of both tasks, no
# other case flaky (258 and 134 cases); the base row then used an empty patch, which is scored 0
# without running (fixed since: a patch adding one text file). The base's pass->pass is from
# bench/gpu_p2p_megatron.sh (base with merge's tests, twice).
set -u
OUT=${OUT:-/tmp/gpu-p2p-gold}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 INFRADEV_GIT_CACHE=/tmp/infradev-git
T0=$(date +%s)
mkdir -p /tmp/nodebin /tmp/lg
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .device/i25/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
export PATH=/tmp/nodebin:$PATH
[ -d node_modules ] || tar -xJf .device/i25/nm.tar.xz
URL=https://github.com/NVIDIA/Megatron-LM.git
node dist/cli/main.js tasks cache import .device/p2p/megatron-lm-pr3812.bundle --url $URL --shallow 40627d00d96cef74aceab35e0e3c170e900f3aff > /tmp/lg/import.txt 2>&1
node dist/cli/main.js tasks cache import .device/p2p/megatron-lm-pr4028.bundle --url $URL --shallow d45fa3e8e140fe5262179f6f94823869b89026a7 >> /tmp/lg/import.txt 2>&1
# The base as a submission: an empty patch is scored 0 without running, so add one new text file.
printf 'diff --git a/BASE_AS_SUBMISSION.txt b/BASE_AS_SUBMISSION.txt\nnew file mode 100644\n--- /dev/null\n+++ b/BASE_AS_SUBMISSION.txt\n@@ -0,0 +1 @@\n+base\n' > /tmp/base.patch
TASKS="megatron-param-layout megatron-fp32-local-accum"
for t in $TASKS; do
  (s=$(date +%s)
   timeout "${CAL_S:-380}" node dist/cli/main.js calibrate --task $t --sandbox none --calibration-dir /tmp/cal-$t --json > "$OUT/cal-$t.json" 2> /tmp/lg/cal-$t.txt
   echo "calibrate $t rc=$? $(( $(date +%s) - s )) s"
   s=$(date +%s)
   timeout "${BASE_S:-150}" node dist/cli/main.js grade --task $t --patch /tmp/base.patch --sandbox none --calibration-dir /tmp/cal-$t --out /tmp/base-$t --json > "$OUT/base-$t.json" 2> /tmp/lg/base-$t.txt
   echo "grade base $t rc=$? $(( $(date +%s) - s )) s") &
done
wait
for t in $TASKS; do
  python3 - "$OUT/cal-$t.json" "$OUT/base-$t.json" "$t" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
cal_f, base_f, task = sys.argv[1:4]
try:
    c = json.load(open(cal_f))
    p2p = [k for k in c["cases"] if k.get("suite") == "pass_to_pass"]
    bad = [k["id"] for k in c["cases"] if any(o != "passed" for o in k["outcomes"])]
    print(task, "gold: cases", len(c["cases"]), "pass_to_pass", len(p2p), [k["outcomes"] for k in p2p], "not passing in every run", len(bad), bad[:5])
except Exception as e:
    print(task, "no calibration:", e)
try:
    b = json.load(open(base_f))
    p2p = [k for k in b.get("cases", []) if k.get("suite") == "pass_to_pass"]
    print(task, "base: Set A", (b.get("official") or {}).get("resolved"), "pass_to_pass", [(k["id"].split("::")[-1], k["outcome"]) for k in p2p], "summary", json.dumps(b.get("pass_to_pass")))
except Exception as e:
    print(task, "no base grade:", e)
PY
done
tar -C /tmp/lg -czf "$OUT/logs.tgz" .
echo "total $(( $(date +%s) - T0 )) s"
