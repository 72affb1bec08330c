#!/bin/bash
# megatron-param-layout without infradev: every variant (base, golden, the adversarial patches, the
# alternatives) on the pre-PR tree from the bundle, merge's test dirs in place, the PR's tests and
# our probes each under `torchrun --standalone --nproc_per_node 1 -m pytest`, all variants at once
# on one GPU. A sanity run before the real `task check` (bench/gpu_task_check.sh).
#   BUNDLE=... TASK_DIR=tasks/megatron-param-layout OUT=... bash bench/gpu_megatron_matrix.sh
set -u
OUT=${OUT:-/tmp/mega-matrix}; mkdir -p "$OUT"
BUNDLE=${BUNDLE:?}; TASK_DIR=$(realpath "${TASK_DIR:?}")
BASE=40627d00d96cef74aceab35e0e3c170e900f3aff; MERGE=55b8111ad84051cd0e2106ad1f5ab35fa2ab98f1
W=/tmp/mega-w; rm -rf $W; mkdir -p $W /opt/data; touch /opt/data/.offline
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 HF_HUB_OFFLINE=1 CUDA_DEVICE_MAX_CONNECTIONS=1
git init -q --bare $W/m && echo $BASE > $W/m/shallow && git -C $W/m fetch -q "$BUNDLE" 'refs/tags/*:refs/tags/*'
T0=$(date +%s)
prep() { # name patch-or-empty
  local d=$W/$1; git -C $W/m worktree add -q --detach "$d" $BASE
  if [ "$1" = golden ]; then git -C "$d" diff $BASE $MERGE -- . ':(exclude)tests' | git -C "$d" apply; fi
  if [ -n "${2:-}" ]; then git -C "$d" apply "$2" || echo "APPLY FAILED $1"; fi
  git -C "$d" checkout -q $MERGE -- tests/unit_tests/distributed tests/unit_tests/dist_checkpointing
  mkdir -p "$d/tests/unit_tests/distributed/probesx"; cp "$TASK_DIR"/hidden/probes/*.py "$d/tests/unit_tests/distributed/probesx/"
}
prep base; prep golden
for p in "$TASK_DIR"/hidden/adversarial/*.patch; do n=adv-$(basename $p .patch); prep $n $p; done
for p in "$TASK_DIR"/hidden/alternatives/*.patch; do n=alt-$(basename $p .patch); prep $n $p; done
echo "prepared in $(( $(date +%s) - T0 )) s"
run() { # variant suite
  local d=$W/$1 x; if [ $2 = official ]; then x="tests/unit_tests/distributed/test_param_layout.py tests/unit_tests/distributed/test_param_and_grad_buffer.py --deselect tests/unit_tests/distributed/test_param_and_grad_buffer.py::test_grad_sync[2-"; else x=tests/unit_tests/distributed/probesx; fi
  (cd $d && timeout 500 torchrun --standalone --nproc_per_node 1 -m pytest -p no:cacheprovider -q -o addopts= $x --junitxml=$OUT/$1.$2.xml > $OUT/$1.$2.log 2>&1; echo "$1 $2 rc=$? $(tail -1 $OUT/$1.$2.log)")
}
for v in $(ls $W | grep -v '^m$'); do for s in official probe; do run $v $s & done; sleep 2; done; wait
echo "ran in $(( $(date +%s) - T0 )) s"
python3 - "$OUT" <<'PY'
import sys, glob, os, xml.etree.ElementTree as ET, collections
out = sys.argv[1]; rows = collections.defaultdict(dict)
for f in sorted(glob.glob(out + "/*.xml")):
    v, s = os.path.basename(f)[:-4].rsplit(".", 1)
    c = collections.Counter(); fails = []
    for tc in ET.parse(f).iter("testcase"):
        k = "failed" if tc.find("failure") is not None else "error" if tc.find("error") is not None else "skipped" if tc.find("skipped") is not None else "passed"
        c[k] += 1
        if k in ("failed", "error"): fails.append(tc.get("name"))
    rows[v][s] = (c, sorted(set(n.split("[")[0] for n in fails)))
for v, d in rows.items():
    for s, (c, f) in d.items():
        print(f"{v:40s} {s:8s} " + " ".join(f"{k}={c[k]}" for k in ("passed", "failed", "error", "skipped")) + ("  FAIL: " + ", ".join(f[:12]) if f else ""))
PY
