-- knob_grid.lua — chunked-prefill size x max running requests on a real
-- trace: p99 TTFT, p99 TPOT, goodput and retractions as heatmaps, and the
-- best configuration under the SLOs.
--   rehearse run scripts/experiments/knob_grid.lua [trace=FILE] [requests=4000]
--       [rate_scale=2] [slo_ttft_ms=2000 slo_tpot_ms=100] [cost=FILE | model= gpu= tp=]
--       [max_total_tokens=N] [out=DIR]
-- Default trace: the shared Azure LLM inference conversation trace; without
-- it, a synthesized trace with the same mean lengths (and a note saying so).
local C = require "common"
local out = C.outdir("knob_grid")
local cost, cost_label = C.cost()
local slo_ttft, slo_tpot = C.arg("slo_ttft_ms", 2000), C.arg("slo_tpot_ms", 100)

local path = rehearse.args.trace or C.shared("AzureLLMInferenceTrace_conv.csv")
local trace, source
if path then
  trace = rehearse.trace.load(path)
  source = path:match("[^/]+$")
else
  trace = rehearse.trace.new()
  local at, seed = 0, 12345
  local function unit() seed = (seed * 1103515245 + 12345) % 2147483648; return (seed + 0.5) / 2147483648 end
  for i = 1, 20000 do
    at = at - math.log(1 - unit()) / 5.5
    trace:add{arrival = at, input_len = math.floor(300 + 1700 * unit()), output_len = math.floor(20 + 380 * unit())}
  end
  source = "synthesized (shared traces absent)"
  rehearse.log("knob_grid: ../shared/traces is absent; using a synthesized trace with Azure-conv-like lengths")
end
local n = C.arg("requests", 4000)
local rate_scale = C.arg("rate_scale", 2)
trace = trace:slice{first = n, rate_scale = rate_scale}

-- The KV pool: what the GPUs' memory leaves after the weights (a roofline
-- knows its GPU), unless max_total_tokens=N says otherwise.
local pool = rehearse.args.max_total_tokens and C.arg("max_total_tokens", 0) or nil
local chunks = {1024, 2048, 4096, 8192, 16384}
local runnings = {64, 128, 160, 192, 256}
local configs = {}
for _, mr in ipairs(runnings) do
  for _, chunk in ipairs(chunks) do
    configs[#configs + 1] = {trace = trace, cost = cost, chunked_prefill_size = chunk, max_running_requests = mr,
                             max_total_tokens = pool, slo_ttft = slo_ttft, slo_tpot = slo_tpot}
  end
end
rehearse.log("knob_grid: %d configurations of %d requests from %s (rate x%g), %s", #configs, #trace, source,
             rate_scale, cost_label)
local results = rehearse.sweep(configs)

local rows, best = {}, nil
for i, c in ipairs(configs) do
  local m = results[i].metrics
  rows[i] = {chunked_prefill = c.chunked_prefill_size, max_running = c.max_running_requests,
             p99_ttft_ms = m.p99_ttft_ms, p99_tpot_ms = m.p99_tpot_ms, request_goodput = m.request_goodput,
             output_throughput = m.output_throughput, retractions = m.retractions}
  local ok = m.p99_ttft_ms <= slo_ttft and m.p99_tpot_ms <= slo_tpot
  if ok and (not best or m.request_goodput > best.request_goodput) then best = rows[i] end
end
local cols = {"chunked_prefill", "max_running", "p99_ttft_ms", "p99_tpot_ms", "request_goodput",
              "output_throughput", "retractions"}
rehearse.csv.write(out .. "/grid.csv", rows, cols)

local function heat(metric, label, title)
  rehearse.plot.heatmap{csv = out .. "/grid.csv", out = out .. "/" .. metric, x = "chunked_prefill",
    y = "max_running", z = metric, zlabel = label, xlabel = "--chunked-prefill-size (tokens)",
    ylabel = "--max-running-requests", title = title .. " — " .. source .. ", " .. cost_label}
end
heat("p99_ttft_ms", "p99 TTFT (ms)", "p99 TTFT")
heat("p99_tpot_ms", "p99 TPOT (ms)", "p99 TPOT")
heat("request_goodput", "goodput (req/s meeting the SLOs)", "Goodput")
heat("retractions", "retracted requests", "Retractions")

if best then
  print(string.format("best under p99 TTFT <= %g ms and p99 TPOT <= %g ms: --chunked-prefill-size %d "
                      .. "--max-running-requests %d (goodput %.2f req/s, p99 TTFT %.0f ms, p99 TPOT %.1f ms)",
                      slo_ttft, slo_tpot, best.chunked_prefill, best.max_running, best.request_goodput,
                      best.p99_ttft_ms, best.p99_tpot_ms))
else
  print(string.format("no configuration meets p99 TTFT <= %g ms and p99 TPOT <= %g ms", slo_ttft, slo_tpot))
end
C.summary(out, {cost = cost_label, trace = source, requests = #trace, rate_scale = rate_scale,
  slo_ttft_ms = slo_ttft, slo_tpot_ms = slo_tpot, best = best or rehearse.json.null,
  plots = {
    {file = "p99_ttft_ms.png", caption = "p99 TTFT for every pair of chunked-prefill size and max running requests: too few running slots queue the arrivals, too small chunks add steps."},
    {file = "p99_tpot_ms.png", caption = "p99 TPOT over the same grid: big batches and big prefill chunks slow every decode step."},
    {file = "request_goodput.png", caption = "Goodput, requests per second that meet both SLOs: the cell to pick."},
    {file = "retractions.png", caption = "Requests retracted for lack of KV pages: where the admission reserve was too optimistic for the pool."}}})
