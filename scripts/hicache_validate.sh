#!/usr/bin/env bash
# hicache_validate.sh — the simulator against the CPU engine with a host KV
# tier: multi-turn chats (8 closed-loop clients, 6 turns) over a KV pool too
# small for them, run through `rehearse validate` (the engine records, the
# simulator replays with a table calibrated on this machine, the tier's page
# copies included) without the tier and with it at 4 times the pool, under
# write_through and write_back. Prints each run's measured and simulated
# metrics side by side, the hit rate per tier among them.
#   scripts/hicache_validate.sh [DIR] [MODEL]      (defaults: reports/hicache_validate, llama-100m)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/rehearse
dir=${1:-reports/hicache_validate}
model=${2:-llama-100m}
mkdir -p "$dir"
cd "$dir"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
if [ ! -s cal.json ]; then
  echo "== calibrating $model (a few minutes)"
  "$bin" calibrate --backend cpu --model "$model" --max-tokens 1024 --max-seqs 32 --max-context 2048 -o cal.json
fi
"$bin" trace synth --arrival closed-loop --clients 8 --turns 6 --requests 48 --input-dist fixed --input-len 160 \
  --output-dist fixed --output-len 16 --block-size 16 --seed 3 -o chats.rhtr > /dev/null
common="--model $model --cost cal.json --max-total-tokens 2048 --max-concurrency 8"
tier="--enable-hierarchical-cache --hicache-ratio 4"
echo "== GPU pool only";            "$bin" validate chats.rhtr $common -o v_off > v_off.log
echo "== host tier, write_through"; "$bin" validate chats.rhtr $common $tier -o v_wt > v_wt.log
echo "== host tier, write_back";    "$bin" validate chats.rhtr $common $tier --hicache-write-policy write_back -o v_wb > v_wb.log
printf '\n%-20s %28s %28s %28s\n' metric "pool only: measured sim err" "host tier, write_through" "host tier, write_back"
for m in cache_hit_rate cache_hit_rate_host mean_ttft_ms p99_ttft_ms mean_tpot_ms request_throughput busy_time steps; do
  row=$(for f in v_off v_wt v_wb; do awk -v m="$m" '$1 == m {printf "%9s %9s %8s", $2, $3, $4}' "$f.log"; done)
  printf '%-20s %s\n' "$m" "$row"
done
