#!/bin/bash
# The Megatron task's gold under issue 21's defences on the device machine: every rank arms the audit
# hook (python/sandbox/infradev_audit.py) and runs under the launcher's seccomp filter; gold must be
# graded, resolved and never tampered, and no rank may have refused anything. Prints, per session
# and rank, what the hook saw (armed, done, refused, the events library code used and it allowed).
# No Node on the device machine: carried as .device/node.xz and .device/nm.tar.xz, with dist/
# (as bench/gpu_task_check.sh does), and the task's upstream bundle as .device/megatron-lm-pr3812.bundle.
# Not resumable; ~calibration (3 gold runs) + 1 grade.
#   TASK=megatron-param-layout HARD_S=560 bash bench/gpu_audit_hook_megatron.sh
set -u
OUT=${OUT:-/tmp/gpu-audit-out}
TASK=${TASK:-megatron-param-layout}
SANDBOX=${SANDBOX:-none}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
mkdir -p /tmp/nodebin
python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],"wb"))' .device/node.xz /tmp/nodebin/node && chmod +x /tmp/nodebin/node
export PATH=/tmp/nodebin:$PATH
[ -d node_modules ] || tar -xJf .device/nm.tar.xz
# The task's upstream commits (offline): carry .device/megatron-lm-pr3812.bundle (../shared/upstream).
export INFRADEV_GIT_CACHE=/tmp/infradev-git HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p /opt/data && touch /opt/data/.offline
[ -f .device/megatron-lm-pr3812.bundle ] && node dist/cli/main.js tasks cache import .device/megatron-lm-pr3812.bundle --url https://github.com/NVIDIA/Megatron-LM.git --shallow 40627d00d96cef74aceab35e0e3c170e900f3aff
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
node --version; python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
# The hook and the filter on their own, in this image's Python, before the grade.
python3 -S python/sandbox/infradev_guard.py python3 -c 'print(open("/proc/self/status").read().split("Seccomp:")[1].split()[0], "= seccomp mode under the launcher filter")'
echo "setup $(( $(date +%s) - T0 )) s"
# A task from a real pull request has no golden.patch file: the grader derives it from the merge commit.
GOLD="tasks/$TASK/hidden/golden.patch"
[ -f "$GOLD" ] || GOLD=$(node -e "import('./dist/task/hidden/grader-task.js').then((m) => console.log(m.loadGraderTask(process.argv[1]).hidden.goldenPatch))" "$TASK")
timeout "${HARD_S:-560}" node dist/cli/main.js grade --task "$TASK" --patch "$GOLD" --sandbox "$SANDBOX" \
  --out /tmp/infradev-audit-grade --calibration-dir /tmp/infradev-audit-cal --json > "$OUT/result.json" 2> "$OUT/progress.txt"
echo "grade exit $? after $(( $(date +%s) - T0 )) s"
tail -5 "$OUT/progress.txt"
python3 - "$OUT/result.json" /tmp/infradev-audit-grade /tmp/infradev-audit-cal <<'PY'
import glob, json, os, sys
r = json.load(open(sys.argv[1]))
print("status", r.get("status"), "resolved", r.get("resolved"), "score", r.get("score"))
print("tamper evidence", r.get("tamper_evidence") or [])
bad = r.get("status") != "graded" or not r.get("resolved")
for root in sys.argv[2:]:
    for f in sorted(glob.glob(os.path.join(root, "**", "sessions", "*.json"), recursive=True)):
        s = json.load(open(f))
        for a in s.get("audit") or []:
            if a is None:
                print(os.path.relpath(f, root), "no audit channel (torchrun?)")
                continue
            print(os.path.relpath(f, root), "rank", a["rank"], "armed", a["armed"], "done", a["done"], "refused", a["refused_count"], "observed", a["observed"])
            bad |= a["refused_count"] > 0 or not a["armed"] or not a["done"]
        if s.get("tamper_evidence"):
            print("  evidence:", s["tamper_evidence"][:3])
            bad = True
print("GOLD UNDER THE AUDIT HOOK:", "FAIL" if bad else "OK")
PY
cp -r /tmp/infradev-audit-grade "$OUT/grade" 2>/dev/null
ls -la "$OUT"
