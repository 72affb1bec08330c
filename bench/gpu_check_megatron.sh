#!/bin/bash
# `infradev task check megatron-param-layout` on the device machine. Carried under .device/mega/:
# wt.tar.xz (this worktree's files + dist/), the bundle, and (from bench/) .device/node.xz and
# .device/nm.tar.xz as bench/gpu_task_check.sh uses them. Resumable: the check's folder and the
# calibration go back as $OUT/state.tar.xz; carry it as .device/mega/state.tar.xz to go on.
#   MATRIX=1 JOBS=8 MUTANTS=40 TIME_LIMIT_MIN=4 HARD_S=420 bash bench/gpu_check_megatron.sh
# wt.tar.xz from a checkout with dist/ built:
#   (git ls-files -co --exclude-standard; find dist -type f) | tar -cJf .device/mega/wt.tar.xz -T -
set -u
OUT=${OUT:-/tmp/gpu-check-out}; mkdir -p "$OUT"
C=$(realpath .device/mega)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export INFRADEV_GIT_CACHE=/tmp/infradev-git
T0=$(date +%s)
mkdir -p /tmp/nodebin /tmp/wt /opt/data && touch /opt/data/.offline
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .device/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
export PATH=/tmp/nodebin:$PATH
tar -xJf "$C/wt.tar.xz" -C /tmp/wt && (cd /tmp/wt && tar -xJf "$OLDPWD/.device/nm.tar.xz")
if [ -f "$C/state.tar.xz" ]; then tar -xJf "$C/state.tar.xz" -C /; echo "resumed from the carried state"; fi
cd /tmp/wt
node dist/cli/main.js tasks cache import "$C/megatron-lm-pr3812.bundle" --url https://github.com/NVIDIA/Megatron-LM.git --shallow 40627d00d96cef74aceab35e0e3c170e900f3aff
echo "setup $(( $(date +%s) - T0 )) s"
if [ "${MATRIX:-0}" = 1 ]; then BUNDLE=$C/megatron-lm-pr3812.bundle TASK_DIR=tasks/megatron-param-layout OUT=/tmp/matrix bash bench/gpu_megatron_matrix.sh > "$OUT/matrix.txt" 2>&1; tail -14 "$OUT/matrix.txt"
  # GATE=1: no check when golden fails a probe or an official test (the matrix printed why).
  if [ "${GATE:-0}" = 1 ] && grep -E '^golden ' "$OUT/matrix.txt" | grep -q 'FAIL'; then echo "golden fails in the matrix: no check"; exit 3; fi; fi
# PRECHECK=<probe file>: that probe module alone on golden first; a module gold does not pass is
# taken out of the task (with its promise, the last entry of promises.yaml) before the check.
if [ -n "${PRECHECK:-}" ]; then
  P=/tmp/precheck; rm -rf $P; git init -q --bare $P/m && cp "$INFRADEV_GIT_CACHE"/*.git/shallow $P/m/ && git -C $P/m fetch -q "$C/megatron-lm-pr3812.bundle" 'refs/tags/*:refs/tags/*'
  git -C $P/m worktree add -q --detach $P/g merge && mkdir -p $P/g/tests/unit_tests/distributed/px && cp tasks/megatron-param-layout/hidden/probes/*.py $P/g/tests/unit_tests/distributed/px/
  (cd $P/g && timeout 200 torchrun --standalone --nproc_per_node 1 -m pytest -p no:cacheprovider -q -o addopts= tests/unit_tests/distributed/px/$PRECHECK > "$OUT/precheck.txt" 2>&1); rc=$?
  grep -E "passed|failed|Error" "$OUT/precheck.txt" | tail -8; echo "precheck $PRECHECK on golden: rc=$rc"
  if [ $rc != 0 ]; then rm tasks/megatron-param-layout/hidden/probes/$PRECHECK; python3 - <<'PY'
import re
p = "tasks/megatron-param-layout/hidden/promises.yaml"; s = open(p).read()
open(p, "w").write(s[: s.rindex("\n- id: ") + 1])
PY
  echo "took $PRECHECK and its promise out"; fi
fi
M=(); [ -n "${MUTANTS:-}" ] && M=(--mutants "$MUTANTS")
timeout "${HARD_S:-420}" node dist/cli/main.js task check megatron-param-layout --sandbox none --out /tmp/infradev-check \
  --calibration-dir /tmp/infradev-cal --jobs "${JOBS:-8}" --time-limit "${TIME_LIMIT_MIN:-4}" "${M[@]}" \
  --html "$OUT/check.html" --json > "$OUT/report.json" 2> "$OUT/progress.txt"
echo "check exit $? after $(( $(date +%s) - T0 )) s"
tail -25 "$OUT/progress.txt"
(cd / && find tmp/infradev-check tmp/infradev-cal -name '*.json' -o -name '*.patch' | tar -cJf "$OUT/state.tar.xz" -T -)
ls -la "$OUT"
