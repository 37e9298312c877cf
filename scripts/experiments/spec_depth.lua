-- spec_depth.lua — speculative depth 0 to 8 x concurrency x acceptance rate:
-- throughput and TPOT, and where speculation stops paying. Each verify runs
-- 1 + depth tokens per request through the target model and `depth` draft
-- forwards before it; at low concurrency the target is memory-bound and the
-- extra tokens are nearly free, at high concurrency they are not.
--   rehearse run scripts/experiments/spec_depth.lua [cost=FILE | model= gpu= tp=]
--       [draft_ratio=0.05] [input_len=1024 output_len=256] [out=DIR]
local C = require "common"
local out = C.outdir("spec_depth")
local cost, cost_label = C.cost{draft_ratio = 0.05}
local input_len, output_len = C.arg("input_len", 1024), C.arg("output_len", 256)
local depths = {0, 1, 2, 3, 4, 5, 6, 7, 8}
local concs = {1, 4, 16, 64, 256}
local alphas = {0.5, 0.7, 0.9}

local traces = {}
for _, c in ipairs(concs) do
  local t = rehearse.trace.new()
  for i = 1, math.max(32, 2 * c) do t:add{arrival = 0, input_len = input_len, output_len = output_len} end
  traces[c] = t
end
local configs = {}
for _, a in ipairs(alphas) do
  for _, d in ipairs(depths) do
    for _, c in ipairs(concs) do
      configs[#configs + 1] = {trace = traces[c], cost = cost, max_concurrency = c, max_running_requests = 512,
        max_total_tokens = 2 * 1024 * 1024, speculative_num_steps = d, speculative_algorithm = "DRAFT",
        speculative_accept_rate = a, sim_seed = 7}
    end
  end
end
rehearse.log("spec_depth: %d configurations, %s", #configs, cost_label)
local results = rehearse.sweep(configs)

local base = {}
for i, c in ipairs(configs) do
  if c.speculative_num_steps == 0 then base[c.speculative_accept_rate .. "/" .. c.max_concurrency] = results[i].metrics end
end
local rows = {}
for i, c in ipairs(configs) do
  local m = results[i].metrics
  local b = base[c.speculative_accept_rate .. "/" .. c.max_concurrency]
  rows[i] = {accept_rate = c.speculative_accept_rate, depth = c.speculative_num_steps, concurrency = c.max_concurrency,
             output_throughput = m.output_throughput, mean_tpot_ms = m.mean_tpot_ms,
             speedup = m.output_throughput / b.output_throughput, accepted_len = m.mean_accepted_length}
end
rehearse.csv.write(out .. "/spec.csv", rows,
  {"accept_rate", "depth", "concurrency", "output_throughput", "mean_tpot_ms", "speedup", "accepted_len"})

-- Where it stops paying: per acceptance rate and depth, the lowest
-- concurrency whose throughput falls below no speculation.
local stops, best = {}, {}
print(string.format("%-8s %-6s %s", "accept", "depth", "speedup at concurrency " .. table.concat(concs, " / ")))
for _, a in ipairs(alphas) do
  for _, d in ipairs(depths) do
    if d > 0 then
      local line, stop = {}, nil
      for _, r in ipairs(rows) do
        if r.accept_rate == a and r.depth == d then
          line[#line + 1] = string.format("%.2f", r.speedup)
          if not stop and r.speedup < 1 then stop = r.concurrency end
        end
      end
      stops[#stops + 1] = {accept_rate = a, depth = d, stops_paying_at = stop or "never (<= 256)"}
      print(string.format("%-8.2f %-6d %s%s", a, d, table.concat(line, " / "),
                          stop and ("   stops paying at concurrency " .. stop) or ""))
    end
  end
end
local best_rows = {}
for _, a in ipairs(alphas) do
  for _, c in ipairs(concs) do
    local top
    for _, r in ipairs(rows) do
      if r.accept_rate == a and r.concurrency == c and (not top or r.speedup > top.speedup) then top = r end
    end
    best_rows[#best_rows + 1] = {accept_rate = a, concurrency = c, best_depth = top.depth, best_speedup = top.speedup}
  end
end
rehearse.csv.write(out .. "/best_depth.csv", best_rows, {"accept_rate", "concurrency", "best_depth", "best_speedup"})
rehearse.csv.write(out .. "/stops.csv", stops, {"accept_rate", "depth", "stops_paying_at"})

-- Speedup lines at the middle acceptance rate; the y = 1 line is "no gain".
local mid = {}
for _, r in ipairs(rows) do if r.accept_rate == 0.7 and r.depth > 0 then mid[#mid + 1] = r end end
rehearse.plot.lines{rows = mid, columns = {"depth", "concurrency", "speedup"}, out = out .. "/speedup_alpha0.7",
  x = "concurrency", y = "speedup", by = "depth", logx = true, hline = 1, hline_label = "no speculation",
  title = "Throughput speedup of speculative decoding, acceptance 0.7 (" .. cost_label .. ")",
  xlabel = "concurrent clients (log scale)", ylabel = "output throughput / without speculation"}
rehearse.plot.heatmap{csv = out .. "/best_depth.csv", out = out .. "/best_depth", x = "concurrency", y = "accept_rate",
  z = "best_depth", zlabel = "best speculative depth (0: off)", xlabel = "concurrent clients",
  ylabel = "per-token acceptance rate", title = "Best speculative depth by load and acceptance (" .. cost_label .. ")"}
local tp = {}
for _, r in ipairs(rows) do if r.accept_rate == 0.7 then tp[#tp + 1] = r end end
rehearse.plot.lines{rows = tp, columns = {"depth", "concurrency", "mean_tpot_ms"}, out = out .. "/tpot_alpha0.7",
  x = "depth", y = "mean_tpot_ms", by = "concurrency", logy = true,
  title = "Mean TPOT against speculative depth, acceptance 0.7 (" .. cost_label .. ")",
  xlabel = "speculative depth (draft tokens per verify)", ylabel = "mean TPOT (ms, log scale)"}
C.summary(out, {cost = cost_label, stops = stops,
  plots = {
    {file = "speedup_alpha0.7.png", caption = "Throughput with speculation over throughput without, per depth, as concurrency grows (acceptance 0.7): above the dashed line speculation pays, below it it costs."},
    {file = "best_depth.png", caption = "The depth that gives the most throughput for each load and acceptance rate: deep at low concurrency and high acceptance, off once the batch is large."},
    {file = "tpot_alpha0.7.png", caption = "Mean time per output token against depth, one line per concurrency (acceptance 0.7)."}}})
