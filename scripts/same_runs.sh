#!/usr/bin/env bash
# Do two rehearse binaries simulate the same? Runs both on the shared traces
# and synthetic ones (prefix sharing, multi-turn sessions, overload), with LRU
# and LFU eviction, page sizes 16 and 1, both schedulers, small pools that
# force eviction, cache-aware replicas and a prefill-decode cluster; compares
# every output trace, stdout and stderr byte for byte and every result JSON
# with its wall time left out. A speed change must leave all of them equal.
# Usage: scripts/same_runs.sh BEFORE AFTER [SHARED_TRACES_DIR]   (a few minutes)
set -u
[ $# -ge 2 ] || { echo "usage: $0 BEFORE AFTER [SHARED_TRACES_DIR]" >&2; exit 2; }
before=$(realpath "$1"); after=$(realpath "$2")
shared=${3:-${REHEARSE_SHARED_TRACES:-$(dirname "$0")/../../shared/traces}}
export REHEARSE_PRESETS=${REHEARSE_PRESETS:-$(realpath "$(dirname "$0")/../sim/cost/presets")}
# No progress lines: a run slower than 30 s (a busy machine) prints a
# heartbeat on stderr, and stderr is compared byte for byte.
export REHEARSE_PROGRESS=0
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
echo '{"version":1,"kind":"roofline","model":"llama-3-70b","gpu":"h200","tp":8}' > l70b.json
echo '{"version":1,"kind":"roofline","model":"llama-3.1-70b","gpu":"h200","tp":8}' > l31.json
echo '{"router":"cache-aware","cost":"l31.json","groups":[{"name":"p","count":2,"role":"prefill"},{"name":"d","count":2,"role":"decode"}]}' > pd.json
# The synthetic traces are written by BEFORE: a newer binary reads an older
# one's format, not the other way round.
"$before" trace synth -o pre.rhtr --seed 3 --requests 20000 --rate 50 --prefix-groups 20 --prompts-per-group 100 \
  --system-prompt-len 2000 >/dev/null
"$before" trace synth -o turns.rhtr --seed 4 --requests 20000 --rate 30 --turns 6 --sessions 64 >/dev/null
"$before" trace synth -o over.rhtr --seed 1 --requests 100000 --rate 2000 --input-dist fixed --input-len 1024 \
  --output-dist fixed --output-len 128 >/dev/null
moon=$shared/mooncake_conversation_trace.jsonl code=$shared/AzureLLMInferenceTrace_code.csv
conv=$shared/AzureLLMInferenceTrace_conv.csv
cases=(
  "pre|pre.rhtr --cost l70b.json --max-total-tokens 100000"
  "pre-lfu|pre.rhtr --cost l70b.json --max-total-tokens 100000 --radix-eviction lfu"
  "pre-r4|pre.rhtr --cost l70b.json --replicas 4 --router cache-aware --max-total-tokens 50000"
  "turns|turns.rhtr --cost l70b.json --max-total-tokens 150000"
  "turns-ps1|turns.rhtr --cost l70b.json --max-total-tokens 150000 --page-size 1"
  "over|over.rhtr --cost l70b.json"
)
if [ -f "$moon" ]; then
  cases+=("moon|$moon --cost l31.json"
          "moon-small|$moon --cost l31.json --max-total-tokens 200000"
          "moon-lfu|$moon --cost l31.json --max-total-tokens 200000 --radix-eviction lfu"
          "moon-ps1|$moon --cost l31.json --max-total-tokens 300000 --page-size 1"
          "moon-vllm|$moon --cost l31.json --max-total-tokens 200000 --scheduler vllm"
          "moon-r4|$moon --cost l31.json --replicas 4 --router cache-aware --max-total-tokens 200000"
          "moon-pd|$moon --cluster pd.json")
  [ -f "$code" ] && cases+=("azure-code|$code --cost l70b.json")
  [ -f "$conv" ] && cases+=("azure-conv|$conv --cost l70b.json --rate-scale 4")
else
  echo "same_runs: skipping the shared traces: $moon is absent (pass the folder as the third argument)"
fi
# Two traces that differ as bytes may still hold the same records: format
# versions 1 and 2 differ in the header's version byte (a binary from
# before priorities writes 1), so such a pair is compared decoded, with the
# version left out.
same_trace() {
  cmp -s <("$after" trace cat "$1" | sed '1s/"rehearse_trace":[0-9]*//') \
         <("$after" trace cat "$2" | sed '1s/"rehearse_trace":[0-9]*//')
}
bad=0
for c in "${cases[@]}"; do
  name=${c%%|*}; args=${c#*|}
  for side in before after; do
    bin=$before; [ $side = after ] && bin=$after
    # shellcheck disable=SC2086
    "$bin" sim $args -o $side-$name.rhtr --result $side-$name.json --per-request >$side-$name.out 2>$side-$name.err
    echo $? > $side-$name.rc
  done
  same=1
  cmp -s before-$name.rhtr after-$name.rhtr || same_trace before-$name.rhtr after-$name.rhtr || same=0
  for ext in out err rc; do cmp -s before-$name.$ext after-$name.$ext || same=0; done
  python3 - before-$name.json after-$name.json <<'EOF' || same=0
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
a.pop("wall_s", None); b.pop("wall_s", None)
sys.exit(0 if a == b else 1)
EOF
  if [ $same = 1 ]; then echo "same       $name"; else echo "DIFFERENT  $name"; bad=$((bad + 1)); fi
done
echo "same_runs: ${#cases[@]} runs, $bad different"
[ $bad -eq 0 ]
