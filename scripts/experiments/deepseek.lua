-- deepseek.lua — DeepSeek-R1 deployments as teams run them, four studies
-- with the shipped presets (FP8, SGLang's host, nothing tuned):
--   1. TP16 over two H100 nodes at --chunked-prefill-size 8192: the TTFT of
--      a lone prompt of 1k to 32k tokens, chunk steps, and where it turns:
--      the slope past the chunk size over the slope before (a two-piece
--      fit with the break at 8192);
--   2. the same deployment at --max-running-requests 78: output throughput,
--      TTFT and TPOT against 1 to 512 concurrent clients (2k in, 512 out);
--   3. 8 x H20, MTP (EAGLE with the MTP module, 3 steps, chain) against
--      none, as concurrency grows: the speed-up of output throughput, at the
--      accept length SGLang's users publish for 3 steps on H20 (2.9-3.3,
--      Ant Group's blog; accept_length=L to change it);
--   4. 16 H100: TP16 against DP attention with EP16 and DeepEP (and two-
--      batch overlap) at equal GPUs, 2k in 512 out, by concurrency.
--   rehearse run scripts/experiments/deepseek.lua [requests_scale=1] [accept_length=3.1] [out=DIR]
local C = require "common"
local out = C.outdir("deepseek")
local scale = C.arg("requests_scale", 1)
local accept = C.arg("accept_length", 3.1)

local function roof(gpu, tp, extra)
  local spec = {kind = "roofline", version = 1, model = "deepseek-r1", gpu = gpu, tp = tp, dtype = "fp8"}
  for k, v in pairs(extra or {}) do spec[k] = v end
  return rehearse.cost.new(spec)
end

local function fixed(n, input, output)
  local t = rehearse.trace.new()
  for _ = 1, n do t:add{arrival = 0, input_len = input, output_len = output} end
  return t
end

-- 1. a lone prompt, TP16 on two H100 nodes
local tp16 = roof("h100-sxm", 16)
local lengths = {1024, 2048, 4096, 6144, 8192, 12288, 16384, 24576, 32768}
local configs = {}
for i, len in ipairs(lengths) do
  configs[i] = {trace = fixed(1, len, 2), cost = tp16, chunked_prefill_size = 8192, label = "len " .. len}
end
local res = rehearse.sweep(configs)
local rows1 = {}
for i, len in ipairs(lengths) do
  rows1[i] = {prompt_tokens = len, ttft_ms = res[i].metrics.median_ttft_ms, chunks = math.ceil(len / 8192)}
end
-- least-squares slopes below and above the chunk size (the break at 8192)
local function slope(rows, lo, hi)
  local n, sx, sy, sxx, sxy = 0, 0, 0, 0, 0
  for _, r in ipairs(rows) do
    if r.prompt_tokens >= lo and r.prompt_tokens <= hi then
      n, sx, sy = n + 1, sx + r.prompt_tokens, sy + r.ttft_ms
      sxx, sxy = sxx + r.prompt_tokens ^ 2, sxy + r.prompt_tokens * r.ttft_ms
    end
  end
  return (n * sxy - sx * sy) / (n * sxx - sx * sx)
end
local before, after = slope(rows1, 1024, 8192), slope(rows1, 8192, 32768)
rehearse.csv.write(out .. "/lone_prompt.csv", rows1, {"prompt_tokens", "ttft_ms", "chunks"})
print("1. R1 TP16 on 2 x 8 H100, --chunked-prefill-size 8192: a lone prompt")
for _, r in ipairs(rows1) do print(string.format("   %6d tokens  TTFT %8.1f ms  (%d chunks)", r.prompt_tokens, r.ttft_ms, r.chunks)) end
print(string.format("   slope %.4f ms/token up to 8192, %.4f past it: %.2fx", before, after, after / before))
rehearse.plot.lines{rows = rows1, columns = {"prompt_tokens", "ttft_ms"}, out = out .. "/lone_prompt",
  x = "prompt_tokens", y = "ttft_ms", title = "DeepSeek-R1, TP16 on 2 x 8 H100, chunked prefill 8192: a lone prompt",
  xlabel = "prompt tokens", ylabel = "TTFT (ms)"}

-- 2. concurrency 1..512 at --max-running-requests 78
local conc = {1, 2, 4, 8, 16, 32, 64, 78, 128, 256, 512}
configs = {}
for i, c in ipairs(conc) do
  configs[i] = {trace = fixed(math.max(16, math.floor(2 * c * scale)), 2048, 512), cost = tp16, max_concurrency = c,
                max_running_requests = 78, chunked_prefill_size = 8192, label = "c" .. c}
end
res = rehearse.sweep(configs)
local rows2 = {}
for i, c in ipairs(conc) do
  local m = res[i].metrics
  rows2[i] = {concurrency = c, output_throughput = m.output_throughput, median_ttft_ms = m.median_ttft_ms,
              p99_ttft_ms = m.p99_ttft_ms, median_tpot_ms = m.median_tpot_ms}
end
rehearse.csv.write(out .. "/concurrency_mrr78.csv", rows2,
  {"concurrency", "output_throughput", "median_ttft_ms", "p99_ttft_ms", "median_tpot_ms"})
print("2. the same at --max-running-requests 78, 2k in / 512 out")
print(string.format("   %6s %14s %12s %12s %12s", "conc", "output tok/s", "TTFT p50", "TTFT p99", "TPOT p50"))
for _, r in ipairs(rows2) do
  print(string.format("   %6d %14.0f %10.0f ms %10.0f ms %10.1f ms", r.concurrency, r.output_throughput, r.median_ttft_ms,
                      r.p99_ttft_ms, r.median_tpot_ms))
end
rehearse.plot.lines{rows = rows2, columns = {"concurrency", "median_ttft_ms"}, out = out .. "/concurrency_ttft",
  x = "concurrency", y = "median_ttft_ms", logx = true, logy = true,
  title = "R1 TP16 on 2 x 8 H100, --max-running-requests 78: median TTFT",
  xlabel = "concurrent clients (log scale)", ylabel = "median TTFT (ms, log scale)"}
rehearse.plot.lines{rows = rows2, columns = {"concurrency", "output_throughput"}, out = out .. "/concurrency_throughput",
  x = "concurrency", y = "output_throughput", logx = true,
  title = "R1 TP16 on 2 x 8 H100, --max-running-requests 78: output throughput",
  xlabel = "concurrent clients (log scale)", ylabel = "output tokens/s"}

-- 3. MTP on 8 x H20 against concurrency
local h20 = roof("h20", 8)
local mconc = {1, 2, 4, 8, 16, 32, 48, 64}
configs = {}
for _, c in ipairs(mconc) do
  -- R1's FP8 weights take 80 of the H20's 96 GB: such deployments raise
  -- --mem-fraction-static to leave a KV pool beside the MTP module
  local base = {trace = fixed(math.max(8, math.floor(2 * c * scale)), 1024, 512), cost = h20, max_concurrency = c,
                max_running_requests = 64, mem_fraction_static = 0.92, label = "c" .. c}
  configs[#configs + 1] = base
  local mtp = {}
  for k, v in pairs(base) do mtp[k] = v end
  mtp.speculative_algorithm = "EAGLE"
  mtp.speculative_num_steps = 3
  mtp.speculative_eagle_topk = 1
  mtp.speculative_num_draft_tokens = 4
  mtp.speculative_accept_length = accept
  mtp.label = "mtp c" .. c
  configs[#configs + 1] = mtp
end
res = rehearse.sweep(configs)
local rows3 = {}
for i, c in ipairs(mconc) do
  local a, b = res[2 * i - 1].metrics, res[2 * i].metrics
  rows3[i] = {concurrency = c, tpot_ms = a.median_tpot_ms, mtp_tpot_ms = b.median_tpot_ms,
              speedup = b.output_throughput / a.output_throughput}
end
rehearse.csv.write(out .. "/mtp_h20.csv", rows3, {"concurrency", "tpot_ms", "mtp_tpot_ms", "speedup"})
print(string.format("3. R1 on 8 x H20, MTP (3 steps, accept length %.2f) against none, 1k in / 512 out", accept))
for _, r in ipairs(rows3) do
  print(string.format("   conc %3d  TPOT %6.1f ms -> %6.1f ms  speed-up %.2fx", r.concurrency, r.tpot_ms, r.mtp_tpot_ms,
                      r.speedup))
end
rehearse.plot.lines{rows = rows3, columns = {"concurrency", "speedup"}, out = out .. "/mtp_h20",
  x = "concurrency", y = "speedup", logx = true, hline = 1, hline_label = "no MTP",
  title = string.format("R1 on 8 x H20: MTP's throughput speed-up (3 steps, accept length %.2f)", accept),
  xlabel = "concurrent clients (log scale)", ylabel = "output throughput with MTP / without"}

-- 4. TP16 against DP attention + EP16 (DeepEP) at equal GPUs
local ep16 = roof("h100-sxm", 16, {ep = 16})
local econc = {16, 64, 128, 256, 512, 1024}
local layouts = {{"TP16", tp16, {}}, {"DP16 + EP16 (DeepEP)", ep16, {}},
                 {"DP16 + EP16 + two-batch overlap", ep16, {enable_two_batch_overlap = true}}}
configs = {}
for _, c in ipairs(econc) do
  for _, lay in ipairs(layouts) do
    local cfg = {trace = fixed(math.max(32, math.floor(2 * c * scale)), 2048, 512), cost = lay[2],
                 max_concurrency = c, label = lay[1] .. " c" .. c}
    for k, v in pairs(lay[3]) do cfg[k] = v end
    configs[#configs + 1] = cfg
  end
end
res = rehearse.sweep(configs)
local rows4, i = {}, 0
for _, c in ipairs(econc) do
  for _, lay in ipairs(layouts) do
    i = i + 1
    local m = res[i].metrics
    rows4[#rows4 + 1] = {layout = lay[1], concurrency = c, output_throughput = m.output_throughput,
                         median_tpot_ms = m.median_tpot_ms, median_ttft_ms = m.median_ttft_ms}
  end
end
rehearse.csv.write(out .. "/tp_vs_ep.csv", rows4,
  {"layout", "concurrency", "output_throughput", "median_tpot_ms", "median_ttft_ms"})
print("4. 16 H100: TP16 against DP attention with EP16 (DeepEP), 2k in / 512 out")
for _, r in ipairs(rows4) do
  print(string.format("   %-34s conc %5d  %9.0f tok/s  TPOT %6.1f ms  TTFT %8.0f ms", r.layout, r.concurrency,
                      r.output_throughput, r.median_tpot_ms, r.median_ttft_ms))
end
rehearse.plot.lines{rows = rows4, columns = {"layout", "concurrency", "output_throughput"}, out = out .. "/tp_vs_ep",
  x = "concurrency", y = "output_throughput", by = "layout", logx = true,
  title = "DeepSeek-R1 on 16 H100: TP16 against DP attention + EP16", xlabel = "concurrent clients (log scale)",
  ylabel = "output tokens/s"}

C.summary(out, {turn_ratio = after / before, plots = {
  {file = "lone_prompt.png", caption = string.format("A lone prompt on R1 with TP16 over two H100 nodes, chunks of 8192: TTFT grows %.2fx as fast past the chunk size as before it (slopes of least-squares lines below and above 8192).", after / before)},
  {file = "concurrency_ttft.png", caption = "The same deployment at --max-running-requests 78: past 78 clients requests queue for a slot and TTFT climbs."},
  {file = "concurrency_throughput.png", caption = "Output throughput flattens at the 78 running requests the flag allows."},
  {file = "mtp_h20.png", caption = string.format("MTP on 8 x H20 (3 steps, accept length %.2f): a large speed-up at low concurrency that shrinks as the batch grows.", accept)},
  {file = "tp_vs_ep.png", caption = "16 H100 GPUs as one TP16 server or as DP attention with 16-way expert parallelism over DeepEP: the layouts by concurrency."}}})
