-- concurrency_sweep.lua — 1024-token prompts from a closed loop of 1 to 512
-- clients: TTFT p50 and p99, output throughput, and the concurrency where p99
-- TTFT passes the SLO.
--   rehearse run scripts/experiments/concurrency_sweep.lua [cost=FILE]
--       [input_len=1024 output_len=256 slo_ttft_ms=1000] [out=DIR]
local C = require "common"
local out = C.outdir("concurrency_sweep")
local cost, cost_label = C.cost{model = "llama-3-8b", gpu = "h100-sxm", tp = 1}
local input_len, output_len = C.arg("input_len", 1024), C.arg("output_len", 256)
local slo = C.arg("slo_ttft_ms", 1000)
local max_c = C.arg("max_concurrency", 512)

local configs = {}
local c = 1
while c <= max_c do
  local t = rehearse.trace.new()
  for i = 1, math.max(64, 4 * c) do t:add{arrival = 0, input_len = input_len, output_len = output_len} end
  configs[#configs + 1] = {trace = t, cost = cost, max_concurrency = c, max_running_requests = 512,
                           max_total_tokens = 2 * 1024 * 1024}
  c = c * 2
end
local results = rehearse.sweep(configs)

local rows, passes = {}, nil
for i, cfg in ipairs(configs) do
  local m = results[i].metrics
  rows[i] = {concurrency = cfg.max_concurrency, p50_ttft_ms = m.median_ttft_ms, p99_ttft_ms = m.p99_ttft_ms,
             p99_tpot_ms = m.p99_tpot_ms, output_throughput = m.output_throughput,
             mean_batch_size = m.mean_batch_size}
  if not passes and m.p99_ttft_ms > slo then passes = cfg.max_concurrency end
end
rehearse.csv.write(out .. "/concurrency.csv", rows,
  {"concurrency", "p50_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "output_throughput", "mean_batch_size"})
print(string.format("%12s %12s %12s %14s", "concurrency", "p50 TTFT", "p99 TTFT", "output tok/s"))
for _, r in ipairs(rows) do
  print(string.format("%12d %10.1f ms %10.1f ms %14.0f", r.concurrency, r.p50_ttft_ms, r.p99_ttft_ms, r.output_throughput))
end
print(passes and string.format("p99 TTFT passes the %g ms SLO at concurrency %d", slo, passes)
             or string.format("p99 TTFT stays under the %g ms SLO up to concurrency %d", slo, max_c))

rehearse.plot.lines{csv = out .. "/concurrency.csv", out = out .. "/ttft_vs_concurrency",
  x = "concurrency", y = "p50_ttft_ms,p99_ttft_ms", logx = true, logy = true,
  hline = slo, hline_label = string.format("SLO %g ms", slo),
  title = string.format("TTFT against concurrency, %d-token prompts (%s)", input_len, cost_label),
  xlabel = "concurrent clients (log scale)", ylabel = "TTFT (ms, log scale)"}
rehearse.plot.lines{csv = out .. "/concurrency.csv", out = out .. "/throughput_vs_concurrency",
  x = "concurrency", y = "output_throughput", logx = true,
  title = string.format("Output throughput against concurrency (%s)", cost_label),
  xlabel = "concurrent clients (log scale)", ylabel = "output tokens per second"}
C.summary(out, {cost = cost_label, slo_ttft_ms = slo, slo_passed_at = passes,
  plots = {{file = "ttft_vs_concurrency.png",
            caption = "Median and p99 TTFT as concurrent clients grow: queueing sets in once the running batch is full, and the dashed line marks the TTFT SLO."},
           {file = "throughput_vs_concurrency.png",
            caption = "Output throughput against concurrency: it grows with the batch until the server saturates."}}})
