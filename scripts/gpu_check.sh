#!/usr/bin/env bash
# gpu_check.sh — one prepared run on a machine with a GPU: the CUDA tests,
# the CUDA benchmark, a calibration of a Llama-3-8B-shaped model (and the
# roofline's efficiency factors from it), the
# simulator validated against the engine on the GPU with that calibration,
# tensor parallel over every GPU when there are several, a memory check of
# the kernels, all logs and JSON in one folder, and a short summary printed last.
#
#   scripts/gpu_check.sh pack     on the build machine: build the test and
#                                 bench binaries, rehearse and the CUDA backend
#                                 (build/librehearse_cuda.so, which the device
#                                 run must carry), and copy the shared libraries
#                                 they need (not glibc, libstdc++ or CUDA's)
#                                 into .devlibs/, for a GPU machine that lacks
#                                 them
#   scripts/gpu_check.sh [DIR]    run everything; results in DIR (default $OUT,
#                                 else build/gpu_check). Uses the binaries in
#                                 build/ when they run, else builds them.
#
# GPU_CHECK_SKIP="tests memcheck" leaves those steps out (a second run that
# only needs the bench and the calibration).
#
# Without a GPU every test prints why it skipped and the script still ends
# with its table, so it can be tried anywhere first. Steps have their own time
# limits so one hung step cannot cost the whole run (under 9 minutes in all).
set -u
cd "$(dirname "$0")/.."

BINS="build/run_tests build/bench/bench_cuda rehearse build/librehearse_cuda.so"

if [ "${1:-}" = pack ]; then
    make -j2 WERROR=1 $BINS || exit 1
    rm -rf .devlibs && mkdir -p .devlibs
    for b in $BINS; do
        ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
    done | sort -u | while read -r name path; do
        case "$name" in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++*|libgcc_s*|libcuda*|libcublas*|libcudart*|libnccl*) ;;
            *) cp -L "$path" ".devlibs/$name" ;;
        esac
    done
    ex=$(git rev-parse --git-path info/exclude); grep -qx '/.devlibs/' "$ex" 2>/dev/null || echo '/.devlibs/' >> "$ex"
    du -sh .devlibs && ls .devlibs
    exit 0
fi

out=${1:-${OUT:-build/gpu_check}}
mkdir -p "$out"
summary="$out/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)
# Seconds a step may take: its own cap, or what is left of 520 s if less.
cap() { local l=$(( 520 - ($(date +%s) - t0) )); [ $l -lt 1 ] && l=1; [ $l -lt "$1" ] && echo $l || echo "$1"; }

# ---- libraries: ours carried in .devlibs, CUDA's from the machine ----------
[ -d .devlibs ] && export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
find_lib() {   # first directory holding $1 among the usual places
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/$1" ] && { echo "$d"; return; }
    done
    find / -xdev -name "$1" -not -path '*/proc/*' 2>/dev/null | head -n 1 | xargs -r dirname
}
cublas_dir=$(find_lib libcublas.so.13)
[ -n "$cublas_dir" ] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$cublas_dir"
nccl_dir=$(find_lib libnccl.so.2)
[ -n "$nccl_dir" ] && export REHEARSE_NCCL="$nccl_dir/libnccl.so.2"
# The benchmark sits in build/bench, a folder below the library it loads.
export REHEARSE_CUDA_LIB="${REHEARSE_CUDA_LIB:-$PWD/build/librehearse_cuda.so}"
skip() { case " ${GPU_CHECK_SKIP:-} " in *" $1 "*) return 0 ;; esac; return 1; }
{
    echo "date: $(date -u)"
    echo "host: $(uname -srm)"
    nvidia-smi 2>&1 || echo "nvidia-smi: not available"
    echo "cuBLAS: ${cublas_dir:-not found}"
    echo "NCCL: ${nccl_dir:-not found}"
    echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    for b in $BINS; do echo "--- ldd $b"; ldd "$b" 2>&1; done
} > "$out/env.txt" 2>&1

# ---- binaries ----------------------------------------------------------------
need_build=0
for b in $BINS; do
    if [ ! -x "$b" ] || ldd "$b" 2>/dev/null | grep -q "not found"; then need_build=1; fi
done
if [ $need_build = 1 ]; then
    note "binaries missing or missing libraries: building"
    timeout 300 make -j"$(nproc)" $BINS > "$out/build.log" 2>&1 \
        || note "build failed: see build.log"
fi

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
note "GPU: ${gpu:-none}"
note "cuBLAS: ${cublas_dir:-not found}; NCCL: ${nccl_dir:-not found}"

# ---- 1. tests ------------------------------------------------------------------
if ! skip tests; then
note ""
note "== tests (suites cuda, cuda_tp)"
ts=$(date +%s)
timeout "$(cap 150)" build/run_tests cuda > "$out/tests.log" 2>&1
rc=$?
note "exit $rc after $(( $(date +%s) - ts )) s$( [ $rc = 124 ] && echo ' (timed out)')"
grep -E "skipped:|rel err|argmax|all-reduce,|FAILED|Failed|tests +[0-9]|asserts +[0-9]" "$out/tests.log" | sed 's/^/  /' | tee -a "$summary"
fi

# ---- 2. benchmark ----------------------------------------------------------------
note ""
note "== bench_cuda"
ts=$(date +%s)
timeout "$(cap 120)" build/bench/bench_cuda > "$out/bench.log" 2>&1
rc=$?
note "exit $rc after $(( $(date +%s) - ts )) s$( [ $rc = 124 ] && echo ' (timed out)')"
[ -f reports/bench/cuda.json ] && cp reports/bench/cuda.json "$out/cuda.json"

# ---- 3. calibrate, then the simulator against the engine on the GPU ----------
# A Llama-3-8B-shaped model with dummy weights (the shapes are what cost), a
# grid cut to the trace's shapes for time, and a 64-request synthetic trace
# through 16 clients: rehearse validate prints measured, simulated and error.
if [ -n "$gpu" ]; then
    note ""
    note "== calibrate --backend cuda (llama-3-8b shape) and validate on the GPU"
    ts=$(date +%s)
    timeout "$(cap 240)" ./rehearse calibrate --backend cuda --model llama-3-8b --max-tokens 4096 --max-seqs 32 \
        --max-context 4096 -o "$out/cost-cuda-8b.json" > "$out/calibrate.log" 2>&1
    note "calibrate: exit $? after $(( $(date +%s) - ts )) s"
    # The roofline preset's efficiency factors from that calibration.
    echo '{"kind": "roofline", "version": 1, "model": "llama-3-8b", "gpu": "h200"}' > "$out/roofline-8b.json"
    [ -f "$out/cost-cuda-8b.json" ] && ./rehearse cost efficiency "$out/cost-cuda-8b.json" \
        --roofline "$out/roofline-8b.json" -o "$out/roofline-8b-calibrated.json" 2>&1 | sed 's/^/  /' | tee -a "$summary"
    ./rehearse trace synth --seed 5 --requests 64 --arrival closed-loop --clients 16 --input-len 1024 \
        --output-len 128 --block-size 0 -o "$out/gpu-trace.rhtr" > /dev/null 2>&1
    ts=$(date +%s)
    [ -f "$out/cost-cuda-8b.json" ] && timeout "$(cap 90)" ./rehearse validate "$out/gpu-trace.rhtr" --backend cuda \
        --model llama-3-8b --cost "$out/cost-cuda-8b.json" --max-total-tokens 262144 --enable-mixed-chunk \
        -o "$out/validate" > "$out/validate.log" 2>&1
    note "validate: exit $? after $(( $(date +%s) - ts )) s"
    sed -n '/^metric/,/^wrote/p' "$out/validate.log" | sed 's/^/  /' | tee -a "$summary"
    ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
    if [ "${ngpu:-0}" -ge 2 ]; then
        note ""
        note "== tensor parallel: replay over $ngpu GPUs (NCCL)"
        ts=$(date +%s)
        timeout "$(cap 45)" ./rehearse replay "$out/gpu-trace.rhtr" --backend cuda --model llama-3-8b --tp-size "$ngpu" \
            --max-total-tokens 262144 -o "$out/tp-replay.rhtr" > "$out/tp.log" 2>&1
        note "replay --tp-size $ngpu: exit $? after $(( $(date +%s) - ts )) s"
        tail -n 3 "$out/tp.log" | sed 's/^/  /' | tee -a "$summary"
    fi
fi

# ---- 4. memory check of the kernels (without the 8B-shaped model and NCCL, for time) ----
if [ -n "$gpu" ] && ! skip memcheck && command -v compute-sanitizer >/dev/null 2>&1; then
    left=$(cap 330)
    if [ $left -gt 40 ]; then
        note ""
        note "== compute-sanitizer memcheck on the cuda suite (${left} s allowed)"
        REHEARSE_CUDA_QUICK=1 REHEARSE_CUDA_NO_NCCL=1 timeout "$left" compute-sanitizer --tool memcheck --print-limit 20 \
            build/run_tests cuda > "$out/memcheck.log" 2>&1
        rc=$?
        note "exit $rc$( [ $rc = 124 ] && echo ' (timed out)')"
        grep -E "ERROR SUMMARY|Invalid|out of bounds|tests +[0-9]" "$out/memcheck.log" | head -n 8 | sed 's/^/  /' | tee -a "$summary"
    fi
fi

# ---- summary: the bench table last, where the caller sees it -----------------------
note ""
note "== total $(( $(date +%s) - t0 )) s; files in $out"
sed -n '/^ceilings/,$p' "$out/bench.log" | tee -a "$summary"
grep -q "skipped" "$out/bench.log" && tee -a "$summary" < "$out/bench.log"
exit 0
