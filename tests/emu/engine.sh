#!/usr/bin/env bash
# engine.sh — the engine end to end on the CUDA backend, run by the emulator
# (build/rehearse-emu): what scripts/gpu_check.sh runs on a GPU, small. An
# 8-request trace replayed over two emulated devices (NCCL tensor
# parallel), a calibration of the CUDA kernels, and `validate --backend
# cuda` with it (one device, decode graphs). Checks that each step runs and says
# what it should; the times mean nothing on an emulator.
# Usage: tests/emu/engine.sh BUILD/rehearse-emu
set -u
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1 REHEARSE_CUDA_EMU_DEVICES=2
fail() { echo "emu engine: FAILED: $*" >&2; [ -f "$dir/log" ] && tail -n 5 "$dir/log" >&2; exit 1; }

"$bin" trace synth --seed 5 --requests 8 --arrival closed-loop --clients 4 --input-len 48 --output-len 8 \
    --block-size 0 -o "$dir/t.rhtr" > "$dir/log" 2>&1 || fail "trace synth"
"$bin" replay "$dir/t.rhtr" --backend cuda --model tiny-llama --tp-size 2 --max-total-tokens 4096 \
    -o "$dir/tp.rhtr" > "$dir/log" 2>&1 || fail "replay --backend cuda --tp-size 2"
grep -q 'replayed 8 requests (0 refused)' "$dir/log" || fail "replay did not serve all 8 requests"
"$bin" calibrate --backend cuda --model tiny-llama --max-tokens 64 --max-seqs 4 --max-context 256 \
    -o "$dir/cost.json" > "$dir/log" 2>&1 || fail "calibrate --backend cuda"
"$bin" validate "$dir/t.rhtr" --backend cuda --model tiny-llama --cost "$dir/cost.json" --max-total-tokens 4096 \
    --enable-mixed-chunk -o "$dir/val" > "$dir/log" 2>&1 || fail "validate --backend cuda"
grep -q '^completed,8,8,' "$dir/val/metrics.csv" || fail "validate: not 8 requests completed on both sides"
echo "emu engine: replay --tp-size 2, calibrate and validate with --backend cuda on the emulator: ok"
