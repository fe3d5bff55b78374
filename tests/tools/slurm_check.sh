#!/usr/bin/env bash
# A single-node Slurm on this host (munged, slurmctld and slurmd from Debian, private config, state
# and ports, started here and stopped at the end) launches weftd with
#   srun --ntasks-per-node=1 --overlap weftd &
# and then a 4-rank job step (weft-demo: fused GEMV + AllReduce, AllReduce, All-to-All, each
# checked) with WEFT_SERVICE=on, so that every rank must attach to that weftd. Prints
# "slurm_check: ok", or "slurm_check: SKIPPED (why)" where it cannot run (not root, no Slurm).
# Usage: slurm_check.sh WEFTD WEFTCTL WEFT_DEMO
set -uo pipefail
weftd=$1 weftctl=$2 demo=$3
skip() { echo "slurm_check: SKIPPED ($*)"; exit 0; }
fail() { echo "slurm_check: FAILED: $*"; for f in "$dir"/*.log; do echo "== $f"; tail -20 "$f"; done; exit 1; }
[ "$(id -u)" = 0 ] || skip "needs root to run slurmctld and slurmd"
for b in munged slurmctld slurmd srun salloc sinfo python3; do command -v $b >/dev/null || skip "$b is not installed"; done

dir=$(mktemp -d /tmp/weft-slurm-XXXXXX)
chmod 0755 "$dir"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
host=$(hostname -s)
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 0400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
  --pid-file="$dir/munge/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" ||
  fail "munged did not start"
pids+=("$(cat "$dir/munge/munged.pid")")

cat >"$dir/slurm.conf" <<CONF
ClusterName=weftcheck
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=check Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$dir/slurm.conf
slurmctld -D -i >"$dir/slurmctld.out.log" 2>&1 &
pids+=($!)
slurmd -D >"$dir/slurmd.out.log" 2>&1 &
pids+=($!)
for i in $(seq 100); do
  sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed)' && break
  sleep 0.2
done
sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed)' || fail "the node did not come up: $(sinfo -N 2>&1)"

# The job: one weftd per node, a bounded wait until it answers, then the 4-rank step through it.
cat >"$dir/job.sh" <<JOB
#!/bin/bash
set -u
export WEFT_SERVICE_DIR=$dir/weftd WEFT_STATUS_DIR=$dir/status
srun --ntasks-per-node=1 --overlap $weftd --log-level info >$dir/weftd.log 2>&1 &
daemon=\$!
timeout 20 bash -c "until $weftctl status >/dev/null 2>&1; do sleep 0.1; done" || { echo "weftd did not answer"; exit 1; }
WEFT_SERVICE=on WEFT_LOG_LEVEL=info srun --overlap -n 4 $demo
rc=\$?
$weftctl status
# diagnose gathers the job's nodes through srun: the job has ended its communicators, so no page,
# and no node that failed to answer.
why=\$($weftctl diagnose --slurm-job \$SLURM_JOB_ID 2>&1)
echo "\$why"
grep -q "or on the nodes asked" <<<"\$why" && ! grep -q "not gathered\|refused" <<<"\$why" || rc=1
kill -TERM \$daemon
wait \$daemon
exit \$rc
JOB
chmod +x "$dir/job.sh"
out=$(timeout 240 salloc -N 1 -n 4 -t 5 "$dir/job.sh" 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || fail "the job failed (status $rc)"
[ "$(grep -c 'heap and queue from weftd' <<<"$out")" = 4 ] || fail "not every rank attached to weftd"
grep -q "rank 3/4: allreduce of 1000003 floats: ok" <<<"$out" || fail "the demo's checks did not pass"
echo "slurm_check: ok"
