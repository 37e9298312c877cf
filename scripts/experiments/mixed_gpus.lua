-- mixed_gpus.lua — a cluster of unlike GPUs behind a router: 4 H100 and
-- 4 A100 replicas of one model (a CLUSTER.json whose groups carry their own
-- cost models), the Azure conversation trace at rising rates, per router
-- policy. Round-robin gives every replica the same share, so the slower
-- A100s queue first; a router that looks at load (least outstanding, power
-- of two, least KV) sends the H100s more and holds TTFT down for longer.
--   rehearse run scripts/experiments/mixed_gpus.lua [model=llama-3-8b] [fast=h100-sxm] [slow=a100-80g]
--       [per_group=4] [requests=4000] [out=DIR]
local C = require "common"
local out = C.outdir("mixed_gpus")
local model, fast, slow = C.arg("model", "llama-3-8b"), C.arg("fast", "h100-sxm"), C.arg("slow", "a100-80g")
local per_group = C.arg("per_group", 4)
local function roofline(gpu) return {kind = "roofline", version = 1, model = model, gpu = gpu, tp = 1} end
local cluster = out .. "/cluster.json"
rehearse.json.write(cluster, {groups = {
  {name = fast, count = per_group, cost = roofline(fast)},
  {name = slow, count = per_group, cost = roofline(slow)}}})

local path = C.shared("AzureLLMInferenceTrace_conv.csv")
local trace, source
if path then
  trace = rehearse.trace.load(path)
  source = "Azure conv trace"
else
  trace = rehearse.trace.synth{requests = 4000, rate = 5, input_len = 1000, output_len = 250, block_size = 0}
  source = "synthesized chats (shared traces absent)"
  rehearse.log("mixed_gpus: ../shared/traces is absent; using synthesized chats")
end
trace = trace:slice{first = C.arg("requests", 4000)}

local rates = {8, 16, 24, 32}
local policies = {"round-robin", "least-outstanding", "power-of-two", "least-kv"}
local configs, labels = {}, {}
for _, rate in ipairs(rates) do
  for _, p in ipairs(policies) do
    configs[#configs + 1] = {trace = trace, cost = roofline(fast), cluster = cluster, router = p, rate_scale = rate,
                             chunked_prefill_size = 8192, max_running_requests = 128}
    labels[#configs] = {policy = p, rate = rate}
  end
end
rehearse.log("mixed_gpus: %d configurations of %d requests from %s, %d x %s + %d x %s (%s)", #configs, #trace,
             source, per_group, fast, per_group, slow, model)
local results = rehearse.sweep(configs)
local rows = {}
for i, l in ipairs(labels) do
  local r = results[i]
  local m = r.metrics
  local on_fast, all = 0, 0
  for _, x in ipairs(r.replicas) do
    all = all + x.routed
    if x.group == fast then on_fast = on_fast + x.routed end
  end
  rows[i] = {policy = l.policy, rate_scale = l.rate, request_rate = m.request_throughput,
             p50_ttft_ms = m.median_ttft_ms, p99_ttft_ms = m.p99_ttft_ms, p99_tpot_ms = m.p99_tpot_ms,
             fast_share = all > 0 and on_fast / all or 0}
end
rehearse.csv.write(out .. "/mixed.csv", rows,
  {"policy", "rate_scale", "request_rate", "p50_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "fast_share"})
print(string.format("%-18s %6s %10s %12s %12s %12s %10s", "router", "rate", "req/s", "p50 TTFT", "p99 TTFT",
                    "p99 TPOT", "on " .. fast))
for _, r in ipairs(rows) do
  print(string.format("%-18s %5dx %10.2f %9.0f ms %9.0f ms %9.1f ms %9.1f%%", r.policy, r.rate_scale,
                      r.request_rate, r.p50_ttft_ms, r.p99_ttft_ms, r.p99_tpot_ms, 100 * r.fast_share))
end
local title = string.format("%d x %s + %d x %s, %s — %s", per_group, fast, per_group, slow, model, source)
rehearse.plot.lines{csv = out .. "/mixed.csv", out = out .. "/ttft", x = "rate_scale", y = "p99_ttft_ms",
  by = "policy", logy = true, title = "p99 TTFT against load, by router — " .. title,
  xlabel = "arrival rate (x the trace's)", ylabel = "p99 TTFT (ms, log scale)"}
rehearse.plot.lines{csv = out .. "/mixed.csv", out = out .. "/share", x = "rate_scale", y = "fast_share",
  by = "policy", title = "Share of requests on the " .. fast .. "s, by router — " .. title,
  xlabel = "arrival rate (x the trace's)", ylabel = "requests routed to the " .. fast .. " group / all"}
local t = {}
for i, r in ipairs(rows) do
  t[i] = {r.policy, r.rate_scale, r.request_rate, r.p50_ttft_ms, r.p99_ttft_ms, r.p99_tpot_ms, r.fast_share}
end
C.summary(out, {cost = string.format("roofline %s: %d x %s, %d x %s (%s)", model, per_group, fast, per_group, slow,
                                     cluster),
  trace = source, requests = #trace,
  table = {columns = {"router", "rate (x)", "req/s", "p50 TTFT (ms)", "p99 TTFT (ms)", "p99 TPOT (ms)",
                      "share on " .. fast}, rows = t},
  plots = {
    {file = "ttft.png", caption = "p99 TTFT as the load rises: round-robin queues on the slower GPUs first."},
    {file = "share.png", caption = "Where the requests went: load-aware routers shift them to the faster GPUs."}}})
