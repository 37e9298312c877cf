-- lora.lua — many LoRA adapters on one base model, in the shape of S-LoRA's
-- evaluation: throughput and p99 TTFT against the number of adapters (1 to
-- 1,000), their popularity's skew (Zipf exponent) and --max-loras-per-batch,
-- on llama-3-8b on one H100; then S-LoRA's own setting S1 (Llama-7B, rank 8
-- on q, k, v, o, one A100-80GB, 10 req/s, power-law popularity alpha 1) with
-- its published throughputs beside the prediction.
--
-- A request whose adapter would pass the cap waits (SGLang's rule, the base
-- counted as one); every adapter that enters a GPU slot is copied from host
-- memory first, and each step reads the weights of every adapter in it.
--   rehearse run scripts/experiments/lora.lua [rate=20] [seconds=120] [rank=16] [out=DIR]
local C = require "common"
local out = C.outdir("lora")
local rate, seconds, rank = C.arg("rate", 20), C.arg("seconds", 120), C.arg("rank", 16)
local cost = rehearse.cost.new{kind = "roofline", version = 1, model = "llama-3-8b", gpu = "h100-sxm", tp = 1}
local cost_label = "roofline llama-3-8b on 1 x h100-sxm"

-- S-LoRA's workload: input and output lengths uniform in [8, 512], Poisson
-- arrivals (cv 1); n adapters whose shares follow a power law.
local function workload(n, zipf, r, secs, adapter_rank)
  return rehearse.trace.synth{requests = math.floor(r * secs), rate = r, seed = 3, block_size = 0,
    input_dist = "uniform", input_len = 260, input_range_ratio = 252 / 260,
    output_dist = "uniform", output_len = 260, output_range_ratio = 252 / 260,
    adapters = n, adapter_zipf = zipf, adapter_rank = adapter_rank}
end

local adapters = {1, 10, 100, 1000}
local skews = {0, 0.5, 1, 1.5}
local caps = {1, 4, 8, 16, 32, 64}
local traces = {}
for _, n in ipairs(adapters) do
  for _, a in ipairs(skews) do traces[n .. "/" .. a] = workload(n, a, rate, seconds, rank) end
end
local base = workload(0, 1, rate, seconds, rank)

-- configs[i] runs the simulator; meta[i] says what it stands for
local configs, meta = {{trace = base, cost = cost}}, {{adapters = 0, zipf = 0, cap = 8}}
for _, n in ipairs(adapters) do
  for _, a in ipairs(skews) do
    for _, cap in ipairs(caps) do
      configs[#configs + 1] = {trace = traces[n .. "/" .. a], cost = cost, max_loras_per_batch = cap,
                               max_lora_rank = rank}
      meta[#meta + 1] = {adapters = n, zipf = a, cap = cap}
    end
  end
end
rehearse.log("lora: %d configurations of %d requests at %g req/s, %s", #configs, #base, rate, cost_label)
local results = rehearse.sweep(configs)
local rows = {}
for i in ipairs(configs) do
  local m = results[i].metrics
  rows[i] = {adapters = meta[i].adapters, zipf = meta[i].zipf, max_loras_per_batch = meta[i].cap,
             request_throughput = m.request_throughput, output_throughput = m.output_throughput,
             p99_ttft_ms = m.p99_ttft_ms, mean_ttft_ms = m.mean_ttft_ms, p99_tpot_ms = m.p99_tpot_ms}
end
rehearse.csv.write(out .. "/lora.csv", rows, {"adapters", "zipf", "max_loras_per_batch", "request_throughput",
  "output_throughput", "p99_ttft_ms", "mean_ttft_ms", "p99_tpot_ms"})
local b = rows[1]
print(string.format("base model alone: %.2f req/s, p99 TTFT %.0f ms, p99 TPOT %.1f ms", b.request_throughput,
                    b.p99_ttft_ms, b.p99_tpot_ms))
print(string.format("%-9s %-5s %s", "adapters", "zipf", "p99 TTFT (ms) at --max-loras-per-batch " .. table.concat(caps, " / ")))
for _, n in ipairs(adapters) do
  for _, a in ipairs(skews) do
    local line = {}
    for _, r in ipairs(rows) do
      if r.adapters == n and r.zipf == a then line[#line + 1] = string.format("%.0f", r.p99_ttft_ms) end
    end
    print(string.format("%-9d %-5.1f %s", n, a, table.concat(line, " / ")))
  end
end

local function select(f)
  local s = {}
  for _, r in ipairs(rows) do if r.adapters > 0 and f(r) then s[#s + 1] = r end end
  return s
end
local cols = {"adapters", "zipf", "max_loras_per_batch", "request_throughput", "p99_ttft_ms"}
rehearse.plot.lines{rows = select(function(r) return r.zipf == 1 end), columns = cols, out = out .. "/ttft_vs_adapters",
  x = "adapters", y = "p99_ttft_ms", by = "max_loras_per_batch", logx = true, logy = true,
  hline = b.p99_ttft_ms, hline_label = "base model alone",
  title = string.format("p99 TTFT against the number of adapters, Zipf 1, %g req/s (%s)", rate, cost_label),
  xlabel = "adapters (log scale)", ylabel = "p99 TTFT (ms, log scale)"}
rehearse.plot.lines{rows = select(function(r) return r.zipf == 1 end), columns = cols, out = out .. "/throughput_vs_adapters",
  x = "adapters", y = "request_throughput", by = "max_loras_per_batch", logx = true,
  hline = b.request_throughput, hline_label = "base model alone",
  title = string.format("Throughput against the number of adapters, Zipf 1, %g req/s offered", rate),
  xlabel = "adapters (log scale)", ylabel = "requests / s"}
rehearse.plot.lines{rows = select(function(r) return r.adapters == 100 end), columns = cols, out = out .. "/ttft_vs_skew",
  x = "zipf", y = "p99_ttft_ms", by = "max_loras_per_batch", logy = true,
  title = "p99 TTFT against popularity skew, 100 adapters (0: uniform; larger: a few adapters take most requests)",
  xlabel = "Zipf exponent of adapter popularity", ylabel = "p99 TTFT (ms, log scale)"}

-- S-LoRA's S1: Llama-7B, rank 8 on q, k, v, o, one A100-80GB, 10 req/s, alpha 1;
-- S-LoRA's repository results (benchmarks/paper/synthetic/slora/*_table.jsonl).
local slora = {{5, 8.05}, {100, 7.99}, {1000, 7.64}, {2000, 7.61}}
local s1 = rehearse.cost.new{kind = "roofline", version = 1, model = "llama-2-7b", gpu = "a100-80g", tp = 1}
local s1_configs, s1_meta = {}, {}
for _, p in ipairs(slora) do
  local t = workload(p[1], 1, 10, seconds, 8)
  for _, cap in ipairs({8, 64, 256}) do
    s1_configs[#s1_configs + 1] = {trace = t, cost = s1, max_loras_per_batch = cap, max_lora_rank = 8,
      lora_target_modules = "q_proj,k_proj,v_proj,o_proj"}
    s1_meta[#s1_meta + 1] = {adapters = p[1], published = p[2], cap = cap}
  end
end
local s1_results = rehearse.sweep(s1_configs)
local s1_rows, table_rows = {}, {}
for i in ipairs(s1_configs) do
  local m = s1_results[i].metrics
  s1_rows[i] = {adapters = s1_meta[i].adapters, max_loras_per_batch = s1_meta[i].cap,
                predicted = m.request_throughput, slora = s1_meta[i].published, p99_ttft_ms = m.p99_ttft_ms}
end
rehearse.csv.write(out .. "/slora_s1_runs.csv", s1_rows, {"adapters", "max_loras_per_batch", "predicted", "slora", "p99_ttft_ms"})
print("S-LoRA S1 (llama-2-7b r8 q,k,v,o on a100-80g, 10 req/s, alpha 1): req/s, predicted at cap 8 / 64 / 256 vs S-LoRA")
for _, p in ipairs(slora) do
  local line = {}
  for _, r in ipairs(s1_rows) do
    if r.adapters == p[1] then line[#line + 1] = string.format("%.2f", r.predicted) end
  end
  print(string.format("  n=%-5d %s   S-LoRA %.2f", p[1], table.concat(line, " / "), p[2]))
  table_rows[#table_rows + 1] = {p[1], line[1], line[2], line[3], p[2]}
end
local lines = {}
for _, r in ipairs(s1_rows) do
  if r.max_loras_per_batch == 64 then lines[#lines + 1] = {adapters = r.adapters, who = "rehearse (cap 64)", req_s = r.predicted} end
end
for _, p in ipairs(slora) do lines[#lines + 1] = {adapters = p[1], who = "S-LoRA (published)", req_s = p[2]} end
rehearse.plot.lines{rows = lines, columns = {"adapters", "who", "req_s"}, out = out .. "/slora_s1", x = "adapters",
  y = "req_s", by = "who", logx = true,
  title = "S-LoRA's setting S1: Llama-7B rank 8 on one A100-80GB, 10 req/s offered, power-law popularity 1",
  xlabel = "adapters (log scale)", ylabel = "requests / s"}

C.summary(out, {cost = cost_label, requests = #base,
  headline = string.format("At %g req/s, the base model alone: p99 TTFT %.0f ms. With adapters, the cap on "
    .. "adapters per batch, not their kernels, sets the tail once there are more popular adapters than slots.",
    rate, b.p99_ttft_ms),
  table = {columns = {"S-LoRA S1: adapters", "rehearse cap 8 (req/s)", "cap 64", "cap 256", "S-LoRA (req/s)"},
           rows = table_rows},
  plots = {
    {file = "ttft_vs_adapters.png", caption = "p99 TTFT against the number of adapters (Zipf 1), one line per --max-loras-per-batch: requests wait for a slot once the popular adapters outnumber the slots."},
    {file = "throughput_vs_adapters.png", caption = "Requests served per second over the same sweep: the LoRA kernels read every adapter of a batch, so throughput drifts down with more adapters per batch."},
    {file = "ttft_vs_skew.png", caption = "p99 TTFT for 100 adapters against their popularity's skew: a skewed popularity keeps few adapters in the running batch."},
    {file = "slora_s1.png", caption = "S-LoRA's setting S1 with its published throughputs beside the prediction for a server with SGLang's scheduler and 64 adapter slots."}}})
