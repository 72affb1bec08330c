#!/bin/bash
# verl-grpo-vectorized (verl #3635) on the device machine, one call (≤ 10 min):
#   (a) `infradev curate --run` on the PR's merge commit: fail→pass / pass→pass counts (JSON);
#   (b) `infradev task check verl-grpo-vectorized` with a mutant sample (JSON + HTML).
# The task's tests are CPU tests; the H200 image is used for its Python (torch 2.11, pytest 9).
# Prerequisites in the checkout (run from the repository root):
#   - dist/ built; .device/i25/{node.xz,nm.tar.xz} (bench/gpu_issue25.sh --prepare-only writes them);
#   - the task folder ($TASKS_DIR/verl-grpo-vectorized, default tasks/) with
#     hidden/upstream/verl-grpo-vectorized.bundle (1.6 MiB) and env/pystubs/ (import-only stand-ins
#     for ray, tensordict, omegaconf, codetiming, transformers). task.yaml's env.pythonpath names
#     env/pystubs: every sandbox mounts a copy read-only and puts it first on PYTHONPATH, so nothing
#     is copied to /opt any more; curate --run gets the same folder with --pythonpath.
#   run(command="bash tasks/verl-grpo-vectorized/gpu_verl_grpo.sh", carry=["dist", ".device/i25"], timeout_s=600)
# Knobs: MUTANTS=40 JOBS=8 TIME_LIMIT_MIN=4 CHECK_S=420 CURATE_S=150 SKIP_CURATE=1.
# 2026-12-03 H200 (SKIP_CURATE=1 MUTANTS=60 JOBS=8 TIME_LIMIT_MIN=4 CHECK_S=480, 59 probe cases): passed, 190 s wall (check 181.6 s); mutants 203 generated, 60 graded, 59 killed (40 official, 19 probes only), 1 survived (group_mean_std:drop-kw#7), 43 equivalent; score 0.983 — gpu-check-summary-5.json.
# 2026-12-03 H200 (SKIP_CURATE=1 MUTANTS=120 JOBS=14 TIME_LIMIT_MIN=4 CHECK_S=500, 59 probe cases): passed, 257 s wall (check 249 s); mutants 203 generated, 120 graded, 118 killed (73 official, 45 probes only), 2 survived (group_mean_std:drop-kw#7, as_torch_index:drop-kw#13; both triaged equivalent, now in hidden/mutants.yaml), 43 equivalent; score 0.983 — gpu-check-summary-6.json.
set -u
C=.device/i25
TASKS_DIR=${TASKS_DIR:-tasks}
T=$TASKS_DIR/verl-grpo-vectorized
BASE=c03dcb0f8f0ba09354f16dbfad93f750a67a9953
MERGE=4ff3ce2fedda1e078ae759c97a5596c43ceb053c
URL=https://github.com/volcengine/verl.git
BUNDLE=$T/hidden/upstream/verl-grpo-vectorized.bundle
FINAL=${OUT:-/tmp/gpu-verl-out}
OUT=$FINAL/all
mkdir -p "$OUT"
trap 'tar -C "$OUT" -czf "$FINAL/all.tar.gz" . 2>/dev/null' EXIT
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export INFRADEV_GIT_CACHE=/tmp/infradev-git
T0=$(date +%s)
WALL="$OUT/walls.txt"; : > "$WALL"
step() {
  local name=$1 limit=$2; shift 2
  local t=$(date +%s.%N)
  timeout "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  local rc=$?
  printf '%-12s rc=%-3s wall=%6.1f s (limit %s s)\n' "$name" "$rc" "$(awk -v a="$(date +%s.%N)" -v b="$t" 'BEGIN{print a-b}')" "$limit" | tee -a "$WALL"
  return $rc
}
setup() {
  set -e
  mkdir -p /tmp/nodebin
  python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' $C/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
  [ -d node_modules ] || tar -xJf $C/nm.tar.xz
  /tmp/nodebin/node --version
  python3 -c 'import sys, torch, numpy, pytest; print(sys.version.split()[0], "torch", torch.__version__, "numpy", numpy.__version__, "pytest", pytest.__version__)'
  /tmp/nodebin/node dist/cli/main.js tasks cache import $BUNDLE --url $URL --shallow $BASE
  rm -rf /tmp/verl.git && git init -q --bare /tmp/verl.git && echo $BASE > /tmp/verl.git/shallow
  git -C /tmp/verl.git fetch -q "$PWD/$BUNDLE" 'refs/tags/*:refs/tags/*'
  git -C /tmp/verl.git diff --stat base merge | tail -1
}
export PATH=/tmp/nodebin:$PATH C T BASE URL BUNDLE
export -f setup
step setup 120 bash -c setup || { echo "setup failed:"; tail -20 "$OUT/setup.err"; exit 1; }

if [ -z "${SKIP_CURATE:-}" ]; then
  ( step curate "$(( ${CURATE_S:-150} + 30 ))" node dist/cli/main.js curate --repo /tmp/verl.git --branch merge --only "$MERGE" \
      --run --sandbox none --python python3 --nproc 1 --test-timeout 120 --run-timeout "${CURATE_S:-150}" \
      --pythonpath "$T/env/pystubs" --env VERL_FORCE_DEVICE=cpu --env OMP_NUM_THREADS=4 \
      --work /tmp/curate-verl --out "$OUT/curate.json" --json ) &
  PC=$!
fi
step check "${CHECK_S:-420}" node dist/cli/main.js task check verl-grpo-vectorized --tasks-dir "$TASKS_DIR" --sandbox none --python python3 \
  --out /tmp/infradev-check --calibration-dir /tmp/infradev-cal --jobs "${JOBS:-8}" \
  --mutants "${MUTANTS:-40}" --time-limit "${TIME_LIMIT_MIN:-4}" --html "$OUT/check.html" --json
cp "$OUT/check.out" "$OUT/check-report.json" 2>/dev/null
[ -z "${SKIP_CURATE:-}" ] && wait $PC

python3 - "$OUT" <<'PY' | tee "$OUT/summary.json"
import json, os, sys
out = sys.argv[1]
s = {}
try:
    c = json.load(open(os.path.join(out, "curate.json")))["candidates"][0]
    r = c["run"]
    s["curate"] = {"sha": c["sha"], "verdict": r["verdict"], "fail_to_pass": len(r["fail_to_pass"]),
                   "pass_to_pass": len(r["pass_to_pass"]), "pass_to_fail": len(r["pass_to_fail"]),
                   "needs_more_gpus": len(r["needs_more_gpus"]), "other_merge_failures": len(r["merge_failures"]),
                   "base": r["base"], "merge": r["merge"]}
except Exception as e:  # noqa: BLE001
    s["curate"] = f"no result ({type(e).__name__}: {e})"
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
cp "$OUT/summary.json" "$WALL" "$FINAL/" 2>/dev/null
