#!/bin/bash
# `infradev task check` of a GPU task on the device machine (no Node there: carried as .device/node.xz
# and .device/nm.tar.xz, with dist/). Resumable across calls: the check's folder and the calibration
# cache go back as $OUT/state.tar.xz; carry it as .device/state.tar.xz to continue where it stopped.
#   TASK=cuda-graph-decode JOBS=8 TIME_LIMIT_MIN=3 HARD_S=540 bash bench/gpu_task_check.sh
set -u
OUT=${OUT:-/tmp/gpu-check-out}
TASK=${TASK:-cuda-graph-decode}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
mkdir -p /tmp/nodebin
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .device/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
export PATH=/tmp/nodebin:$PATH
[ -d node_modules ] || tar -xJf .device/nm.tar.xz
if [ -f .device/state.tar.xz ]; then tar -xJf .device/state.tar.xz -C /; echo "resumed from the carried state"; fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
node --version; python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
echo "setup $(( $(date +%s) - T0 )) s"
timeout "${HARD_S:-540}" node dist/cli/main.js task check "$TASK" --sandbox none --out /tmp/infradev-check \
  --calibration-dir /tmp/infradev-cal --jobs "${JOBS:-8}" --time-limit "${TIME_LIMIT_MIN:-3}" \
  --html "$OUT/check.html" --json > "$OUT/report.json" 2> "$OUT/progress.txt"
echo "check exit $? after $(( $(date +%s) - T0 )) s"
tail -5 "$OUT/progress.txt"
# Only results go back (logs stay): result/meta/session files of every grade, the calibration.
(cd / && find tmp/infradev-check tmp/infradev-cal -name '*.json' -o -name '*.patch' | tar -cJf "$OUT/state.tar.xz" -T -)
ls -la "$OUT"
