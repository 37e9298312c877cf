#!/usr/bin/env bash
# The demo (`make demo`): the whole harness on the shared public traces, in
# minutes on a laptop-class CPU, ending in reports/demo/index.html.
#   1. calibrate this machine's CPU kernels for the ~100M-parameter preset
#      (llama-100m; a table cost model). Its steps take tens of milliseconds,
#      long enough to time well; tiny-llama's take a fraction of one, where the
#      operating system's noise is as large as the work.
#   2. record a small run of the real CPU engine on a slice of a real trace
#   3. validate the simulator against that recording
#   4. experiments on a real trace with a roofline preset (a 70B-class model on
#      8 GPUs): knob grid, speculative depth, prefix cache, and the phenomena
#      (TTFT against prompt length, concurrency, head-of-line blocking)
#   5. the HTML report
# Without ../shared/traces (REHEARSE_SHARED_TRACES) the steps that need a real
# trace use a synthesized one, and the report says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./rehearse
out=${DEMO_OUT:-reports/demo}
shared=${REHEARSE_SHARED_TRACES:-../shared/traces}
export REHEARSE_SHARED_TRACES=$shared
mkdir -p "$out"
start=$(date +%s)
step() { printf '\n== %s (%ds)\n' "$1" $(( $(date +%s) - start )); }

note=""
if [ -r "$shared/AzureLLMInferenceTrace_conv.csv" ]; then
  source_trace="$shared/AzureLLMInferenceTrace_conv.csv"
else
  note="The shared traces (../shared/traces) were absent: every experiment ran on synthesized traces."
  echo "demo: $note"
  "$bin" trace synth --requests 2000 --rate 5 --input-len 1150 --output-len 210 --block-size 0 --seed 1 \
    -o "$out/synthetic.rhtr"
  source_trace="$out/synthetic.rhtr"
fi

model=llama-100m
step "1/5 calibrating the CPU kernels for $model"
mkdir -p "$out/calibrate" "$out/validate"
# One BLAS thread for the calibration and the engine alike: a table measured
# with one thread count prices another's steps wrongly, and a single thread
# keeps small GEMMs steady on a machine shared with other work.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
"$bin" calibrate --backend cpu --model "$model" --max-tokens 1024 --max-seqs 32 --max-context 2048 \
  -o "$out/calibrate/cost.json"

step "2/5 recording the CPU engine on a slice of $(basename "$source_trace")"
# 32 requests, lengths scaled to a tenth, at half the trace's rate: a load this CPU serves.
"$bin" trace slice "$source_trace" --first 32 --length-scale 0.1 --rate-scale 0.5 -o "$out/validate/slice.rhtr"

step "3/5 validating the simulator against the engine"
"$bin" validate "$out/validate/slice.rhtr" --model "$model" --cost "$out/calibrate/cost.json" \
  --max-total-tokens 32768 --enable-mixed-chunk -o "$out/validate"
"$bin" validate-steps "$out/validate/recorded.rhtr" "$out/calibrate/cost.json" -o "$out/calibrate"
"$bin" run scripts/experiments/calibrate_summary.lua dir="$out/calibrate"

step "4/5 experiments (roofline llama-3-70b on 8 x h200)"
for e in knob_grid spec_depth prefix_cache router_policy mixed_gpus pd_vs_colocated ttft_vs_prompt_length concurrency_sweep head_of_line deployments deepseek lora hicache; do
  echo "-- $e"
  "$bin" run "scripts/experiments/$e.lua" out="$out/$e"
done

step "5/5 writing the report"
elapsed=$(( $(date +%s) - start ))
"$bin" run scripts/experiments/report.lua dir="$out" \
  note="${note:+$note }Demo run of $(date -u '+%Y-%m-%d %H:%M UTC') on $(nproc) cores, ${elapsed} s."
echo
echo "demo: done in $(( $(date +%s) - start )) s; open $out/index.html"
