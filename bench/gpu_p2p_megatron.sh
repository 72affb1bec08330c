#!/bin/bash
# Which of Megatron-LM's tests/unit_tests/distributed modules can be a Megatron task's pass_to_pass
# suite (task-format.md): each candidate module (every module of the folder but the task's official
# ones) run plainly with pytest under torchrun on one GPU, at the PR's base with merge's test folder (as
# the grader installs it) and at merge. A case that passes at both is pass-to-pass; the rest are
# reported with their outcomes. One device call for both Megatron tasks (#3812, #4028): the four trees
# and their modules run side by side (one GPU, small tests, 16 cores), every module under MODULE_S.
#
# Here: mkdir -p .device/p2p && cp ../shared/upstream/megatron-lm-pr*.bundle .device/p2p/
# Device: run(command="bash bench/gpu_p2p_megatron.sh", carry=[".device/p2p"], timeout_s=600)
# Out: $OUT/p2p-<pr>.json ({module: {case: [base, merge]}}), $OUT/logs.tar.gz, walls on stdout.
set -u
OUT=${OUT:-/tmp/gpu-p2p-out}; mkdir -p "$OUT"
C=$(realpath .device/p2p)
MODULE_S=${MODULE_S:-150}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p /opt/data && touch /opt/data/.offline
T0=$(date +%s)
W=/tmp/p2p; rm -rf $W; mkdir -p $W/logs
# pr base merge official-modules(comma)
PRS=(
  "3812 40627d00d96cef74aceab35e0e3c170e900f3aff 55b8111ad84051cd0e2106ad1f5ab35fa2ab98f1 test_param_layout.py,test_param_and_grad_buffer.py"
  "4028 d45fa3e8e140fe5262179f6f94823869b89026a7 c586f6d5663f0682ae5805ee041f3c7e1cee56c6 test_param_and_grad_buffer.py"
)
D=tests/unit_tests/distributed
for line in "${PRS[@]}"; do
  read -r pr base merge _ <<< "$line"
  git init -q --bare $W/m$pr && echo "$base" > $W/m$pr/shallow
  git -C $W/m$pr fetch -q --no-tags "$C/megatron-lm-pr$pr.bundle" 'refs/tags/*:refs/tags/*' || { echo "pr$pr: bundle fetch failed"; exit 2; }
  git -C $W/m$pr worktree add -q --detach $W/$pr-merge "$merge"
  git -C $W/m$pr worktree add -q --detach $W/$pr-base "$base"
  # The grader's view of the base: its source with merge's test folder.
  rm -rf "$W/$pr-base/$D" && git -C $W/$pr-merge archive "$merge" "$D" | tar -x -C $W/$pr-base
done
echo "setup $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c 'import sys, torch, pytest; print(sys.version.split()[0], "torch", torch.__version__, "pytest", pytest.__version__)'

# tree module: one module under torchrun, JUnit to $W/junit/<tree>/<module>.xml.
run_tree() {
  local tree=$1 official=$2 port=$3
  mkdir -p $W/junit/$tree
  local mods; mods=$(cd $W/$tree && find $D -name 'test_*.py' | sort)
  for m in $mods; do
    case ",$official," in *",$(basename "$m"),"*) continue ;; esac
    [ "$(dirname "$m")" = "$D" ] || continue # the folder's own modules (megatron_fsdp/ needs its own package set-up)
    local name; name=$(basename "$m" .py); port=$((port + 1))
    # Every module at once (its own port): the call's device time is short, the GPU has room.
    (t=$(date +%s); cd $W/$tree && timeout "$MODULE_S" torchrun --nproc_per_node 1 --master_port "$port" -m pytest -p no:cacheprovider -q -o addopts= \
      --junitxml "$W/junit/$tree/$name.xml" "$m" > "$W/logs/$tree-$name.log" 2>&1; echo "$tree $name rc=$? $(( $(date +%s) - t )) s") &
  done
  wait
}
port=29600
for line in "${PRS[@]}"; do
  read -r pr _ _ official <<< "$line"
  for side in base merge; do run_tree "$pr-$side" "$official" $port & port=$((port + 20)); done
done
wait
python3 - "$W" "$OUT" <<'PY'
import json, sys, glob, os, xml.etree.ElementTree as ET
w, out = sys.argv[1:]
def cases(tree):
    got = {}
    for f in glob.glob(f"{w}/junit/{tree}/*.xml"):
        for tc in ET.parse(f).getroot().iter("testcase"):
            mod = "tests/unit_tests/distributed/" + os.path.basename(f)[:-4] + ".py"
            name = tc.get("name")
            cls = tc.get("classname", "").split(".")[-1]
            cid = f"{mod}::{cls}::{name}" if cls and cls != os.path.basename(f)[:-4] else f"{mod}::{name}"
            kids = [k.tag for k in tc]
            got[cid] = "failed" if "failure" in kids else "error" if "error" in kids else "skipped" if "skipped" in kids else "passed"
    return got
for pr in ("3812", "4028"):
    b, m = cases(f"{pr}-base"), cases(f"{pr}-merge")
    res = {}
    for cid in sorted(set(b) | set(m)):
        mod = cid.split("::")[0]
        res.setdefault(mod, {})[cid] = [b.get(cid, "absent"), m.get(cid, "absent")]
    json.dump(res, open(f"{out}/p2p-{pr}.json", "w"), indent=1)
    for mod, cs in res.items():
        both = sum(1 for v in cs.values() if v == ["passed", "passed"])
        print(f"pr{pr} {mod}: {len(cs)} cases, pass->pass {both}, other {[(k.split('::',1)[1], v) for k, v in cs.items() if v != ['passed','passed']][:6]}")
PY
tar -C $W -czf "$OUT/logs.tar.gz" logs
echo "total $(( $(date +%s) - T0 )) s"
