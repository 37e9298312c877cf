-- hicache.lua — a host-memory tier below the GPU's prefix cache (SGLang's
-- --enable-hierarchical-cache): TTFT, throughput and the hit rate per tier
-- against the host tier's size (--hicache-ratio: 0, the tier off, to 8 times
-- the GPU pool) and its write policy, on
--   1. multi-turn chats in the shape of SGLang's bench_multiturn (the HiCache
--      blog's benchmark): 80 closed-loop clients, 10 turns of 2,048 new tokens
--      each, every turn the whole chat so far;
--   2. the Mooncake conversation trace (open loop, arrivals slowed 4 times so
--      one GPU keeps up), with a longer capacity sweep set beside the Mooncake
--      paper's statement of how hit rate grows with cache capacity.
--   3. the same trace over 4 replicas behind round-robin and cache-aware
--      routing, each with a host tier of 4x its pool, with and without a store
--      all replicas share (Mooncake's, --hicache-storage-backend mooncake),
--      beside the Mooncake paper's global-against-local cache hit rates.
-- Llama-3.1-8B (128k context) on one H100, the GPU pool sized as SGLang sizes
-- it; host hits load back over the H100's PCIe link layer by layer while the
-- prefill computes; evicted pages are copied to the host on insert
-- (write_through), on their second use (write_through_selective) or when
-- evicted (write_back, the eviction waiting for the copy).
--   rehearse run scripts/experiments/hicache.lua [clients=80] [turns=10] [rate_scale=0.25] [out=DIR]
local C = require "common"
local out = C.outdir("hicache")
local cost = rehearse.cost.new{kind = "roofline", version = 1, model = "llama-3.1-8b", gpu = "h100-sxm", tp = 1}
local cost_label = "roofline llama-3.1-8b on 1 x h100-sxm"
local clients, turns = C.arg("clients", 80), C.arg("turns", 10)

local ratios = {0, 1, 2, 3, 4, 6, 8}
local policies = {"write_through", "write_through_selective", "write_back"}

-- One configuration per (host size, policy); ratio 0 is the tier off, once.
local function grid(base)
  local configs, meta = {}, {}
  for _, p in ipairs(policies) do
    for _, x in ipairs(ratios) do
      local c = {}
      for k, v in pairs(base) do c[k] = v end
      if x > 0 then
        c.enable_hierarchical_cache = true
        c.hicache_ratio = x
        c.hicache_write_policy = p
      end
      configs[#configs + 1] = c
      meta[#meta + 1] = {policy = p, ratio = x}
    end
  end
  return configs, meta
end

local function rows_of(configs, meta, results)
  local rows = {}
  for i in ipairs(configs) do
    local m = results[i].metrics
    local host = m.cache_hit_rate_host or 0
    rows[i] = {policy = meta[i].policy, hicache_ratio = meta[i].ratio,
               request_throughput = m.request_throughput, input_throughput = m.input_throughput,
               mean_ttft_ms = m.mean_ttft_ms, p99_ttft_ms = m.p99_ttft_ms,
               hit_rate = m.cache_hit_rate, hit_rate_device = m.cache_hit_rate - host, hit_rate_host = host,
               load_back_tokens = m.load_back_tokens or 0, write_back_tokens = m.write_back_tokens or 0}
  end
  return rows
end

local cols = {"policy", "hicache_ratio", "request_throughput", "input_throughput", "mean_ttft_ms", "p99_ttft_ms",
              "hit_rate", "hit_rate_device", "hit_rate_host", "load_back_tokens", "write_back_tokens"}

local function print_rows(title, rows)
  print(title)
  print(string.format("  %-24s %5s %9s %11s %11s %9s %9s", "policy", "ratio", "req/s", "mean TTFT", "p99 TTFT",
                      "hit GPU", "hit host"))
  for _, r in ipairs(rows) do
    print(string.format("  %-24s %5g %9.2f %8.0f ms %8.0f ms %8.1f%% %8.1f%%", r.policy, r.hicache_ratio,
                        r.request_throughput, r.mean_ttft_ms, r.p99_ttft_ms, 100 * r.hit_rate_device,
                        100 * r.hit_rate_host))
  end
end

local function plots(rows, name, what)
  local wt = {}
  for _, r in ipairs(rows) do if r.policy == "write_through" then wt[#wt + 1] = r end end
  rehearse.plot.lines{rows = rows, columns = cols, out = out .. "/" .. name .. "_ttft", x = "hicache_ratio",
    y = "mean_ttft_ms", by = "policy", logy = true,
    title = "Mean TTFT against the host tier's size — " .. what,
    xlabel = "--hicache-ratio (host tier / GPU pool; 0: no host tier)", ylabel = "mean TTFT (ms, log scale)"}
  rehearse.plot.lines{rows = rows, columns = cols, out = out .. "/" .. name .. "_throughput", x = "hicache_ratio",
    y = "request_throughput", by = "policy",
    title = "Throughput against the host tier's size — " .. what,
    xlabel = "--hicache-ratio (host tier / GPU pool; 0: no host tier)", ylabel = "requests / s"}
  rehearse.plot.lines{rows = wt, columns = cols, out = out .. "/" .. name .. "_hits", x = "hicache_ratio",
    y = "hit_rate_device,hit_rate_host,hit_rate",
    title = "Prefix hits by tier (write_through) — " .. what,
    xlabel = "--hicache-ratio (host tier / GPU pool; 0: no host tier)", ylabel = "share of prompt tokens"}
end

-- 1. multi-turn chats, closed loop
local chats = rehearse.trace.synth{arrival = "closed-loop", clients = clients, turns = turns, seed = 5,
  requests = clients * turns, input_dist = "fixed", input_len = 2048, output_dist = "fixed", output_len = 64,
  block_size = 256}
local configs, meta = grid{trace = chats, cost = cost, max_concurrency = clients}
rehearse.log("hicache: %d configurations of %d chat turns (%d clients), %s", #configs, #chats, clients, cost_label)
local chat_rows = rows_of(configs, meta, rehearse.sweep(configs))
rehearse.csv.write(out .. "/chats.csv", chat_rows, cols)
print_rows(string.format("multi-turn chats: %d clients x %d turns of 2048 new tokens (%s)", clients, turns, cost_label),
           chat_rows)
plots(chat_rows, "chats", string.format("%d chat clients, %d turns of 2,048 tokens", clients, turns))

local function at(rows, policy, ratio)
  for _, r in ipairs(rows) do if r.policy == policy and r.hicache_ratio == ratio then return r end end
end
local off, on4 = at(chat_rows, "write_through", 0), at(chat_rows, "write_through", 4)
local table_rows = {
  {"chats: GPU only", string.format("%.2f", off.request_throughput), string.format("%.0f", off.mean_ttft_ms),
   string.format("%.0f%%", 100 * off.hit_rate), "—"},
  {"chats: + host tier 4x", string.format("%.2f (%.1fx)", on4.request_throughput,
    on4.request_throughput / off.request_throughput),
   string.format("%.0f (%+.0f%%)", on4.mean_ttft_ms, 100 * (on4.mean_ttft_ms / off.mean_ttft_ms - 1)),
   string.format("%.0f%%", 100 * on4.hit_rate), "SGLang blog: up to 6x throughput, up to 80% lower TTFT; "
     .. "Novita: 2x, -56%, hit rate 40% to 80%"},
}

-- 2. the Mooncake conversation trace, open loop
local path = C.shared("mooncake_conversation_trace.jsonl")
local mc_rows, capacity = {}, {}
if path then
  local mc = rehearse.trace.load(path)
  mc = mc:slice{rate_scale = C.arg("rate_scale", 0.25)}
  local mconfigs, mmeta = grid{trace = mc, cost = cost}
  rehearse.log("hicache: %d configurations of the Mooncake conversation trace (%d requests)", #mconfigs, #mc)
  mc_rows = rows_of(mconfigs, mmeta, rehearse.sweep(mconfigs))
  rehearse.csv.write(out .. "/mooncake.csv", mc_rows, cols)
  print_rows("Mooncake conversation trace, arrivals x" .. C.arg("rate_scale", 0.25), mc_rows)
  plots(mc_rows, "mooncake", "Mooncake conversation trace")
  local moff, mon = at(mc_rows, "write_through", 0), at(mc_rows, "write_through", 8)
  table_rows[#table_rows + 1] = {"Mooncake conversation: GPU only", string.format("%.2f", moff.request_throughput),
    string.format("%.0f", moff.mean_ttft_ms), string.format("%.1f%%", 100 * moff.hit_rate), "—"}
  table_rows[#table_rows + 1] = {"Mooncake conversation: + host 8x", string.format("%.2f", mon.request_throughput),
    string.format("%.0f (%+.0f%%)", mon.mean_ttft_ms, 100 * (mon.mean_ttft_ms / moff.mean_ttft_ms - 1)),
    string.format("%.1f%%", 100 * mon.hit_rate), "—"}

  -- Capacity: total cache (GPU pool + host tier) against the hit rate, with
  -- the trace's ideal (an unbounded cache) as the maximum. The Mooncake paper
  -- (FAST'25, section on the cache pool): about 3M tokens of local cache
  -- reach under 50% of the maximum hit rate; about 50M tokens come near it.
  local caps = {0, 2, 4, 8, 16, 32, 64, 128}
  local cconfigs = {}
  for _, x in ipairs(caps) do
    cconfigs[#cconfigs + 1] = x > 0 and {trace = mc, cost = cost, enable_hierarchical_cache = true, hicache_ratio = x}
                                     or {trace = mc, cost = cost}
  end
  local cres = rehearse.sweep(cconfigs)
  local ideal = mc:stats().prefix_hit_ratio
  local pool = cres[1].pool_tokens
  for i, x in ipairs(caps) do
    local m = cres[i].metrics
    -- under write_through the host tier holds the GPU's pages too: the cache is the larger of the two
    local tokens = x > 1 and x * pool or pool
    capacity[i] = {cache_tokens = tokens, hicache_ratio = x, hit_rate = m.cache_hit_rate,
                   share_of_ideal = m.cache_hit_rate / ideal}
  end
  rehearse.csv.write(out .. "/capacity.csv", capacity, {"cache_tokens", "hicache_ratio", "hit_rate", "share_of_ideal"})
  print(string.format("capacity (GPU pool %d tokens; ideal hit rate of the trace %.1f%%):", pool, 100 * ideal))
  for _, r in ipairs(capacity) do
    print(string.format("  %10.1fM tokens  hit %5.1f%%  = %3.0f%% of ideal", r.cache_tokens / 1e6, 100 * r.hit_rate,
                        100 * r.share_of_ideal))
  end
  rehearse.plot.lines{rows = capacity, columns = {"cache_tokens", "hit_rate"}, out = out .. "/capacity",
    x = "cache_tokens", y = "hit_rate", logx = true, hline = ideal, hline_label = "unbounded cache",
    title = "Mooncake conversation trace: hit rate against the cache's size (GPU pool and host tier)",
    xlabel = "tokens the GPU pool and host tier hold (log scale)", ylabel = "share of prompt tokens cached"}
  local near3, near50
  for _, r in ipairs(capacity) do
    if not near3 or math.abs(math.log(r.cache_tokens / 3e6)) < math.abs(math.log(near3.cache_tokens / 3e6)) then near3 = r end
    if not near50 or math.abs(math.log(r.cache_tokens / 50e6)) < math.abs(math.log(near50.cache_tokens / 50e6)) then near50 = r end
  end
  table_rows[#table_rows + 1] = {string.format("Mooncake: cache of %.1fM tokens", near3.cache_tokens / 1e6), "", "",
    string.format("%.0f%% of ideal", 100 * near3.share_of_ideal), "Mooncake paper: ~3M tokens reach < 50% of the maximum"}
  table_rows[#table_rows + 1] = {string.format("Mooncake: cache of %.1fM tokens", near50.cache_tokens / 1e6), "", "",
    string.format("%.0f%% of ideal", 100 * near50.share_of_ideal), "Mooncake paper: ~50M tokens come near the maximum"}

  -- 3. four replicas, local tiers against a store they share
  local cluster = rehearse.trace.load(path):slice{rate_scale = 4 * C.arg("rate_scale", 0.25)}
  local sconfigs, smeta = {}, {}
  for _, router in ipairs({"round-robin", "cache-aware"}) do
    for _, store in ipairs({"none", "mooncake"}) do
      sconfigs[#sconfigs + 1] = {trace = cluster, cost = cost, replicas = 4, router = router,
        enable_hierarchical_cache = true, hicache_ratio = 4, hicache_storage_backend = store}
      smeta[#smeta + 1] = {router = router, store = store}
    end
  end
  rehearse.log("hicache: 4 replicas, %d configurations", #sconfigs)
  local sres = rehearse.sweep(sconfigs)
  local store_rows = {}
  for i in ipairs(sconfigs) do
    local m = sres[i].metrics
    local host, storage = m.cache_hit_rate_host or 0, m.cache_hit_rate_storage or 0
    store_rows[i] = {router = smeta[i].router, store = smeta[i].store, hit_rate = m.cache_hit_rate,
      hit_rate_device = m.cache_hit_rate - host - storage, hit_rate_host = host, hit_rate_storage = storage,
      mean_ttft_ms = m.mean_ttft_ms, p99_ttft_ms = m.p99_ttft_ms, request_throughput = m.request_throughput}
  end
  rehearse.csv.write(out .. "/store.csv", store_rows, {"router", "store", "hit_rate", "hit_rate_device",
    "hit_rate_host", "hit_rate_storage", "mean_ttft_ms", "p99_ttft_ms", "request_throughput"})
  print("Mooncake conversation trace on 4 replicas (host tier 4x each):")
  print(string.format("  %-12s %-9s %9s %9s %9s %9s %11s", "router", "store", "hit", "GPU", "host", "store", "mean TTFT"))
  for _, r in ipairs(store_rows) do
    print(string.format("  %-12s %-9s %8.1f%% %8.1f%% %8.1f%% %8.1f%% %8.0f ms", r.router, r.store, 100 * r.hit_rate,
      100 * r.hit_rate_device, 100 * r.hit_rate_host, 100 * r.hit_rate_storage, r.mean_ttft_ms))
  end
  local bars = {}
  for _, r in ipairs(store_rows) do
    bars[#bars + 1] = {setting = (r.router == "round-robin" and "rr" or "cache-aware") .. (r.store == "none" and ", local" or ", store"),
                       hit_rate = r.hit_rate}
  end
  rehearse.plot.bars{rows = bars, columns = {"setting", "hit_rate"}, out = out .. "/store", x = "setting",
    y = "hit_rate", title = "Mooncake conversation trace on 4 replicas: prefix hit rate, local tiers or one shared store",
    xlabel = "router (rr: round-robin), and local host tiers only or a store the replicas share", ylabel = "share of prompt tokens cached"}
  local rr, rrs = store_rows[1], store_rows[2]
  table_rows[#table_rows + 1] = {"Mooncake, 4 replicas, round-robin: shared store / local",
    "", string.format("%.0f / %.0f", rrs.mean_ttft_ms, rr.mean_ttft_ms),
    string.format("%.1f%% / %.1f%% (%.2fx)", 100 * rrs.hit_rate, 100 * rr.hit_rate, rrs.hit_rate / rr.hit_rate),
    "Mooncake paper: a global cache hits up to 2.36x a local one"}
else
  rehearse.log("hicache: ../shared/traces is absent; the Mooncake part is skipped")
end

local plot_list = {
  {file = "chats_ttft.png", caption = "Multi-turn chats: mean TTFT against the host tier's size, one line per write policy. Each chat outgrows what the GPU pool keeps for it; a host tier larger than the chats' working set turns recomputed turns into load-backs."},
  {file = "chats_throughput.png", caption = "Multi-turn chats: requests per second under the same sweep (closed loop: each client sends its next turn when the last one ends)."},
  {file = "chats_hits.png", caption = "Multi-turn chats: the share of prompt tokens cached on the GPU and loaded back from host memory (write_through)."},
}
if path then
  for _, p in ipairs{
    {file = "mooncake_ttft.png", caption = "Mooncake conversation trace: mean TTFT against the host tier's size, by write policy."},
    {file = "mooncake_hits.png", caption = "Mooncake conversation trace: hits by tier (write_through)."},
    {file = "store.png", caption = "Mooncake conversation trace on 4 replicas, each with a host tier: the prefix hit rate with local tiers only and with one store the replicas share, under round-robin and cache-aware routing."},
    {file = "capacity.png", caption = "Mooncake conversation trace: hit rate against the cache's total size, with the unbounded cache's as the line; the Mooncake paper reports under half of the maximum at about 3M tokens and near the maximum at about 50M."}} do
    plot_list[#plot_list + 1] = p
  end
end
C.summary(out, {cost = cost_label, requests = #chats,
  headline = string.format("Multi-turn chats (%d clients): GPU only %.2f req/s, mean TTFT %.0f ms, hit rate %.0f%%; "
    .. "with a host tier of 4x the GPU pool (write_through) %.2f req/s, %.0f ms, %.0f%%.", clients,
    off.request_throughput, off.mean_ttft_ms, 100 * off.hit_rate, on4.request_throughput, on4.mean_ttft_ms,
    100 * on4.hit_rate),
  table = {columns = {"setting", "req/s", "mean TTFT (ms)", "hit rate", "published"}, rows = table_rows},
  plots = plot_list})
