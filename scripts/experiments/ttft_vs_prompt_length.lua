-- ttft_vs_prompt_length.lua — TTFT of one prompt of 16 to 65,536 tokens
-- arriving at a server that is decoding for `background` other requests,
-- for chunked-prefill sizes 2048, 4096, 8192, 16384 and off (decodes ride
-- along in every prefill step: --enable-mixed-chunk). Up to the chunk size the
-- prompt costs one step; past it, one step per chunk, each also carrying the
-- running decodes: TTFT turns linear, and the smaller the chunk, the steeper.
--   rehearse run scripts/experiments/ttft_vs_prompt_length.lua [cost=FILE]
--       [model=llama-3-8b gpu=h100-sxm tp=1] [background=32] [max_len=65536] [out=DIR]
local C = require "common"
local out = C.outdir("ttft_vs_prompt_length")
local cost, cost_label = C.cost{model = "llama-3-8b", gpu = "h100-sxm", tp = 1}
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
  rows[i] = {chunked_prefill = c.chunked_prefill_size < 0 and "off" or c.chunked_prefill_size,
             prompt_len = c.trace:request(probe).input_len,
             ttft_ms = 1000 * results[i].requests.ttft[probe],
             decode_max_itl_ms = results[i].metrics.max_itl_ms}
end
rehearse.csv.write(out .. "/ttft.csv", rows, {"chunked_prefill", "prompt_len", "ttft_ms", "decode_max_itl_ms"})

-- Where TTFT turns linear: the shortest prompt from which doubling the
-- prompt at least 1.8x's the TTFT, per chunk size.
local knees = {}
print(string.format("%-16s %10s %14s %14s", "chunked prefill", "knee", "TTFT @ knee", "TTFT @ max"))
for ci, chunk in ipairs(chunks) do
  local base = (ci - 1) * #lengths
  local knee
  for j = 1, #lengths - 1 do
    local a, b = rows[base + j].ttft_ms, rows[base + j + 1].ttft_ms
    if not knee and b >= 1.8 * a then knee = j end
  end
  local name = chunk < 0 and "off" or tostring(chunk)
  knees[name] = knee and lengths[knee] or nil
  print(string.format("%-16s %10s %12.1f ms %12.1f ms", name, knee and lengths[knee] or "-",
                      knee and rows[base + knee].ttft_ms or 0, rows[base + #lengths].ttft_ms))
end

rehearse.plot.lines{csv = out .. "/ttft.csv", out = out .. "/decode_stall_vs_prompt_length",
  x = "prompt_len", y = "decode_max_itl_ms", by = "chunked_prefill", logx = true, logy = true,
  title = string.format("Longest decode stall while the prompt prefills (%s)", cost_label),
  xlabel = "prompt length (tokens, log scale)", ylabel = "max inter-token latency of the running requests (ms, log scale)"}
rehearse.plot.lines{csv = out .. "/ttft.csv", out = out .. "/ttft_vs_prompt_length",
  x = "prompt_len", y = "ttft_ms", by = "chunked_prefill", logx = true, logy = true,
  title = string.format("TTFT of one prompt while %d requests decode (%s)", background, cost_label),
  xlabel = "prompt length (tokens, log scale)", ylabel = "TTFT (ms, log scale)"}
C.summary(out, {cost = cost_label, knee_tokens = knees,
  plots = {{file = "ttft_vs_prompt_length.png",
            caption = "TTFT of one prompt against its length while other requests decode, one line per chunked-prefill size: up to the chunk size the prompt costs one step; past it every chunk is another step that also carries the decodes, so TTFT turns linear, more steeply for smaller chunks."},
           {file = "decode_stall_vs_prompt_length.png",
            caption = "The price of not chunking: the longest gap between two tokens of the requests already decoding. Without chunking it grows with the whole prompt; with chunking it stops at one chunk's step."}}})
