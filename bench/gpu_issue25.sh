#!/bin/bash
# Issue 25's GPU part in one device call (one H200, ≤ 12 minutes of wall in all):
#   (a) `infradev curate --run` on the bundled Megatron-LM commits, limited to the merge commits of
#       #3812 and #4028: fail→pass / pass→pass / needs-more-GPUs counts (JSON);
#   (b) `infradev task check megatron-fp32-local-accum` with a small mutant sample (JSON + HTML).
# Each step is bounded by `timeout`; every step's stdout/stderr and wall time go to $OUT.
#
# Here (CPU side, no GPU): build dist/ first, then
#   bash bench/gpu_issue25.sh --prepare-only      (run here 2026-12-02: rc 0, 56 MiB to carry, 3 CPU-min; 41 min wall under a load of 300)
# writes .device/i25/ (Node as node.xz, production node_modules as nm.tar.xz, both upstream bundles)
# and checks that every carried piece exists. On the device machine (the run tool), carry dist and
# .device/i25:
#   run(command="bash bench/gpu_issue25.sh", carry=["dist", ".device/i25"], timeout_s=600)
# Knobs: SKIP_CURATE=1 (the check alone), MUTANTS=10 JOBS=8 TIME_LIMIT_MIN=3 CHECK_S=330 CURATE_S=300 (seconds per step).
# Run 2026-12-03 (SKIP_CURATE=1 MUTANTS=10 JOBS=8 TIME_LIMIT_MIN=3 CHECK_S=400, carry dist .device/i25 .device/p2p, the #4028 bundle copied from .device/p2p into .device/i25 on the device first since .device/i25 held none; 307 s wall, check 300 s, rc 0): task check megatron-fp32-local-accum passed, every row ok incl. base; 10 mutants: 7 killed by official tests, 3 by probes, 0 survived (1 equivalent of 72): 1.000. bench/gpu_check_megatron-fp32-local-accum_p2p.json.
set -u
C=.device/i25
SHALLOW_3812=40627d00d96cef74aceab35e0e3c170e900f3aff
MERGE_3812=55b8111ad84051cd0e2106ad1f5ab35fa2ab98f1
SHALLOW_4028=d45fa3e8e140fe5262179f6f94823869b89026a7
MERGE_4028=c586f6d5663f0682ae5805ee041f3c7e1cee56c6
URL=https://github.com/NVIDIA/Megatron-LM.git
UPSTREAM=${UPSTREAM:-../shared/upstream}

if [ "${1:-}" = "--prepare-only" ]; then
  set -e
  [ -f dist/cli/main.js ] || { echo "dist/cli/main.js missing: npx tsc -p tsconfig.json && node scripts/postbuild.mjs"; exit 1; }
  mkdir -p $C
  for b in megatron-lm-pr3812.bundle megatron-lm-pr4028.bundle; do
    [ -f $C/$b ] || cp "$UPSTREAM/$b" $C/$b
    git bundle verify -q $C/$b 2>/dev/null || git bundle list-heads $C/$b > /dev/null
  done
  [ -f $C/node.xz ] || xz -T2 -6 -c "$(readlink -f "$(command -v node)")" > $C/node.xz
  if [ ! -f $C/nm.tar.xz ]; then
    # Production dependencies only (what dist/ imports), as bench/gpu_task_check.sh carries them.
    (cd node_modules/.. && npm ls --omit=dev --all --parseable 2>/dev/null | sed -n "s#^$(pwd -P)/##p; s#^$(readlink -f node_modules)/#node_modules/#p" | grep '^node_modules/' | sort -u) > $C/nm.list
    tar -chf - -T $C/nm.list | xz -T2 -6 > $C/nm.tar.xz
  fi
  node dist/cli/main.js task check --static megatron-fp32-local-accum > $C/static.txt 2>&1 && echo "static check: passed" || { echo "static check FAILED:"; tail -5 $C/static.txt; exit 1; }
  du -ch $C/*.xz $C/*.bundle dist | tail -1 | sed 's/total/carried in all (limit 64 MiB)/'
  ls -la $C
  exit 0
fi

# Everything is written under $OUT/all and packed at the end into $OUT/all.tar.gz (the device tool
# brings back at most 8 files); summary.json and walls.txt are also left beside it.
FINAL=${OUT:-/tmp/gpu-issue25-out}
OUT=$FINAL/all
mkdir -p "$OUT"
trap 'tar -C "$OUT" -czf "$FINAL/all.tar.gz" . 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export INFRADEV_GIT_CACHE=/tmp/infradev-git HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
T0=$(date +%s)
WALL="$OUT/walls.txt"; : > "$WALL"
# step NAME LIMIT_S CMD...: runs CMD under timeout, stdout/stderr to $OUT/NAME.{out,err}, wall to walls.txt.
step() {
  local name=$1 limit=$2; shift 2
  local t=$(date +%s.%N)
  timeout "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  local rc=$?
  printf '%-14s rc=%-3s wall=%6.1f s (limit %s s)\n' "$name" "$rc" "$(awk -v a="$(date +%s.%N)" -v b="$t" 'BEGIN{print a-b}')" "$limit" | tee -a "$WALL"
  return $rc
}

# --- setup: Node, node_modules, /opt/data marker, git cache, the seeded repository with both PRs ---
setup() {
  mkdir -p /tmp/nodebin /opt/data && touch /opt/data/.offline
  python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' $C/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
  [ -d node_modules ] || tar -xJf $C/nm.tar.xz
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  /tmp/nodebin/node --version; python3 -c 'import sys, torch, pytest; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "pytest", pytest.__version__)'
  # With SKIP_CURATE=1 the #3812 bundle may be left behind (the carry limit is 64 MiB): curate alone reads it.
  [ -f $C/megatron-lm-pr3812.bundle ] && /tmp/nodebin/node dist/cli/main.js tasks cache import $C/megatron-lm-pr3812.bundle --url $URL --shallow $SHALLOW_3812
  /tmp/nodebin/node dist/cli/main.js tasks cache import $C/megatron-lm-pr4028.bundle --url $URL --shallow $SHALLOW_4028
  # The repository curate reads: both bundles' commits, tags renamed per PR (both bundles tag base/merge).
  rm -rf /tmp/mega.git && git init -q --bare /tmp/mega.git
  printf '%s\n' $SHALLOW_3812 $SHALLOW_4028 > /tmp/mega.git/shallow
  [ -f $C/megatron-lm-pr3812.bundle ] && git -C /tmp/mega.git fetch -q --no-tags "$PWD/$C/megatron-lm-pr3812.bundle" 'refs/tags/*:refs/tags/pr3812/*'
  git -C /tmp/mega.git fetch -q --no-tags "$PWD/$C/megatron-lm-pr4028.bundle" 'refs/tags/*:refs/tags/pr4028/*'
  git -C /tmp/mega.git tag -l
}
export PATH=/tmp/nodebin:$PATH C URL SHALLOW_3812 SHALLOW_4028
export -f setup
step setup 120 bash -c setup || { echo "setup failed:"; tail -20 "$OUT/setup.err"; exit 1; }

# --- (a) curate --run, one per PR (each bundle is its own shallow main line: --branch names it) ---
curate_one() {  # PR MERGE
  node dist/cli/main.js curate --repo /tmp/mega.git --branch "pr$1/merge" --only "$2" --run --sandbox none \
    --python python3 --nproc 1 --parallel --test-timeout 120 --run-timeout "${CURATE_S:-300}" \
    --env HF_HUB_OFFLINE=1 --env TRANSFORMERS_OFFLINE=1 --env CUDA_DEVICE_MAX_CONNECTIONS=1 \
    --work /tmp/curate-$1 --out "$OUT/curate-$1.json" --json
}
export -f curate_one
# Both curate runs go in the background while (b) runs: the tests use a sliver of the GPU.
if [ -z "${SKIP_CURATE:-}" ]; then
( step curate-4028 "$(( ${CURATE_S:-300} + 60 ))" bash -c "curate_one 4028 $MERGE_4028" ) &
P4028=$!
( step curate-3812 "$(( ${CURATE_S:-300} + 60 ))" bash -c "curate_one 3812 $MERGE_3812" ) &
P3812=$!
fi

# --- (b) task check of the new task, a small mutant sample ---
step check "${CHECK_S:-330}" node dist/cli/main.js task check megatron-fp32-local-accum --sandbox none \
  --out /tmp/infradev-check --calibration-dir /tmp/infradev-cal --jobs "${JOBS:-8}" \
  --mutants "${MUTANTS:-10}" --time-limit "${TIME_LIMIT_MIN:-3}" --html "$OUT/check.html" --json
cp "$OUT/check.out" "$OUT/check-report.json" 2>/dev/null
[ -z "${SKIP_CURATE:-}" ] && wait $P4028 $P3812

# --- summary: what was measured (not what the issue expects) ---
python3 - "$OUT" <<'PY' | tee "$OUT/summary.json"
import collections, json, os, sys
out = sys.argv[1]
s = {}
for pr in ("3812", "4028"):
    try:
        c = json.load(open(os.path.join(out, f"curate-{pr}.json")))["candidates"][0]
        r = c["run"]
        per = collections.Counter(i.split("::")[0] for i in r["fail_to_pass"])
        s[f"curate_{pr}"] = {"sha": c["sha"], "verdict": r["verdict"], "fail_to_pass": len(r["fail_to_pass"]),
                             "fail_to_pass_per_module": dict(per), "pass_to_pass": len(r["pass_to_pass"]),
                             "needs_more_gpus": len(r["needs_more_gpus"]), "pass_to_fail": len(r["pass_to_fail"]),
                             "other_merge_failures": len(r["merge_failures"]), "base": r["base"], "merge": r["merge"]}
    except Exception as e:  # noqa: BLE001 - one line per missing piece
        s[f"curate_{pr}"] = f"no result ({type(e).__name__}: {e})"
try:
    r = json.load(open(os.path.join(out, "check-report.json")))
    s["check"] = {"passed": r["passed"], "stage": r["stage"], "duration_s": r["duration_s"], "gold": r["gold"],
                  "submissions": [{k: x.get(k) for k in ("name", "kind", "ok", "set_a", "set_b")} for x in r["submissions"]],
                  "mutants": r["mutants"], "errors": [f.get("message") for f in r["findings"] if f.get("level") == "error"]}
except Exception as e:  # noqa: BLE001
    s["check"] = f"no report ({type(e).__name__}: {e})"
print(json.dumps(s, indent=1, default=str))
PY
echo "total wall $(( $(date +%s) - T0 )) s"; cat "$WALL"
ls -la "$OUT"
cp "$OUT/summary.json" "$WALL" "$FINAL/" 2>/dev/null
