#!/usr/bin/env bash
# plan.sh — a plan on a real Slurm, equal to the local plan byte for byte.
# Starts a one-node Slurm on this machine (munged, slurmctld and slurmd on
# localhost, everything in a temporary folder, on ports of their own),
# plans a small question locally, plans it again with --emit-jobs and
# scripts/plan_jobs.sh (each round a Slurm array, sbatch --wait, then
# --collect), and compares plan.json and candidates.csv. Stops the daemons
# whatever happens. Skips, saying why, where Slurm is not installed
# (scripts/deps.sh installs it) or the user is not root (slurmd runs jobs
# as their users).
# Usage: tests/slurm/plan.sh PATH/TO/rehearse
set -u
bin=$(realpath "$1")
root=$(cd "$(dirname "$0")/../.." && pwd)
for b in munged slurmctld slurmd sbatch; do
  command -v "$b" > /dev/null || { echo "slurm plan: SKIPPED: $b is not installed (scripts/deps.sh installs slurm-wlm and munge)"; exit 0; }
done
[ "$(id -u)" -eq 0 ] || { echo "slurm plan: SKIPPED: starting slurmd needs root"; exit 0; }
dir=$(mktemp -d /tmp/rehearse-slurm.XXXXXX)
export SLURM_CONF=$dir/slurm.conf REHEARSE_PRESETS=$root/sim/cost/presets REHEARSE_SCRIPTS=$root/scripts
stop() {
  [ -f "$dir/slurmctld.pid" ] && scontrol shutdown > /dev/null 2>&1
  sleep 1
  for p in slurmd slurmctld munged; do [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2> /dev/null; done
  rm -rf "$dir"
}
trap stop EXIT
fail() { echo "slurm plan: FAILED: $*" >&2; for l in "$dir"/log/*.log "$dir"/out.txt; do [ -f "$l" ] && { echo "--- $l" >&2; tail -n 8 "$l" >&2; }; done; exit 1; }

mkdir -p "$dir/state" "$dir/spool" "$dir/log"
head -c 1024 /dev/urandom > "$dir/munge.key" && chmod 600 "$dir/munge.key"
munged -f --socket="$dir/munge.sock" --key-file="$dir/munge.key" --log-file="$dir/log/munged.log" \
  --pid-file="$dir/munged.pid" --seed-file="$dir/munged.seed" || fail "munged did not start"
port=$((20000 + $$ % 20000))
host=$(hostname -s)
cat > "$SLURM_CONF" <<CONF
ClusterName=rehearse
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=rehearse Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -i || fail "slurmctld did not start"
slurmd || fail "slurmd did not start"
for i in $(seq 60); do
  sinfo -h -o %t 2> /dev/null | grep -q idle && break
  sleep 0.5
done
sinfo -h -o %t 2> /dev/null | grep -q idle || fail "the node did not come up idle in 30 s"

cd "$dir"
"$bin" trace synth --seed 3 --requests 400 --arrival poisson --rate 20 --input-dist uniform --input-len 1024 \
  --output-len 128 -o t.rhtr > out.txt 2>&1 || fail "trace synth"
q="t.rhtr --model llama-3-8b --slo-ttft-ms 1000 --slo-tpot-ms 40 --gpus h100-sxm,a100-80g --tp 1,2 --max-replicas 3
   --max-gpus 4 --chunked-prefill-sizes 2048 --max-running-requests-list 8,256 --speculative-steps 0
   --routers cache-aware,round-robin --min-requests 50 --top 3 --no-rate-search"
"$bin" plan $q -o local > out.txt 2>&1 || fail "the local plan"
"$bin" plan $q --emit-jobs jobs --shards 4 -o slurm > out.txt 2>&1 || fail "plan --emit-jobs"
REHEARSE_BIN=$bin "$root/scripts/plan_jobs.sh" jobs > out.txt 2>&1 || fail "scripts/plan_jobs.sh (sbatch --wait, --collect)"
rounds=$(grep -c '^plan_jobs: round' out.txt)
for f in plan.json candidates.csv; do
  cmp -s "local/$f" "slurm/$f" || fail "$f from Slurm differs from the local one"
done
ls jobs/logs/round-0-*.log > /dev/null 2>&1 || fail "no Slurm task logs"
echo "slurm plan: $rounds rounds as Slurm arrays on a one-node Slurm: plan.json and candidates.csv equal the local plan's"
