#!/usr/bin/env bash
# lora_validate.sh — the simulator against the CPU engine with LoRA adapters:
# the same 32 requests on the base model, under one adapter, and spread over
# four adapters with room for two in a batch, each run through
# `rehearse validate` (the engine records, the simulator replays with a table
# calibrated on this machine, LoRA's kernels and loads included). Prints each
# run's errors side by side: the multi-adapter run should stay within the
# single-adapter run's bounds.
#   scripts/lora_validate.sh [DIR] [MODEL]      (defaults: reports/lora_validate, llama-100m)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/rehearse
dir=${1:-reports/lora_validate}
model=${2:-llama-100m}
mkdir -p "$dir"
cd "$dir"
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
if [ ! -s cal.json ]; then
  echo "== calibrating $model with LoRA's kernels at rank 16 (a few minutes)"
  "$bin" calibrate --backend cpu --model "$model" --max-tokens 1024 --max-seqs 32 --max-context 2048 \
    --lora-rank 16 -o cal.json
fi
for k in 1 2 3 4; do [ -d "a$k" ] || "$bin" model save-lora "$model" -o "a$k" --rank 16 --seed "$k" > /dev/null; done
synth="--requests 32 --rate 0.5 --input-len 115 --output-len 21 --block-size 0 --seed 3"
"$bin" trace synth $synth -o base.rhtr > /dev/null
"$bin" trace synth $synth --adapters 1 --adapter-rank 16 -o one.rhtr > /dev/null
"$bin" trace synth $synth --adapters 4 --adapter-zipf 0 --adapter-rank 16 -o four.rhtr > /dev/null
lora="--lora-paths lora-1=a1,lora-2=a2,lora-3=a3,lora-4=a4"
common="--model $model --cost cal.json --max-total-tokens 32768 --enable-mixed-chunk"
echo "== base model";        "$bin" validate base.rhtr $common -o v_base > v_base.log
echo "== one adapter";       "$bin" validate one.rhtr $common $lora -o v_one > v_one.log
echo "== four adapters, two a batch"
"$bin" validate four.rhtr $common $lora --max-loras-per-batch 2 -o v_four > v_four.log
printf '\n%-18s %28s %28s %28s\n' metric "base: measured sim err" "one adapter" "four adapters, cap 2"
for m in mean_ttft_ms p99_ttft_ms mean_tpot_ms p99_tpot_ms busy_time steps; do
  row=$(for f in v_base v_one v_four; do awk -v m="$m" '$1 == m {printf "%9s %9s %8s", $2, $3, $4}' "$f.log"; done)
  printf '%-18s %s\n' "$m" "$row"
done
echo
for f in v_base v_one v_four; do echo "$f step time error:"; grep -E "^  (prefill|decode|mixed) " "$f.log"; done
