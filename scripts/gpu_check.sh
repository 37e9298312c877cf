#!/usr/bin/env bash
# gpu_check.sh — one prepared run on a machine with a GPU: the CUDA tests,
# the CUDA benchmark, a memory check of the kernels, all logs and JSON in one
# folder, and a short summary table printed last.
#
#   scripts/gpu_check.sh pack     on the build machine: build the test and
#                                 bench binaries and copy the shared libraries
#                                 they need (not glibc, libstdc++ or CUDA's)
#                                 into .devlibs/, for a GPU machine that lacks
#                                 them
#   scripts/gpu_check.sh [DIR]    run everything; results in DIR (default $OUT,
#                                 else build/gpu_check). Uses the binaries in
#                                 build/ when they run, else builds them.
#
# Without a GPU every test prints why it skipped and the script still ends
# with its table, so it can be tried anywhere first. Steps have their own time
# limits so one hung step cannot cost the whole run (about 6 minutes at most).
set -u
cd "$(dirname "$0")/.."

BINS="build/run_tests build/bench/bench_cuda"

if [ "${1:-}" = pack ]; then
    make -j2 WERROR=1 build/run_tests build/bench/bench_cuda || exit 1
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

# ---- libraries: ours carried in .devlibs, CUDA's from the machine ----------
[ -d .devlibs ] && export LD_LIBRARY_PATH="$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
find_lib() {   # first directory holding $1 among the usual places
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/lib/x86_64-linux-gnu; do
        [ -e "$d/$1" ] && { echo "$d"; return; }
    done
    find / -xdev -name "$1" -not -path '*/proc/*' 2>/dev/null | head -n 1 | xargs -r dirname
}
cublas_dir=$(find_lib libcublas.so.13)
[ -n "$cublas_dir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cublas_dir"
nccl_dir=$(find_lib libnccl.so.2)
[ -n "$nccl_dir" ] && export REHEARSE_NCCL="$nccl_dir/libnccl.so.2"
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
    timeout 300 make -j"$(nproc)" build/run_tests build/bench/bench_cuda > "$out/build.log" 2>&1 \
        || note "build failed: see build.log"
fi

gpu=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
note "GPU: ${gpu:-none}"
note "cuBLAS: ${cublas_dir:-not found}; NCCL: ${nccl_dir:-not found}"

# ---- 1. tests ------------------------------------------------------------------
note ""
note "== tests (suites cuda, cuda_tp)"
ts=$(date +%s)
timeout 200 build/run_tests cuda > "$out/tests.log" 2>&1
rc=$?
note "exit $rc after $(( $(date +%s) - ts )) s$( [ $rc = 124 ] && echo ' (timed out)')"
grep -E "skipped:|rel err|argmax|all-reduce,|FAILED|Failed|tests +[0-9]|asserts +[0-9]" "$out/tests.log" | sed 's/^/  /' | tee -a "$summary"

# ---- 2. benchmark ----------------------------------------------------------------
note ""
note "== bench_cuda"
ts=$(date +%s)
timeout 150 build/bench/bench_cuda > "$out/bench.log" 2>&1
rc=$?
note "exit $rc after $(( $(date +%s) - ts )) s$( [ $rc = 124 ] && echo ' (timed out)')"
[ -f reports/bench/cuda.json ] && cp reports/bench/cuda.json "$out/cuda.json"

# ---- 3. memory check of the kernels (without the 8B-shaped model and NCCL, for time) ----
if [ -n "$gpu" ] && command -v compute-sanitizer >/dev/null 2>&1; then
    left=$(( 330 - ($(date +%s) - t0) ))
    if [ $left -gt 40 ]; then
        note ""
        note "== compute-sanitizer memcheck on the cuda suite (${left} s allowed)"
        REHEARSE_CUDA_QUICK=1 timeout "$left" compute-sanitizer --tool memcheck --print-limit 20 \
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
