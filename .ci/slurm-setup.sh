#!/usr/bin/env bash
# A real one-node Slurm cluster on this machine, for the Slurm engine's suites (test/campaign-slurm.test.ts).
#
# Run by .ci/run (`bash .ci/slurm-setup.sh`, which then exports INFRADEV_REQUIRE_SLURM=1 so those suites
# FAIL rather than skip when the daemons are not up); also runnable by hand, as root.
#   1. installs Debian's slurm-wlm + munge when they are missing;
#   2. writes /etc/slurm/slurm.conf and cgroup.conf for one node (this host), unless a slurm.conf that
#      this script did not write is already there (a real cluster's: left alone, and we stop);
#   3. starts munged, slurmctld and slurmd (no systemd in CI) and waits until `sinfo` shows the node idle;
#   4. on failure exits non-zero with the tail of each daemon's log.
# No slurmdbd: accounting is off, so `sacct` answers nothing here and the engine's fallback (the exit code
# its batch script writes next to the job's stdout, plus squeue while the controller remembers the job) is
# the path these tests exercise.
set -euo pipefail

MARK="# written by infradev .ci/slurm-setup.sh"
CONF_DIR=/etc/slurm
LOG_DIR=/var/log/slurm
SPOOL_CTLD=/var/spool/slurmctld
SPOOL_D=/var/spool/slurmd

say() { echo "[slurm-setup] $*"; }

show_logs() {
  local f
  for f in /var/log/munge/munged.log "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log"; do
    if [ -f "$f" ]; then
      echo "----- last lines of $f" >&2
      tail -n 20 "$f" >&2 || true
    else
      echo "----- $f: not written" >&2
    fi
  done
}

fail() {
  echo "[slurm-setup] $*" >&2
  show_logs
  exit 1
}

node_state() { sinfo --noheader --format=%t 2>/dev/null | head -n 1 | tr -d ' *'; }

if [ "$(id -u)" != 0 ]; then
  echo "[slurm-setup] must run as root (it installs packages and starts system daemons)" >&2
  exit 1
fi

if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
  say "installing slurm-wlm and munge"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge
fi

# Already up (a second call in the same CI job, or a developer's machine): nothing to do.
if scontrol ping >/dev/null 2>&1 && case "$(node_state)" in idle|mix|alloc) true ;; *) false ;; esac; then
  say "cluster already up: $(sinfo --noheader --format='%N %t %c CPUs' | head -n 1)"
  exit 0
fi

if [ -f "$CONF_DIR/slurm.conf" ] && ! grep -qxF "$MARK" "$CONF_DIR/slurm.conf"; then
  echo "[slurm-setup] $CONF_DIR/slurm.conf exists and was not written by this script; not touching a real cluster's configuration" >&2
  exit 1
fi

# --- munge: the key the package made (or a fresh one), and the socket directory it needs.
if [ ! -s /etc/munge/munge.key ]; then
  say "creating /etc/munge/munge.key"
  mungekey --create --force 2>/dev/null || dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  say "starting munged"
  runuser -u munge -- /usr/sbin/munged || fail "munged did not start"
  for _ in $(seq 1 20); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
  munge -n | unmunge >/dev/null 2>&1 || fail "munged is not answering on /run/munge"
fi

# --- slurm.conf for one node: this host, its real CPUs and memory (from `slurmd -C`).
mkdir -p "$CONF_DIR" "$LOG_DIR" "$SPOOL_CTLD" "$SPOOL_D"
node=$(hostname -s)
hw=$(slurmd -C | head -n 1 | sed -e "s/^NodeName=[^ ]*//")
[ -n "$hw" ] || fail "slurmd -C printed no hardware line"
gres_line=""
gres_types=""
if command -v nvidia-smi >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
  if [ "${ngpu:-0}" -gt 0 ]; then
    gres_types="GresTypes=gpu"
    gres_line=" Gres=gpu:$ngpu"
    printf '%s\nName=gpu File=/dev/nvidia[0-%d]\n' "$MARK" "$((ngpu - 1))" >"$CONF_DIR/gres.conf"
  fi
fi
cat >"$CONF_DIR/slurm.conf" <<EOF
$MARK
# One-node test cluster: controller and compute node are this host; jobs run as the submitting user.
ClusterName=infradev
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$SPOOL_CTLD
SlurmdSpoolDir=$SPOOL_D
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
# No cgroups in a CI container: track processes by parentage, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
MailProg=/bin/true
# No slurmdbd: no accounting (sacct has nothing); finished jobs stay in the controller for 10 min so
# squeue can still name their end state (COMPLETED / TIMEOUT / CANCELLED) to a polling engine.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
# SIGKILL 5 s after the SIGTERM of a time limit or scancel (default 30 s) keeps the tests short.
KillWait=5
InactiveLimit=0
ReturnToService=2
SlurmdTimeout=300
$gres_types
NodeName=$node NodeAddr=127.0.0.1$hw$gres_line State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$CONF_DIR/cgroup.conf" <<EOF
$MARK
# proctrack/linuxproc + task/none use no cgroups; nothing is constrained on the test node.
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
EOF

# --- daemons (they fork into the background themselves).
if ! scontrol ping >/dev/null 2>&1; then
  say "starting slurmctld"
  : >"$LOG_DIR/slurmctld.log"
  slurmctld || fail "slurmctld did not start"
fi
for _ in $(seq 1 30); do
  if scontrol ping >/dev/null 2>&1; then break; fi
  sleep 0.5
done
scontrol ping >/dev/null 2>&1 || fail "slurmctld does not answer scontrol ping"
if ! pgrep -x slurmd >/dev/null 2>&1; then
  say "starting slurmd"
  : >"$LOG_DIR/slurmd.log"
  slurmd || fail "slurmd did not start"
fi

state=""
for _ in $(seq 1 60); do
  state=$(node_state)
  case "$state" in
    idle|mix|alloc) break ;;
    down|drain|drng|fail|unk|"") scontrol update NodeName="$node" State=RESUME >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
[ "$state" = idle ] || [ "$state" = mix ] || [ "$state" = alloc ] || fail "node $node is not idle after 30 s (sinfo state: ${state:-none})"
say "cluster up: $(sinfo --noheader --format='%N %t %c CPUs' | head -n 1)"
say "set INFRADEV_REQUIRE_SLURM=1 so the Slurm suites fail instead of skipping without a cluster"
