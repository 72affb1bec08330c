#!/bin/bash
# `infradev task check megatron-param-layout` on the H200 in one device call, after the pass_to_pass
# suite and the probes beside the official tests (session format 5+): gold 3x, controls, adversarial,
# alternatives, a seeded mutant sample. Here: build dist/; .device/i25/{node.xz,nm.tar.xz}; .device/p2p/
# with the #3812 bundle.
#   run(command="bash bench/gpu_check_layout.sh", carry=["dist", ".device/i25", ".device/p2p"], timeout_s=600)
# Out: report.json (check --json), check.html, progress.txt.
# Run 2026-12-03 (MUTANTS=16 TIME_LIMIT_MIN=3, 396 s): every row passed but the base, whose pass-to-pass
# cases the early stop left unscored (fixed since: the base runs its official session whole and
# pass-to-pass stands on its own cases); 16 mutants: 14 killed by the official tests, 2 by probes, 0
# survived (29 equivalent of 354): 1.000. bench/gpu_check_megatron-param-layout_p2p.json.
# Run 2026-12-03 after the base/pass-to-pass fix (HARD_S=420 MUTANTS=16 TIME_LIMIT_MIN=3; check 320 s of 321 s wall, rc 0): passed, every row ok, base too (its official session ran whole, 0 p2p cases failing); 16 mutants: 14 killed by official tests, 2 by probes, 0 survived (29 equivalent): 1.000. bench/gpu_check_megatron-param-layout_p2p_fixed.json.
set -u
OUT=${OUT:-/tmp/gpu-check-layout}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 INFRADEV_GIT_CACHE=/tmp/infradev-git
T0=$(date +%s)
mkdir -p /tmp/nodebin
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .device/i25/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
export PATH=/tmp/nodebin:$PATH
[ -d node_modules ] || tar -xJf .device/i25/nm.tar.xz
node dist/cli/main.js tasks cache import .device/p2p/megatron-lm-pr3812.bundle --url https://github.com/NVIDIA/Megatron-LM.git --shallow 40627d00d96cef74aceab35e0e3c170e900f3aff > "$OUT/import.txt" 2>&1
echo "setup $(( $(date +%s) - T0 )) s"
timeout "${HARD_S:-540}" node dist/cli/main.js task check megatron-param-layout --sandbox none --out /tmp/infradev-check \
  --calibration-dir /tmp/infradev-cal --jobs "${JOBS:-8}" --time-limit "${TIME_LIMIT_MIN:-4}" --mutants "${MUTANTS:-24}" --seed "${SEED:-5}" \
  --html "$OUT/check.html" --json > "$OUT/report.json" 2> "$OUT/progress.txt"
echo "check exit $? after $(( $(date +%s) - T0 )) s"
tail -30 "$OUT/progress.txt"
