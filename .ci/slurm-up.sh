#!/usr/bin/env bash
# A one-node SLURM cluster on this machine (Debian's slurm-wlm + munge), for the `ava sweep --executor slurm` tests.
# Idempotent: does nothing when the cluster already answers. No systemd and no cgroup plugins are needed: process
# tracking by /proc (proctrack/linuxproc), no task plugin, no accounting; the daemons run in the background.
# Installs the packages first when they are missing (apt-get, as root). State and logs: $AVA_SLURM_DIR.
set -euo pipefail
STATE=${AVA_SLURM_DIR:-/var/lib/ava-slurm}
CONF=/etc/slurm/slurm.conf

up() {  # the controller answers and a node takes jobs (idle, mixed or allocated: not down, drained or unknown)
  sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mix|mixed|alloc|allocated|completing)'
}
if up; then
  echo "slurm: already up ($(sinfo -h -o '%P %D %T' | head -1))"; exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge >/dev/null
fi

mkdir -p "$STATE/ctld" "$STATE/d" /run/munge /etc/slurm
chown munge:munge /run/munge && chmod 0755 /run/munge
[ -s /etc/munge/munge.key ] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null;
                                  chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key; }
pgrep -x munged >/dev/null || runuser -u munge -- munged

HOST=$(hostname -s)
NODE=$(slurmd -C | head -1)  # NodeName=... CPUs=... RealMemory=... as slurmd sees this machine
cat > "$CONF" <<CONF
ClusterName=ava
SlurmctldHost=$HOST
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
SlurmctldTimeout=30
SlurmdTimeout=30
$NODE State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

pgrep -x slurmctld >/dev/null || slurmctld -c      # -c: no state from an earlier cluster
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 1 30); do
  if up; then
    echo "slurm: up ($(sinfo -h -o '%P %D %T %c CPUs' | head -1))"; exit 0
  fi
  scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "slurm: did not come up; see $STATE/slurmctld.log and $STATE/slurmd.log" >&2
exit 1
