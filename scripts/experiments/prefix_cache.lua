-- prefix_cache.lua — KV cache size x waiting-queue policy (fcfs, lpm) on the
-- Mooncake conversation trace: prefix-cache hit rate and TTFT. A bigger pool
-- keeps more of earlier turns; lpm admits the requests whose prefix is
-- cached first.
--   rehearse run scripts/experiments/prefix_cache.lua [trace=FILE] [requests=3000]
--       [rate_scale=0.25] [cost=FILE | model= gpu= tp=] [out=DIR]
local C = require "common"
local out = C.outdir("prefix_cache")
local cost, cost_label = C.cost()
local path = rehearse.args.trace or C.shared("mooncake_conversation_trace.jsonl")
local trace, source
if path then
  trace = rehearse.trace.load(path)
  source = path:match("[^/]+$")
else
  -- Without the shared trace: multi-turn chats whose turns extend each other.
  trace = C.multiturn_trace(600, 0.25)
  source = "synthesized multi-turn chats (shared traces absent)"
  rehearse.log("prefix_cache: ../shared/traces is absent; using synthesized multi-turn chats")
end
trace = trace:slice{first = C.arg("requests", 3000), rate_scale = C.arg("rate_scale", 0.25)}

local sizes = {250000, 500000, 1000000, 2000000, 4000000, 8000000}
local policies = {"fcfs", "lpm"}
local configs = {}
for _, p in ipairs(policies) do
  for _, s in ipairs(sizes) do
    configs[#configs + 1] = {trace = trace, cost = cost, max_total_tokens = s, schedule_policy = p,
                             chunked_prefill_size = 8192, max_running_requests = 128}
  end
end
rehearse.log("prefix_cache: %d configurations of %d requests from %s, %s", #configs, #trace, source, cost_label)
local results = rehearse.sweep(configs)
local rows = {}
for i, c in ipairs(configs) do
  local m = results[i].metrics
  rows[i] = {policy = c.schedule_policy, kv_tokens = c.max_total_tokens, hit_rate = m.cache_hit_rate,
             p50_ttft_ms = m.median_ttft_ms, p99_ttft_ms = m.p99_ttft_ms, retractions = m.retractions,
             output_throughput = m.output_throughput}
end
rehearse.csv.write(out .. "/cache.csv", rows,
  {"policy", "kv_tokens", "hit_rate", "p50_ttft_ms", "p99_ttft_ms", "retractions", "output_throughput"})
print(string.format("%-6s %12s %10s %12s %12s", "policy", "KV tokens", "hit rate", "p50 TTFT", "p99 TTFT"))
for _, r in ipairs(rows) do
  print(string.format("%-6s %12d %9.1f%% %10.0f ms %10.0f ms", r.policy, r.kv_tokens, 100 * r.hit_rate,
                      r.p50_ttft_ms, r.p99_ttft_ms))
end
rehearse.plot.lines{csv = out .. "/cache.csv", out = out .. "/hit_rate", x = "kv_tokens", y = "hit_rate",
  by = "policy", logx = true, title = "Prefix-cache hit rate against KV cache size — " .. source .. ", " .. cost_label,
  xlabel = "KV cache size (tokens, log scale)", ylabel = "cached prompt tokens / prompt tokens"}
rehearse.plot.lines{csv = out .. "/cache.csv", out = out .. "/ttft", x = "kv_tokens", y = "p50_ttft_ms,p99_ttft_ms",
  by = "policy", logx = true, logy = true, title = "TTFT against KV cache size — " .. source,
  xlabel = "KV cache size (tokens, log scale)", ylabel = "TTFT (ms, log scale)"}
C.summary(out, {cost = cost_label, trace = source, requests = #trace,
  plots = {
    {file = "hit_rate.png", caption = "Share of prompt tokens served from the prefix cache as the KV pool grows, for fcfs and longest-prefix-match ordering."},
    {file = "ttft.png", caption = "Median and p99 TTFT over the same pool sizes: every cached token is a token not prefilled."}}})
