-- router_policy.lua — replicas x router policy on the Mooncake conversation
-- trace: prefix-cache hit rate, TTFT p50/p99 and load imbalance. Turns of a
-- conversation share their earlier turns' blocks, so a router that sends a
-- conversation where its prefix is cached (cache-aware) saves the prefill a
-- load-only router (round-robin, least-outstanding, power of two) repeats.
--   rehearse run scripts/experiments/router_policy.lua [trace=FILE] [requests=6000]
--       [rate_scale=0.15] [cost=FILE | model= gpu= tp=] [out=DIR]
-- rate_scale is each replica's share: n replicas replay the trace n times
-- faster, so the load per replica is the same for every n.
local C = require "common"
local out = C.outdir("router_policy")
local cost, cost_label = C.cost()
local path = rehearse.args.trace or C.shared("mooncake_conversation_trace.jsonl")
local trace, source
if path then
  trace = rehearse.trace.load(path)
  source = path:match("[^/]+$")
else
  -- Without the shared trace: multi-turn chats whose turns extend each other.
  trace = C.multiturn_trace(1200, 0.05)
  source = "synthesized multi-turn chats (shared traces absent)"
  rehearse.log("router_policy: ../shared/traces is absent; using synthesized multi-turn chats")
end
trace = trace:slice{first = C.arg("requests", 6000)}
local per_replica = C.arg("rate_scale", 0.15)

local replicas = {2, 4, 8}
local policies = {"round-robin", "least-outstanding", "power-of-two", "cache-aware"}
local configs = {}
for _, n in ipairs(replicas) do
  for _, p in ipairs(policies) do
    -- Each replica's KV pool is what its GPUs' memory leaves (the cost model's).
    configs[#configs + 1] = {trace = trace, cost = cost, rate_scale = per_replica * n, context_length = 131072,
                             chunked_prefill_size = 8192, max_running_requests = 128,
                             cluster = {replicas = n, router = p}}
  end
end
rehearse.log("router_policy: %d configurations of %d requests from %s, %s", #configs, #trace, source, cost_label)
local results = rehearse.sweep(configs)
local rows = {}
for i, c in ipairs(configs) do
  local r = results[i]
  local m = r.metrics
  rows[i] = {policy = c.cluster.router, replicas = c.cluster.replicas, hit_rate = m.cache_hit_rate,
             p50_ttft_ms = m.median_ttft_ms, p99_ttft_ms = m.p99_ttft_ms, imbalance = r.imbalance_requests or 1,
             busy_imbalance = r.imbalance_busy or 1, output_throughput = m.output_throughput}
end
rehearse.csv.write(out .. "/router.csv", rows,
  {"policy", "replicas", "hit_rate", "p50_ttft_ms", "p99_ttft_ms", "imbalance", "busy_imbalance", "output_throughput"})
print(string.format("%-18s %8s %10s %12s %12s %10s", "router", "replicas", "hit rate", "p50 TTFT", "p99 TTFT",
                    "imbalance"))
for _, r in ipairs(rows) do
  print(string.format("%-18s %8d %9.1f%% %9.0f ms %9.0f ms %10.3f", r.policy, r.replicas, 100 * r.hit_rate,
                      r.p50_ttft_ms, r.p99_ttft_ms, r.imbalance))
end
rehearse.plot.lines{csv = out .. "/router.csv", out = out .. "/hit_rate", x = "replicas", y = "hit_rate",
  by = "policy", title = "Prefix-cache hit rate against replicas, by router — " .. source .. ", " .. cost_label,
  xlabel = "replicas (the load grows with them)", ylabel = "cached prompt tokens / prompt tokens"}
rehearse.plot.lines{csv = out .. "/router.csv", out = out .. "/ttft", x = "replicas", y = "p50_ttft_ms,p99_ttft_ms",
  by = "policy", logy = true, title = "TTFT against replicas, by router — " .. source,
  xlabel = "replicas", ylabel = "TTFT (ms, log scale)"}
C.summary(out, {cost = cost_label, trace = source, requests = #trace,
  table = {columns = {"router", "replicas", "hit rate", "p50 TTFT (ms)", "p99 TTFT (ms)", "imbalance"},
           rows = (function()
             local t = {}
             for i, r in ipairs(rows) do
               t[i] = {r.policy, r.replicas, r.hit_rate, r.p50_ttft_ms, r.p99_ttft_ms, r.imbalance}
             end
             return t
           end)()},
  plots = {
    {file = "hit_rate.png", caption = "Share of prompt tokens served from the replicas' prefix caches as replicas (and the load) grow, per router policy."},
    {file = "ttft.png", caption = "Median and p99 TTFT over the same runs: cache-aware routing keeps a conversation's turns where its prefix is cached."}}})
