#!/usr/bin/env bash
# The demo: imports the shared public traces into build/demo/ and prints
# their statistics. Without ../shared/traces it synthesizes a trace instead
# and says so. (Later stages add simulation, validation and plots.)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=./rehearse
shared=${REHEARSE_SHARED_TRACES:-../shared/traces}
out=build/demo
mkdir -p "$out"

traces=()
if [ -d "$shared" ]; then
  for f in mooncake_conversation_trace.jsonl AzureLLMInferenceTrace_code.csv AzureLLMInferenceTrace_conv.csv; do
    if [ -r "$shared/$f" ]; then
      "$bin" trace import "$shared/$f" -o "$out/${f%.*}.rhtr"
      traces+=("$out/${f%.*}.rhtr")
    else
      echo "demo: $shared/$f is absent, skipped"
    fi
  done
fi
if [ ${#traces[@]} -eq 0 ]; then
  echo "demo: no shared traces in $shared: synthesizing one instead (Poisson 5 req/s, shared system prompts, 3-turn chats)"
  "$bin" trace synth --requests 5000 --rate 5 --prefix-groups 20 --prompts-per-group 50 \
    --system-prompt-len 2048 --turns 3 --seed 1 -o "$out/synthetic.rhtr"
  traces+=("$out/synthetic.rhtr")
fi
for t in "${traces[@]}"; do
  echo
  "$bin" trace stats "$t"
done
