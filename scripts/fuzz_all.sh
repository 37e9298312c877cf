#!/usr/bin/env bash
# fuzz_all.sh BUILD SECONDS TIMEOUT TARGET... — runs each libFuzzer TARGET for
# SECONDS on its corpus (tests/fuzz/corpus/<name>/, new inputs kept under
# BUILD/found/<name>/), as many at once as the -jN in MAKEFLAGS says (else
# nproc): each fuzzer is one process on one core, so two cores fuzz twice the
# inputs in the same wall time. Prints each target's last lines in order;
# on a crash, leak, hang or OOM prints the target's log tail and exits 1.
set -uo pipefail
build="$1" seconds="$2" timeout="$3"
shift 3
jobs=$(printf '%s\n' "${MAKEFLAGS:-}" | grep -oE -- '-j *[0-9]+' | grep -oE '[0-9]+' | head -n 1)
jobs="${jobs:-$(nproc)}"

fuzz_one() {  # target build seconds timeout
    local n
    n=$(basename "$1")
    mkdir -p "tests/fuzz/corpus/$n" "$2/found/$n"
    "$1" -max_total_time="$3" -timeout="$4" -artifact_prefix="$2/found/$n/" \
         "$2/found/$n" "tests/fuzz/corpus/$n" > "$2/$n.log" 2>&1
    echo $? > "$2/$n.rc"
}
export -f fuzz_one
echo "fuzz: $# targets for $seconds s each, $jobs at a time"
printf '%s\n' "$@" | xargs -P "$jobs" -I{} bash -c 'fuzz_one "$@"' _ {} "$build" "$seconds" "$timeout"

failed=0
for f in "$@"; do
    n=$(basename "$f")
    rc=$(cat "$build/$n.rc" 2>/dev/null || echo 2)
    echo "fuzz: $n"
    if [ "$rc" != 0 ]; then
        tail -n 40 "$build/$n.log"
        failed=1
        continue
    fi
    grep -E '^(#[0-9]+ +DONE|Done [0-9]+ runs|fuzz_[a-z_]+: the )' "$build/$n.log" | tail -n 2
done
exit $failed
