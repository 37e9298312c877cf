-- head_of_line.lua — one long prompt among short ones, with chunked prefill
-- on and off: each request's TTFT against its arrival, and the batch's
-- composition (prefill and decode tokens per step) over time. Without
-- chunking the long prefill is one step that every request waits behind;
-- with chunking the decodes keep going and the short prompts share steps.
--   rehearse run scripts/experiments/head_of_line.lua [long_len=32768] [rate=20]
--       [cost=FILE | model= gpu= tp=] [out=DIR]
local C = require "common"
local out = C.outdir("head_of_line")
local cost, cost_label = C.cost{model = "llama-3-8b", gpu = "h100-sxm", tp = 1}
local long_len, rate = C.arg("long_len", 32768), C.arg("rate", 20)

local t = rehearse.trace.new()
local at, seed = 0, 99
local function unit() seed = (seed * 1103515245 + 12345) % 2147483648; return (seed + 0.5) / 2147483648 end
local long_id
while at < 6 do
  at = at - math.log(1 - unit()) / rate
  t:add{arrival = at, input_len = 200 + math.floor(300 * unit()), output_len = 100 + math.floor(100 * unit())}
  if not long_id and at > 2 then
    t:add{arrival = at + 1e-3, input_len = long_len, output_len = 50}
    long_id = #t
  end
end

local settings = {
  {name = "chunked 4096", chunked_prefill_size = 4096, enable_mixed_chunk = true},
  {name = "chunked 4096, vllm", chunked_prefill_size = 4096, scheduler = "vllm", long_prefill_token_threshold = 2048},
  {name = "no chunking", chunked_prefill_size = -1, max_prefill_tokens = long_len},
}
local configs = {}
for i, s in ipairs(settings) do
  configs[i] = {trace = t, cost = cost, per_request = true, series_points = 600, max_total_tokens = 1000000,
                chunked_prefill_size = s.chunked_prefill_size, enable_mixed_chunk = s.enable_mixed_chunk,
                scheduler = s.scheduler, long_prefill_token_threshold = s.long_prefill_token_threshold,
                max_prefill_tokens = s.max_prefill_tokens}
end
local results = rehearse.sweep(configs)

local req_rows, series_rows = {}, {}
for i, s in ipairs(settings) do
  local rq, se = results[i].requests, results[i].series
  for k = 1, #rq.id do
    req_rows[#req_rows + 1] = {setting = s.name, arrival_s = rq.send[k], ttft_ms = 1000 * rq.ttft[k],
                               input_len = rq.input_len[k], long = (k == long_id) and 1 or 0}
  end
  for k = 1, #se.t do
    series_rows[#series_rows + 1] = {setting = s.name, t_s = se.t[k], prefill_tokens = se.prefill_tokens[k],
                                     decode_tokens = se.decode_tokens[k], batch_size = se.batch_size[k]}
  end
end
rehearse.csv.write(out .. "/requests.csv", req_rows, {"setting", "arrival_s", "ttft_ms", "input_len", "long"})
rehearse.csv.write(out .. "/series.csv", series_rows, {"setting", "t_s", "prefill_tokens", "decode_tokens", "batch_size"})

local summary_rows = {}
for i, s in ipairs(settings) do
  local m = results[i].metrics
  local worst_short = 0
  local rq = results[i].requests
  for k = 1, #rq.id do if k ~= long_id and rq.ttft[k] > worst_short then worst_short = rq.ttft[k] end end
  summary_rows[i] = {setting = s.name, long_ttft_ms = 1000 * rq.ttft[long_id], worst_short_ttft_ms = 1000 * worst_short,
                     p99_ttft_ms = m.p99_ttft_ms, max_itl_ms = m.max_itl_ms}
  print(string.format("%-20s long prompt TTFT %8.0f ms   worst short TTFT %8.0f ms   max ITL %8.0f ms", s.name,
                      summary_rows[i].long_ttft_ms, summary_rows[i].worst_short_ttft_ms, m.max_itl_ms))
end
rehearse.csv.write(out .. "/summary.csv", summary_rows,
  {"setting", "long_ttft_ms", "worst_short_ttft_ms", "p99_ttft_ms", "max_itl_ms"})

rehearse.plot.scatter{csv = out .. "/requests.csv", out = out .. "/ttft_by_arrival", x = "arrival_s", y = "ttft_ms",
  by = "setting", logy = true,
  title = string.format("TTFT by arrival; a %d-token prompt arrives at 2 s (%s)", long_len, cost_label),
  xlabel = "arrival (s)", ylabel = "TTFT (ms, log scale)"}
rehearse.plot.timeseries{csv = out .. "/series.csv", out = out .. "/decode_tokens", x = "t_s", y = "decode_tokens",
  by = "setting", title = "Decode tokens per step over time: who keeps decoding through the long prefill",
  xlabel = "time (s)", ylabel = "decode tokens per step"}
rehearse.plot.timeseries{csv = out .. "/series.csv", out = out .. "/prefill_tokens", x = "t_s", y = "prefill_tokens",
  by = "setting", logy = true, title = "Prompt tokens per step over time",
  xlabel = "time (s)", ylabel = "prompt tokens per step (log scale)"}
rehearse.plot.bars{csv = out .. "/summary.csv", out = out .. "/worst_cases", x = "setting",
  y = "worst_short_ttft_ms,max_itl_ms", title = "Worst short-request TTFT and longest decode stall",
  xlabel = "setting", ylabel = "ms"}
C.summary(out, {cost = cost_label, long_len = long_len, results = summary_rows,
  plots = {
    {file = "ttft_by_arrival.png", caption = "Every request's TTFT against its arrival time. Without chunking, the requests arriving behind the long prompt all wait for its whole prefill (the spike); chunking spreads it out."},
    {file = "decode_tokens.png", caption = "Decode tokens per step over time: without chunking the running requests stop decoding for the whole long prefill; with chunking they keep going."},
    {file = "prefill_tokens.png", caption = "Prompt tokens per step over time: one huge step without chunking, a run of chunk-sized steps with it."},
    {file = "worst_cases.png", caption = "The worst TTFT of a short request and the longest gap between two tokens of any request, per setting."}}})
