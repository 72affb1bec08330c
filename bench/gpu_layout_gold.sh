#!/bin/bash
# One device call after the probes moved beside the official tests (session format 5): gold of every GPU
# task calibrated (3 runs each, --sandbox none, the three tasks side by side on the one GPU) — every
# official and probe case must pass in every run — and, beside them, bench/gpu_p2p_megatron.sh (which
# modules of tests/unit_tests/distributed can be the Megatron tasks' pass_to_pass suites).
# Here: build dist/; .device/i25/{node.xz,nm.tar.xz} (bench/gpu_issue25.sh --prepare-only) and
# .device/p2p/ with both Megatron bundles (cp ../shared/upstream/megatron-lm-pr*.bundle .device/p2p/).
#   run(command="bash bench/gpu_layout_gold.sh", carry=["dist", ".device/i25", ".device/p2p"], timeout_s=600)
# Out (7 files): cal-<task>.json (calibrate --json), p2p-<pr>.json, p2p.txt, logs.tgz.
set -u
OUT=${OUT:-/tmp/gpu-layout-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 INFRADEV_GIT_CACHE=/tmp/infradev-git
T0=$(date +%s)
mkdir -p /tmp/nodebin /opt/data /tmp/lg && touch /opt/data/.offline
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .device/i25/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
export PATH=/tmp/nodebin:$PATH
[ -d node_modules ] || tar -xJf .device/i25/nm.tar.xz
URL=https://github.com/NVIDIA/Megatron-LM.git
node dist/cli/main.js tasks cache import .device/p2p/megatron-lm-pr3812.bundle --url $URL --shallow 40627d00d96cef74aceab35e0e3c170e900f3aff > /tmp/lg/import.txt 2>&1
node dist/cli/main.js tasks cache import .device/p2p/megatron-lm-pr4028.bundle --url $URL --shallow d45fa3e8e140fe5262179f6f94823869b89026a7 >> /tmp/lg/import.txt 2>&1
echo "setup $(( $(date +%s) - T0 )) s"
(MODULE_S=${MODULE_S:-120} OUT=/tmp/p2p-out nice -n 10 bash bench/gpu_p2p_megatron.sh > "$OUT/p2p.txt" 2>&1; cp /tmp/p2p-out/p2p-*.json "$OUT/"; cp /tmp/p2p-out/logs.tar.gz /tmp/lg/p2p-logs.tar.gz) &
for t in megatron-param-layout megatron-fp32-local-accum cuda-graph-decode; do
  (s=$(date +%s); timeout "${CAL_S:-500}" node dist/cli/main.js calibrate --task $t --sandbox none --calibration-dir /tmp/cal-$t --json > "$OUT/cal-$t.json" 2> /tmp/lg/cal-$t.txt
   echo "calibrate $t rc=$? $(( $(date +%s) - s )) s") &
done
wait
for t in megatron-param-layout megatron-fp32-local-accum cuda-graph-decode; do
  python3 - "$OUT/cal-$t.json" "$t" <<'PY'
import json, sys
try:
    c = json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[2], "no calibration:", e); sys.exit()
cases = c.get("cases", [])
bad = [k["id"] for k in cases if any(o != "passed" for o in k.get("outcomes", []))]
probes = [k for k in cases if k.get("suite") == "probe" or "probe" in k]
print(sys.argv[2], "cases", len(cases), "probe cases", len(probes), "not passing in every run", len(bad), bad[:8])
PY
done
tar -C /tmp/lg -czf "$OUT/logs.tgz" .
echo "total $(( $(date +%s) - T0 )) s"
