#!/bin/bash
# Everything issue 6 (and issue 7's one-GPU part) asks to show, in one device call.
#   bash bench/gpu_run_all.sh [sections]     sections: env,doctor,timings,probecost,matrix,launch,gb,node,demo (default: all but probecost, demo)
# Writes under $OUT (at most 8 files): log.txt, doctor.json, timings.json, matrix-*.json, launch.json, demo.json.
set -u
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
SECTIONS=${1:-env,doctor,timings,matrix,launch,gb,node}
PY=${PY:-python3}
has() { [[ ",$SECTIONS," == *",$1,"* ]]; }
say() { echo; echo "######## $* ($(date +%T))"; }
T0=$(date +%s)
{
if has env; then
  say env
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  $PY -c 'import sys, torch, pytest; print(sys.executable, sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count(), "pytest", pytest.__version__)'
  for t in git patch bwrap node torchrun xz; do printf '%s: %s\n' $t "$(command -v $t || echo missing)"; done
fi
if has doctor; then
  say "doctor (python side): infradev_doctor.py --gpu"
  $PY python/host/infradev_doctor.py --gpu > "$OUT/doctor.json"; echo "exit $?"
  $PY -c 'import json,sys; r=json.load(open(sys.argv[1])); [print("  %-10s %-5s %s" % (k, {True:"ok",False:"WARN" if k in ("bwrap","torchrun") else "FAIL",None:"n/a"}[v["ok"]], v["detail"])) for k,v in r["checks"].items()]' "$OUT/doctor.json"
fi
if has timings; then
  say "timings: decode graph vs eager, probe overhead, 1 GiB peak, NCCL vs gloo bytes"
  timeout 240 $PY bench/gpu_timings.py --out "$OUT/timings.json"; echo "exit $?"
fi
if has probecost; then
  say "measure()'s fixed cost on CUDA, piece by piece, and a prototype that reads the allocator stats once"
  timeout 120 $PY bench/gpu_timings.py --out "$OUT/probecost.json" --skip decode,peak,train,bytes; echo "exit $?"
fi
if has matrix; then
  say "cuda-graph-decode: variants x modes through the launcher"
  timeout 300 $PY bench/gpu_task_matrix.py --task tasks/cuda-graph-decode --out "$OUT" --jobs 1; echo "exit $?"
fi
if has launch; then
  say "launcher vs plain torchrun, 1 rank over NCCL"
  timeout 150 $PY bench/gpu_launch_overhead.py --out "$OUT/launch.json" --repeats 3; echo "exit $?"
fi
if has gb; then
  say "grad-bucketing on CUDA + NCCL, 1 rank (launcher builtin)"
  timeout 240 $PY bench/gpu_task_matrix.py --task tasks/grad-bucketing --out "$OUT" --jobs 5 \
    --ranks 1 --env NANOINFRA_DEVICE=cuda --env NANOINFRA_BACKEND=nccl; echo "exit $?"
  python3 - <<'PY'
import json, os
r = json.load(open(os.path.join(os.environ.get("OUT", "/tmp/gpu-out"), "matrix-grad-bucketing.json")))
print("grad-bucketing failing probes per variant (NCCL, 1 rank):")
for name, res in r["results"].items():
    for s in res.get("sessions", []):
        failing = sorted(k.split("::", 1)[1] for k, t in s["tests"].items() if t["suite"] == "probe" and t["outcome"] in ("failed", "error"))
        print("  %-32s %s" % (name, failing[:6] if failing else "-"))
PY
fi
if has node || has demo; then
  say "node + grader"
  if [ -f .devcarry/node.xz ]; then
    mkdir -p /tmp/nodebin && $PY -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .devcarry/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
    export PATH=/tmp/nodebin:$PATH
    [ -d node_modules ] || tar -xJf .devcarry/nm.tar.xz
  fi
  node --version && node dist/cli/main.js tasks list && node dist/cli/main.js doctor --gpu --skip-slow; echo "doctor exit $?"
  if has demo; then
    rm -rf /tmp/gt && mkdir -p /tmp/gt && cp -r tasks/cuda-graph-decode /tmp/gt/
    timeout ${DEMO_TIMEOUT:-420} node dist/cli/main.js demo --tasks-dir /tmp/gt --sandbox none --out /tmp/demo-out --calibration-dir /tmp/demo-cal --json > "$OUT/demo.json" 2> "$OUT/demo-progress.txt"; echo "demo exit $?"
    node dist/cli/main.js demo --tasks-dir /tmp/gt --sandbox none --out /tmp/demo-out --calibration-dir /tmp/demo-cal 2>/dev/null; echo "demo table exit $?"
  fi
fi
say "done in $(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$OUT/log.txt"
