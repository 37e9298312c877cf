#!/usr/bin/env bash
# Vidur's configuration search beside `rehearse plan` on one question.
# Write-up and results: sim/plan/VIDUR.md.
#
# usage: scripts/vidur_compare.sh TRACE.csv [OUT_DIR]
#   TRACE.csv  the shared requests in Azure's CSV format (TIMESTAMP,ContextTokens,GeneratedTokens)
#              at 1 request/s: the 2,000 requests Vidur's own generator makes from the first
#              2,000 Azure-conv requests (vidur_side below, step 2). A rate of q
#              (Vidur's --poisson_request_interval_generator_config_qps q) is --rate-scale q here.
#   OUT_DIR    where everything goes (default vidur_compare_out)
# needs: jq, awk; run from the repository root after make
# environment:
#   REHEARSE       the binary (default ./rehearse); REHEARSE_PRESETS / REHEARSE_SCRIPTS as usual
#   VIDUR_PROFILE  Vidur's a100 Meta-Llama-3-8B profile folder (default ../shared/gpu-profiles/
#                  vidur/compute/a100/meta-llama/Meta-Llama-3-8B) for the "vidur table" cost
#   PRICES         prices file (default scripts/prices.json: a100-80g $1.30/GPU-hour)
#   SLO_TTFT_MS, SLO_TPOT_MS, SLO_Q   the SLOs (default 2000, 200, 0.99; SLO_Q 0.99 or 0.9)
#   RATES          plan's target rates, Vidur QPS units (default "2 3 4 5 6 7 8 10 12 14")
#   VIDUR_PICK     Vidur's pick to price here, "SCHED:CHUNK:BATCHCAP:REPLICAS:QPS"
#                  (SCHED vllm or sarathi; CHUNK - for vllm), e.g. sarathi:2048:128:1:6.5
#   VIDUR_DIR      a Vidur checkout: also run Vidur's side (vidur_side below; about 30 minutes
#                  on 2 cores), with VIDUR_STUBS and AZURE_CONV; it writes OUT_DIR/vidur/az2k_poisson_qps1.csv,
#                  the TRACE.csv to give this script (any TRACE.csv will do for that first call)
#
# rehearse's side, for each of two cost models of Llama-3-8B on one A100 80GB (tp 1):
#   roofline  rehearse's default roofline
#   vidur     `rehearse cost import vidur` of Vidur's measured a100 mlp.csv (attention, LM
#             head: the roofline's; Vidur's own attention profile is not public)
# 1. `rehearse plan` at each rate in RATES, twice: --scheduler vllm (one token budget,
#    running requests first: Vidur's "sarathi") with chunks 512,2048, and --scheduler sglang
#    (prefill first, unchunked: Vidur's "vllm") with 4096-token prefill steps; batch caps
#    64,128; 1-2 replicas round-robin; no speculation; no prefix cache.
# 2. Vidur's capacity search (vidur/config_optimizer/config_explorer/capacity_search.py:
#    bisection on the rate, up to 20 probes, stop at 2.5% granularity, widen the bracket
#    while the delay is low) run with rehearse sim on each of the 12 grid configurations.
#    Vidur tests p99 scheduling delay <= 5 s by default (2 s here, its --scheduling-delay-slo-value,
#    to match the shared p99 TTFT <= 2 s); rehearse reports no scheduling delay, so its
#    stand-in is p99 TTFT <= SLO_TTFT_MS (TTFT = scheduling delay + prefill). Then Vidur's
#    selection: at each configuration's capacity, TTFT p90 <= 2 s and p99 TPOT <= SLO_TPOT_MS,
#    best QPS per dollar.
# 3. VIDUR_PICK priced by rehearse sim with both cost models.
set -eu

TRACE=$1
OUT=${2:-vidur_compare_out}
REHEARSE=${REHEARSE:-./rehearse}
VIDUR_PROFILE=${VIDUR_PROFILE:-../shared/gpu-profiles/vidur/compute/a100/meta-llama/Meta-Llama-3-8B}
PRICES=${PRICES:-scripts/prices.json}
SLO_TTFT_MS=${SLO_TTFT_MS:-2000}
SLO_TPOT_MS=${SLO_TPOT_MS:-200}
SLO_Q=${SLO_Q:-0.99}
RATES=${RATES:-"2 3 4 5 6 7 8 10 12 14"}
QP=$(awk -v q="$SLO_Q" 'BEGIN{printf "%d", q*100 + 0.5}')   # 99 or 90: the summary's p99_/p90_ keys
POOL=454768   # KV tokens: vLLM's sizing of an A100 80GB at utilization 0.9, for both cost models
mkdir -p "$OUT"

PRICE=$(jq -r '.gpus["a100-80g"].usd_per_gpu_hour' "$PRICES")
"$REHEARSE" trace import --format azure "$TRACE" -o "$OUT/trace.rtr" >/dev/null
"$REHEARSE" cost import vidur "$VIDUR_PROFILE" --model llama-3-8b -o "$OUT/vidur.json" >/dev/null
echo '{"kind": "roofline", "version": 1, "model": "llama-3-8b", "gpu": "a100-80g", "tp": 1}' > "$OUT/roofline.json"

# rehearse sim knobs for a grid configuration: SCHED CHUNK CAP REPLICAS
knobs() {
  local k="--disable-radix-cache --max-total-tokens $POOL --max-running-requests $3 --series-points 10"
  if [ "$1" = vllm ]; then k="$k --scheduler sglang --chunked-prefill-size -1 --max-prefill-tokens 4096"
  else k="$k --scheduler vllm --chunked-prefill-size $2"; fi
  if [ "$4" -gt 1 ]; then k="$k --replicas $4 --router round-robin"; fi
  echo "$k"
}
# one simulation: COST SCHED CHUNK CAP REPLICAS QPS -> "p90ttft p99ttft p99tpot completed" (ms)
probe() {
  # shellcheck disable=SC2046
  "$REHEARSE" sim "$OUT/trace.rtr" --cost "$OUT/$1.json" $(knobs "$2" "$3" "$4" "$5") \
    --rate-scale "$6" --json 2>/dev/null |
    jq -r "[.p90_ttft_ms, .p${QP}_ttft_ms, .p${QP}_tpot_ms, .completed] | @tsv"
}

# ---- 1. rehearse plan --------------------------------------------------------------------
PLAN_COMMON="--model llama-3-8b --slo-ttft-ms $SLO_TTFT_MS --slo-tpot-ms $SLO_TPOT_MS --slo-quantile $SLO_Q
  --gpus a100-80g --tp 1 --max-replicas 2 --max-gpus 2 --max-running-requests-list 64,128
  --speculative-steps 0 --routers round-robin --disable-radix-cache --max-total-tokens $POOL
  --prices $PRICES"
echo "cost,scheduler,rate_scale,pick,gpus,usd_per_hour,p99_ttft_ms,p99_tpot_ms,max_rate_scale,qps_per_dollar" > "$OUT/plan.csv"
for cost in roofline vidur; do
  gc=""; [ $cost = vidur ] && gc="--gpu-cost a100-80g=$OUT/vidur.json"
  for sched in vllm sglang; do
    if [ $sched = vllm ]; then sk="--scheduler vllm --chunked-prefill-sizes 512,2048"
    else sk="--scheduler sglang --chunked-prefill-sizes 4096 --max-prefill-tokens 4096"; fi
    for r in $RATES; do
      f="$OUT/plan_${cost}_${sched}_$r.json"
      # shellcheck disable=SC2086
      "$REHEARSE" plan "$OUT/trace.rtr" $PLAN_COMMON $gc $sk --rate-scale "$r" --json > "$f" 2>/dev/null || true
      jq -r --arg c $cost --arg s $sched --arg r "$r" --arg p "$PRICE" '
        (.per_gpu[0] // {}) as $g | (.ranked[]? | select(.name == $g.best)) as $w |
        [$c, $s, $r, $g.best, $w.gpus, $w.usd_per_hour, $w.metrics.p99_ttft_ms, $w.metrics.p99_tpot_ms,
         $g.max_rate_scale, ($g.max_rate_scale / ($w.gpus * ($p|tonumber)))] | @csv' "$f" >> "$OUT/plan.csv" || true
    done
  done
done

# ---- 2. Vidur's capacity search, on rehearse sim ----------------------------------------
# the same bisection as CapacitySearch.search(), delay = p99 TTFT in seconds, SLO = SLO_TTFT_MS
capacity() {  # COST SCHED CHUNK CAP REPLICAS -> prints the capacity (QPS) or 0
  local left=0 right=16 qps=0 best=0 over=4294967296 slo d res i   # start_qps 8: right = 2 x 8
  slo=$(awk -v t="$SLO_TTFT_MS" 'BEGIN{print t/1000}')
  for i in $(seq 20); do
    if awk -v l=$left -v r=$right -v q=$qps 'BEGIN{exit !((l>r?l-r:r-l) < 2.5*q/100)}'; then break; fi
    qps=$(awk -v l=$left -v r=$right 'BEGIN{printf "%.6g", (l+r)/2}')
    res=$(probe "$@" "$qps")
    d=$(echo "$res" | awk '{printf "%.6g", $2/1000}')
    if awk -v d="$d" -v s="$slo" 'BEGIN{exit !(d <= s)}'; then
      best=$qps
      right=$(awk -v d="$d" -v s="$slo" -v r=$right -v q=$qps -v o=$over 'BEGIN{
        n=r; if (d < s/8) n=r*4; else if (d < s/4) n=r*2; else if (q > 0.8*r) n=r*2;
        if (n > o) n=o; printf "%.6g", n}')
      left=$qps
    else
      right=$(awk -v d="$d" -v q=$qps 'BEGIN{ if (d > 500) printf "%.6g", q/2; else printf "%.6g", q}')
      over=$(awk -v o=$over -v q=$qps 'BEGIN{printf "%.6g", (q<o?q:o)}')
    fi
  done
  echo "$best"
}
echo "cost,scheduler,chunk,batch_cap,replicas,capacity_qps,p90_ttft_ms,p99_ttft_ms,p99_tpot_ms,qps_per_dollar,meets_ttft_p90_2s_and_tpot" > "$OUT/capacity.csv"
for cost in roofline vidur; do
  for rep in 1 2; do
    for sc in vllm:- sarathi:512 sarathi:2048; do
      for cap in 64 128; do
        s=${sc%%:*}; c=${sc##*:}
        q=$(capacity $cost "$s" "$c" $cap $rep)
        m=$(probe $cost "$s" "$c" $cap $rep "$q")
        echo "$cost,$s,$c,$cap,$rep,$q,$(echo "$m" | awk -v q="$q" -v n=$rep -v p="$PRICE" -v t="$SLO_TPOT_MS" \
          'BEGIN{OFS=","} {print $1,$2,$3,q/(n*p),(($1<=2000 && $3<=t)?1:0)}')" >> "$OUT/capacity.csv"
      done
    done
  done
done

# ---- 3. Vidur's pick, priced by rehearse ------------------------------------------------
if [ -n "${VIDUR_PICK:-}" ]; then
  IFS=: read -r s c cap rep q <<< "$VIDUR_PICK"
  echo "cost,pick,qps,p90_ttft_ms,p99_ttft_ms,p99_tpot_ms,completed" > "$OUT/vidur_pick.csv"
  for cost in roofline vidur; do
    echo "$cost,$VIDUR_PICK,$q,$(probe $cost "$s" "$c" "$cap" "$rep" "$q" | tr '\t' ',')" >> "$OUT/vidur_pick.csv"
  done
fi

# ---- Vidur's side (documentation; runs only with VIDUR_DIR set) -------------------------
# Vidur (microsoft/vidur, commit 7d47513) on Debian's python3 with stubs for wandb, ddsketch,
# plotly_express and ray, and a synthetic attention.csv: see ../shared/peers/vidur.md.
# Its config explorer (vidur/config_optimizer/config_explorer/main.py) needs ray; the driver
# below runs the same CapacitySearch class one configuration after another with a stub
# `ray` (import only). It drops one flag that vidur.main at the same commit no longer accepts
# (--synthetic_request_generator_config_max_tokens), and sets --scheduling-delay-slo-value 2.
# Its selection step is the dashboard's
# (vidur/config_optimizer/analyzer/dashboard/{main,best_config_page}.py): per configuration
# the highest QPS whose p99 scheduling delay < the SLO, then TTFT p90 <= 2 s, TBT p99 <= 200 ms,
# best QPS per dollar.
vidur_side() {
  # needs: VIDUR_DIR (checkout, with a synthetic attention.csv), VIDUR_STUBS (wandb, ddsketch,
  # plotly_express, ray stubs), AZURE_CONV (AzureLLMInferenceTrace_conv.csv); Debian python3.
  local V S VPY=${VIDUR_PYTHON:-/usr/bin/python3}   # Debian's, with its numpy/pandas/sklearn
  V=$(cd "$VIDUR_DIR" && pwd); S=$(mkdir -p "$OUT/vidur" && cd "$OUT/vidur" && pwd)
  [ -d "$V/vidur" ] || { echo "VIDUR_DIR=$V is not a Vidur checkout" >&2; return 1; }
  mkdir -p "$S/bin"; ln -sf "$VPY" "$S/bin/python"   # Vidur runs `python`
  local PP="$V:$VIDUR_STUBS" PY="env PATH=$S/bin:$PATH PYTHONPATH=$V:$VIDUR_STUBS"
  # 1. the lengths: the first 2,000 Azure-conv requests
  "$VPY" - "$AZURE_CONV" "$S/az2k_lengths.csv" <<'EOF'
import sys, pandas as pd
d = pd.read_csv(sys.argv[1]); d["_t"] = pd.to_datetime(d["TIMESTAMP"])
d = d.sort_values("_t", kind="stable").head(2000)
pd.DataFrame({"num_prefill_tokens": d["ContextTokens"].clip(lower=1).values,
              "num_decode_tokens": d["GeneratedTokens"].clip(lower=1).values}).to_csv(sys.argv[2], index=False)
EOF
  # 2. the shared trace: Vidur's own generator at QPS 1 (lengths clipped to 4096, shuffled with
  #    its seed, truncated-Poisson gaps), in Azure's format for rehearse (TRACE.csv above)
  (cd "$V" && PYTHONPATH=$PP "$VPY" - "$S/az2k_lengths.csv" "$S/az2k_poisson_qps1.csv" <<'EOF'
import sys, datetime
from vidur.config import SyntheticRequestGeneratorConfig, TraceRequestLengthGeneratorConfig, PoissonRequestIntervalGeneratorConfig
from vidur.request_generator.synthetic_request_generator import SyntheticRequestGenerator
cfg = SyntheticRequestGeneratorConfig(
    length_generator_config=TraceRequestLengthGeneratorConfig(trace_file=sys.argv[1], max_tokens=4096,
                                                              prefill_scale_factor=1, decode_scale_factor=1),
    interval_generator_config=PoissonRequestIntervalGeneratorConfig(qps=1.0), num_requests=2000)
t0 = datetime.datetime(2023, 11, 16, 18, 0, 0)
with open(sys.argv[2], "w") as f:
    f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    for r in SyntheticRequestGenerator(cfg).generate_requests():
        ts = t0 + datetime.timedelta(seconds=r.arrived_at)
        f.write(f"{ts.strftime('%Y-%m-%d %H:%M:%S.%f')},{r.num_prefill_tokens},{r.num_decode_tokens}\n")
EOF
  )
  # 3. Vidur's search: its CapacitySearch, one configuration after another (ray stubbed);
  #    "warmup" first (its cache warm-up: one 32-request run that trains the predictors)
  cat > "$S/vidur_search.py" <<'EOF'
import argparse, json, sys, time, os
from vidur.config_optimizer.config_explorer.config import JobConfig, ModelConfig, TraceConfig, ClusterConfig, SchedulerConfig
from vidur.config_optimizer.config_explorer.capacity_search import CapacitySearch
out_base, mode, trace, cache = sys.argv[1:5]
config = {"models": [{"name": "llama-3-8b", "identifier": "meta-llama/Meta-Llama-3-8B"}],
          "traces": [{"name": "azconv2k", "trace_file": trace, "max_seq_len": 4096, "num_requests": 2000, "start_qps": 8}],
          "schedulers": [{"scheduler": "vllm"}, {"scheduler": "sarathi", "chunk_size": 512}, {"scheduler": "sarathi", "chunk_size": 2048}],
          "batch_sizes": [64, 128], "tp_dimensions": [1], "pp_dimensions": [1]}
args = argparse.Namespace(min_search_granularity=2.5, output_dir=None, cache_dir=cache,
                          scheduling_delay_slo_value=2.0, scheduling_delay_slo_quantile=0.99,
                          max_iterations=20, time_limit=30, debug=False, skip_cache_warmup=False)
class Search(CapacitySearch):   # drop the one flag vidur.main no longer accepts
    def _generate_run_command(self, c):
        return super()._generate_run_command(c).replace("--synthetic_request_generator_config_max_tokens 4096 ", "")
results = []
for num_gpus in ([1] if mode == "warmup" else [1, 2]):   # runs are keyed by device: one dir per size
    cfg = dict(config, clusters=[{"device": "a100", "num_gpus": num_gpus, "gpus_per_node": 4}])
    a = argparse.Namespace(**vars(args)); a.output_dir = f"{out_base}/gpus{num_gpus}"
    if mode == "warmup":
        a.max_iterations = 1
        tc = TraceConfig(**cfg["traces"][0]); tc.num_requests = 32
        jobs = [JobConfig(ModelConfig(**cfg["models"][0]), tc, ClusterConfig(**cfg["clusters"][0]),
                          SchedulerConfig(**cfg["schedulers"][0]), 1, 1, cfg["batch_sizes"][0])]
    else:
        jobs = JobConfig.generate_job_configs(cfg)
    for job in jobs:
        r = Search(job, a).search(); r["num_gpus"] = num_gpus; print(json.dumps(r), flush=True); results.append(r)
json.dump(results, open(f"{out_base}/{mode}_results.json", "w"), indent=1)
EOF
  for mode in warmup search; do
    (cd "$V" && $PY nice -n 10 /usr/bin/time -v "$VPY" "$S/vidur_search.py" "$S/vout/$mode" $mode \
       "$S/az2k_lengths.csv" "$S/cache" > "$S/$mode.log" 2> "$S/$mode.time")
  done
  # 4. the selection (Vidur's process_run per run, then the dashboard's rule): see
  #    sim/plan/VIDUR.md; a Vidur run of one configuration (rehearse's pick) is
  #    python -m vidur.main with the flags one probe's output.log under $S/vout/search records,
  #    its scheduler, chunk, batch cap, replicas and QPS changed.
}
if [ -n "${VIDUR_DIR:-}" ]; then vidur_side; fi

echo "wrote $OUT/plan.csv $OUT/capacity.csv${VIDUR_PICK:+ $OUT/vidur_pick.csv}"
