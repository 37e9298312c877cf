#!/usr/bin/env bash
# plan_jobs.sh — runs a plan's rounds of jobs until the plan is done: each
# round's Slurm array with `sbatch --wait` (or its GNU parallel list here),
# then `rehearse plan --collect DIR`, which writes the next round or the plan.
# Start it after `rehearse plan ... --emit-jobs DIR`.
# Usage: scripts/plan_jobs.sh DIR [--local] [SBATCH OPTIONS...]
#   --local   run each round's list on this machine (GNU parallel when there,
#             else xargs, one job a processor) instead of submitting it
#   SBATCH OPTIONS go to every sbatch (a partition, an account, a time limit)
# REHEARSE_BIN: the rehearse binary to collect with (default: the one the
# round's jobs run).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,12p' "$0" >&2; exit 2; }
dir=$1; shift
local_run=0
if [ "${1:-}" = "--local" ]; then local_run=1; shift; fi
[ -f "$dir/command.txt" ] || { echo "plan_jobs: $dir: not a folder rehearse plan --emit-jobs wrote" >&2; exit 1; }
while [ -f "$dir/jobs/pending" ]; do
  read -r round shards < "$dir/jobs/pending"
  list="$dir/jobs/round-$round.parallel"
  # The binary the jobs run: the first line's, after "cd DIR && ".
  bin=${REHEARSE_BIN:-$(sed -n "1s/^cd '[^']*' && '\([^']*\)'.*/\1/p" "$list")}
  echo "plan_jobs: round $round: $shards jobs ($(date -u +%H:%M:%S))" >&2
  if [ "$local_run" = 1 ]; then
    if command -v parallel > /dev/null; then parallel < "$list"
    else xargs -d '\n' -P "$(nproc)" -n 1 bash -c < "$list"; fi
  else
    sbatch --wait --quiet "$@" "$dir/jobs/round-$round.sbatch"
  fi
  "$bin" plan --collect "$dir"
done
