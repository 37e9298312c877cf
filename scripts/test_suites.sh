#!/usr/bin/env bash
# test_suites.sh TEST_BIN [JOBS] — runs every CUnit suite of TEST_BIN in its
# own process, JOBS at a time (default: the -jN in MAKEFLAGS, else nproc), then
# prints each suite's output whole, in the list's order, with its time, and
# exits non-zero if any suite failed.
#
# Why processes: the suites are independent (free ports, per-pid temp paths),
# and on CI's two cores one process left a core idle for most of the run.
# The slowest suites of the last run start first (build/test-times, else the
# committed tests/suite_times for a fresh clone), so one long suite does not
# start last and hold the run alone.
set -uo pipefail
bin="$1"
jobs="${2:-}"
if [ -z "$jobs" ]; then
    jobs=$(printf '%s\n' "${MAKEFLAGS:-}" | grep -oE -- '-j *[0-9]+' | grep -oE '[0-9]+' | head -n 1)
    jobs="${jobs:-$(nproc)}"
fi
dir="$(dirname "$bin")/test-logs"
times="$(dirname "$bin")/test-times"
known="$times"
[ -s "$known" ] || known="$(dirname "$0")/../tests/suite_times"
rm -rf "$dir" && mkdir -p "$dir" || exit 2

suites=$("$bin" --list) || { echo "test_suites.sh: $bin --list failed" >&2; exit 2; }
# slowest first by the last recorded times; suites never timed go first too
order=$(for s in $suites; do
            t=$(awk -v s="$s" '$1 == s { print $2 }' "$known" 2>/dev/null)
            printf '%s %s\n' "${t:-1e9}" "$s"
        done | sort -g -r | awk '{ print $2 }')

run_one() {  # suite logdir bin
    local start end rc
    start=$(date +%s.%N)
    "$3" "=$1" > "$2/$1.log" 2>&1
    rc=$?
    end=$(date +%s.%N)
    printf '%s %s %s\n' "$1" "$rc" "$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')" > "$2/$1.rc"
}
export -f run_one
printf '%s\n' $order | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} "$dir" "$bin"

failed=""
: > "$times.tmp"
for s in $suites; do
    cat "$dir/$s.log"
    read -r _ rc secs < "$dir/$s.rc" || { rc=2; secs=0; }
    printf '%s: %s in %s s\n\n' "$s" "$([ "$rc" = 0 ] && echo passed || echo "FAILED (exit $rc)")" "$secs"
    printf '%s %s\n' "$s" "$secs" >> "$times.tmp"
    [ "$rc" = 0 ] || failed="$failed $s"
done
mv "$times.tmp" "$times"
echo "slowest suites:"; sort -k2 -g -r "$times" | head -n 5 | sed 's/^/  /'
if [ -n "$failed" ]; then
    echo "FAILED suites:$failed"
    exit 1
fi
echo "all suites passed ($(printf '%s\n' $suites | wc -l) suites, $jobs at a time)"
