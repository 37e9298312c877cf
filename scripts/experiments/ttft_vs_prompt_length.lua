-- ttft_vs_prompt_length.lua — TTFT of one prompt of 16 to 65,536 tokens
-- arriving at a server that is decoding for `background` other requests,
-- for chunked-prefill sizes 2048, 4096, 8192, 16384 and off (decodes ride
-- along in every prefill step: --enable-mixed-chunk). What chunking changes,
-- per chunk size and prompt length: the prompt's chunk steps, TTFT per
-- chunk step, and the running requests' longest stall (max ITL).
--
-- Where TTFT turns is found as the change of slope of a two-piece linear
-- fit of TTFT against the prompt's length (relative least squares, the
-- break at a measured length). Past the chunk size every chunk is one more
-- step, and each step pays the forward pass's fixed cost (reading the
-- weights, launches, the step's CPU time) and carries the decodes; before
-- it, the prompt's tokens alone add time. So the curve turns at the chunk
-- size only when that fixed cost is large against a chunk's per-token cost
-- (small chunks, large per-step overheads, many decodes riding along).
-- Llama-3.1-8B on one H100 with 32 decodes: past a 2,048-token chunk TTFT
-- grows 1.11x as fast as unchunked (1.01x past 16,384), and the two-piece
-- fit's break sits at 16,384 tokens for every chunk size, chunking off
-- included: there attention, growing with the square of the prompt,
-- outgrows the GEMMs, a property of the model and GPU, not of chunking.
-- With 30 ms of CPU a step (step_overhead_s=0.03) the 2,048 chunk turns
-- 1.68x and the break moves to it. The step's CPU and launch costs are the
-- cost model's "overheads" (sim/cost/COST.md).
--   rehearse run scripts/experiments/ttft_vs_prompt_length.lua [cost=FILE]
--       [model=llama-3.1-8b gpu=h100-sxm tp=1] [background=32] [max_len=65536] [out=DIR]
local C = require "common"
local out = C.outdir("ttft_vs_prompt_length")
local cost, cost_label = C.cost{model = "llama-3.1-8b", gpu = "h100-sxm", tp = 1}
local max_len = C.arg("max_len", 65536)
local background = C.arg("background", 32)

local lengths = {}
local n = 16
while n <= max_len do lengths[#lengths + 1] = n; n = n * 2 end
local chunks = {2048, 4096, 8192, 16384, -1}

local configs = {}
for _, chunk in ipairs(chunks) do
  for _, len in ipairs(lengths) do
    local t = rehearse.trace.new()
    -- The background: short prompts with long answers, decoding when the probe arrives.
    for i = 1, background do t:add{arrival = 0, input_len = 16, output_len = 4000} end
    t:add{arrival = 0.5, input_len = len, output_len = 1}
    configs[#configs + 1] = {
      trace = t, cost = cost, chunked_prefill_size = chunk, enable_mixed_chunk = true, per_request = true,
      max_prefill_tokens = math.max(16384, len), max_total_tokens = 2 * max_len + background * 4200 + 4096,
      label = (chunk < 0 and "off" or tostring(chunk)) .. "/" .. len,
    }
  end
end
local results = rehearse.sweep(configs)

local rows = {}
for i, c in ipairs(configs) do
  local probe = background + 1
  local len = c.trace:request(probe).input_len
  -- mixed chunks: the running decodes take their tokens of each step's budget
  local steps = c.chunked_prefill_size < 0 and 1 or math.ceil(len / (c.chunked_prefill_size - background))
  local ttft = 1000 * results[i].requests.ttft[probe]
  rows[i] = {chunked_prefill = c.chunked_prefill_size < 0 and "off" or c.chunked_prefill_size,
             prompt_len = len, ttft_ms = ttft, chunk_steps = steps, ttft_per_chunk_step_ms = ttft / steps,
             decode_max_itl_ms = results[i].metrics.max_itl_ms}
end
rehearse.csv.write(out .. "/ttft.csv", rows, {"chunked_prefill", "prompt_len", "ttft_ms", "chunk_steps",
                                              "ttft_per_chunk_step_ms", "decode_max_itl_ms"})

-- A line through points (x, y), least squares on the relative residual.
local function line(xs, ys, from, to)
  local sw, sx, sy, sxx, sxy = 0, 0, 0, 0, 0
  for j = from, to do
    local w = 1 / (ys[j] * ys[j])
    sw, sx, sy = sw + w, sx + w * xs[j], sy + w * ys[j]
    sxx, sxy = sxx + w * xs[j] * xs[j], sxy + w * xs[j] * ys[j]
  end
  local d = sw * sxx - sx * sx
  local b = d ~= 0 and (sw * sxy - sx * sy) / d or 0
  local a = (sy - b * sx) / sw
  local err = 0
  for j = from, to do local r = (ys[j] - a - b * xs[j]) / ys[j]; err = err + r * r end
  return a, b, err
end

-- The two-piece fit: the break at the measured length that leaves the
-- smallest error, each piece with at least three points.
local function knee(xs, ys)
  local best
  for k = 3, #xs - 2 do
    local _, b1, e1 = line(xs, ys, 1, k)
    local _, b2, e2 = line(xs, ys, k, #xs)
    if not best or e1 + e2 < best.err then best = {at = xs[k], before = b1, after = b2, err = e1 + e2} end
  end
  return best
end

-- What chunking alone does past the chunk size: the slope of TTFT over the
-- two doublings past it, over the unchunked curve's slope there (which
-- turns too, as attention grows with the square of the prompt).
local function steeper(xs, ys, off, chunk)
  local at
  for j = 1, #xs do if xs[j] == chunk then at = j end end
  if not at or at + 2 > #xs then return nil end
  local _, b = line(xs, ys, at, at + 2)
  local _, b0 = line(xs, off, at, at + 2)
  return b / b0
end

local knees = {}
print(string.format("%-8s %9s %12s %12s %7s %9s | at %d tokens: %6s %12s %14s", "chunk", "knee", "slope before",
                    "slope after", "ratio", "past chunk", max_len, "steps", "TTFT/step", "decode stall"))
local off_ys = {}
for j = 1, #lengths do off_ys[j] = rows[(#chunks - 1) * #lengths + j].ttft_ms end
for ci, chunk in ipairs(chunks) do
  local base = (ci - 1) * #lengths
  local xs, ys = {}, {}
  for j = 1, #lengths do xs[j], ys[j] = lengths[j], rows[base + j].ttft_ms end
  local k = knee(xs, ys)
  local name = chunk < 0 and "off" or tostring(chunk)
  local last = rows[base + #lengths]
  local turn = chunk > 0 and steeper(xs, ys, off_ys, chunk) or nil
  knees[name] = {tokens = k.at, slope_before_ms_per_1k = 1000 * k.before, slope_after_ms_per_1k = 1000 * k.after,
                 slope_past_chunk_over_unchunked = turn, chunk_steps = last.chunk_steps,
                 ttft_per_chunk_step_ms = last.ttft_per_chunk_step_ms, decode_max_itl_ms = last.decode_max_itl_ms}
  print(string.format("%-8s %9d %9.2f ms %9.2f ms %6.2fx %9s | %19d %9.1f ms %11.1f ms", name, k.at, 1000 * k.before,
                      1000 * k.after, k.after / k.before, turn and string.format("%.2fx", turn) or "-",
                      last.chunk_steps, last.ttft_per_chunk_step_ms, last.decode_max_itl_ms))
end
print("(slopes in ms per 1,000 prompt tokens, from a two-piece linear fit of TTFT against length; 'past chunk':\n" ..
      " TTFT's slope over the two doublings past the chunk size over the unchunked curve's there)")

rehearse.plot.lines{csv = out .. "/ttft.csv", out = out .. "/decode_stall_vs_prompt_length",
  x = "prompt_len", y = "decode_max_itl_ms", by = "chunked_prefill", logx = true, logy = true,
  title = string.format("Longest decode stall while the prompt prefills (%s)", cost_label),
  xlabel = "prompt length (tokens, log scale)", ylabel = "max inter-token latency of the running requests (ms, log scale)"}
rehearse.plot.lines{csv = out .. "/ttft.csv", out = out .. "/ttft_vs_prompt_length",
  x = "prompt_len", y = "ttft_ms", by = "chunked_prefill", logx = true, logy = true,
  title = string.format("TTFT of one prompt while %d requests decode (%s)", background, cost_label),
  xlabel = "prompt length (tokens, log scale)", ylabel = "TTFT (ms, log scale)"}
C.summary(out, {cost = cost_label, knees = knees,
  plots = {{file = "ttft_vs_prompt_length.png",
            caption = "TTFT of one prompt against its length while other requests decode, one line per chunked-prefill size. Past the chunk size every chunk is another step paying the forward pass's fixed cost and carrying the decodes, so the slope rises at the chunk size by that fixed cost over a chunk's per-token cost: visible when the fixed cost dominates (small chunks, large per-step overheads), a few percent otherwise."},
           {file = "decode_stall_vs_prompt_length.png",
            caption = "The price of not chunking: the longest gap between two tokens of the requests already decoding. Without chunking it grows with the whole prompt; with chunking it stops at one chunk's step."}}})
