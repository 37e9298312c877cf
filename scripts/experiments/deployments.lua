-- deployments.lua — rehearse's predictions for published measurements of
-- real serving systems (deployments.json: each with its source, model, GPUs,
-- parallelism and workload), with the shipped presets, their fitted kernels
-- and measured collectives, and nothing tuned per deployment. Prints each
-- measurement beside its prediction and the error, and the median |error|
-- on TTFT and on throughput or TPOT, for the DeepSeek-V3/R1 deployments and
-- for the others ("dense") apart (a figure a preset was set from is shown,
-- not scored).
--   rehearse run scripts/experiments/deployments.lua [file=deployments.json] [out=DIR]
local C = require "common"
local out = C.outdir("deployments")
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local data = rehearse.json.read(C.arg("file", here .. "deployments.json"))

-- The server settings a deployment names, as the simulator's knobs (SGLang's
-- flag names). Knobs this build does not know yet are found below, left out
-- of every configuration and named once.
local KNOB_OF = {
  {field = "ep", knob = "ep_size"},
  {field = "dp_attention", knob = "enable_dp_attention"},
  {field = "dp_size", knob = "dp_size"},
  {field = "moe_a2a_backend", knob = "moe_a2a_backend"},
  {field = "deepep_mode", knob = "deepep_mode"},
  {field = "two_batch_overlap", knob = "enable_two_batch_overlap"},
  {field = "enable_eplb", knob = "enable_eplb"},
  {field = "chunked_prefill_size", knob = "chunked_prefill_size"},
  {field = "max_prefill_tokens", knob = "max_prefill_tokens"},
  {field = "cuda_graph_max_bs", knob = "cuda_graph_max_bs"},
  {field = "disable_cuda_graph", knob = "disable_cuda_graph"},
  {field = "mem_fraction_static", knob = "mem_fraction_static"},
  {field = "max_running_requests", knob = "max_running_requests"},
  {field = "moe_dense_tp_size", knob = "moe_dense_tp_size"},
  {field = "ep_num_redundant_experts", knob = "ep_num_redundant_experts"},
}
local SPEC_KNOB_OF = {
  {field = "algorithm", knob = "speculative_algorithm"},
  {field = "num_steps", knob = "speculative_num_steps"},
  {field = "eagle_topk", knob = "speculative_eagle_topk"},
  {field = "num_draft_tokens", knob = "speculative_num_draft_tokens"},
  {field = "accept_length", knob = "speculative_accept_length"},
}
-- A value of each knob, to ask the simulator whether it knows the name.
local KNOB_SAMPLE = {
  ep_size = 8, enable_dp_attention = true, dp_size = 8, moe_a2a_backend = "deepep",
  deepep_mode = "low_latency", enable_two_batch_overlap = true, enable_eplb = true,
  chunked_prefill_size = 4096, max_prefill_tokens = 16384, cuda_graph_max_bs = 128,
  disable_cuda_graph = true, mem_fraction_static = 0.85, max_running_requests = 64,
  speculative_algorithm = "EAGLE", speculative_num_steps = 1, speculative_eagle_topk = 1,
  speculative_num_draft_tokens = 2, speculative_accept_length = 1.8,
}

-- A tiny run that fails only on what is asked: an unknown key is an error
-- naming it (README, "An unknown key is an error naming it").
local probe_cost = rehearse.cost.new{kind = "roofline", version = 1, model = "deepseek-r1", gpu = "h200", tp = 8,
                                     dtype = "fp8"}
local probe_trace = rehearse.trace.new()
probe_trace:add{arrival = 0, input_len = 16, output_len = 2}
local unknown = {}
for knob, value in pairs(KNOB_SAMPLE) do
  local ok, err = pcall(rehearse.sim.run, {trace = probe_trace, cost = probe_cost, [knob] = value})
  if not ok and tostring(err):find("unknown key", 1, true) then unknown[knob] = {} end
end

local function knobs_of(d)
  local k = {}
  for _, m in ipairs(KNOB_OF) do
    local v = d[m.field]
    if v ~= nil and v ~= false then k[m.knob] = v end
  end
  if d.speculative then
    for _, m in ipairs(SPEC_KNOB_OF) do
      if d.speculative[m.field] ~= nil then k[m.knob] = d.speculative[m.field] end
    end
  end
  for knob in pairs(k) do
    if unknown[knob] then
      table.insert(unknown[knob], d.id)
      k[knob] = nil
    end
  end
  return k
end

-- ShareGPT as the benchmarks sample it, without the data set: lognormal
-- lengths (synth's mean-preserving lognormal, sigma 1: a coefficient of
-- variation of 1.3, a stand-in for ShareGPT's long tail, not fitted), then
-- scaled so the totals are the source's (input_mean and output_mean times
-- the requests).
local SHAREGPT_SIGMA = 1.0
local function sharegpt_trace(w)
  local s = rehearse.trace.synth{requests = w.requests, rate = 1e6, seed = 1, block_size = 0,
                                 input_dist = "lognormal", input_len = w.input_mean, input_sigma = SHAREGPT_SIGMA,
                                 output_dist = "lognormal", output_len = w.output_mean, output_sigma = SHAREGPT_SIGMA}
  local sin, sout = 0, 0
  for i = 1, #s do
    local r = s:request(i)
    sin, sout = sin + r.input_len, sout + r.output_len
  end
  local fin, fout = w.input_mean * w.requests / sin, w.output_mean * w.requests / sout
  local t = rehearse.trace.new()
  for i = 1, #s do
    local r = s:request(i)
    t:add{arrival = 0, input_len = math.max(1, math.floor(r.input_len * fin + 0.5)),
          output_len = math.max(1, math.floor(r.output_len * fout + 0.5))}
  end
  return t
end

-- The workload as a trace: every request at 0 (a closed loop of
-- `concurrency` clients sends them as clients free up).
local function trace_of(w)
  if w.dataset == "sharegpt" then return sharegpt_trace(w) end
  if w.range_ratio then
    return rehearse.trace.synth{requests = w.requests, rate = 1e6, seed = 1,
                                input_dist = "uniform", input_len = w.input, input_range_ratio = w.range_ratio,
                                output_dist = "uniform", output_len = w.output, output_range_ratio = w.range_ratio}
  end
  local t = rehearse.trace.new()
  for _ = 1, w.requests do t:add{arrival = 0, input_len = w.input, output_len = w.output} end
  return t
end

local function gpus_of(d) return d.gpus or d.tp end
local function nodes_of(d) return d.nodes or math.max(1, math.ceil(gpus_of(d) / 8)) end

-- What a measurement names, from a simulation's metrics.
local function predicted(name, m, d)
  if name == "duration_ms" then return 1000 * m.duration end
  if name == "decode_tok_per_s" then return 1000 / m.median_tpot_ms end
  if name == "per_node_input_throughput" then return m.input_throughput / nodes_of(d) end
  if name == "per_node_output_throughput" then return m.output_throughput / nodes_of(d) end
  if name == "per_gpu_output_throughput" then return m.output_throughput / gpus_of(d) end
  return m[name]
end

-- One steady-state step at a fixed batch (workload kind decode_step or
-- prefill_step), priced by the cost model with the deployment's knobs:
--   cost:step_time{batch = {{n_new=, context=, prefill=}, ...}, tp = N, <knobs>}
-- (the replica's whole batch, every attention-DP rank's; knobs under the
-- simulator's names; seconds of one step, drafting included). Returns the
-- metrics of that step, or nil and why not.
local function step_metrics(cost, d, knobs)
  if not cost.step_time then return nil, "needs cost:step_time" end
  local w, gpus = d.workload, gpus_of(d)
  local batch, tokens, outputs = {}, 0, 0
  if w.kind == "decode_step" then
    local n_new = knobs.speculative_num_draft_tokens or 1
    local acc = 1
    if d.speculative then
      acc = d.speculative.accept_length
      if not acc then return nil, "a speculative decode step needs accept_length" end
    end
    for i = 1, w.batch_per_gpu * gpus do batch[i] = {n_new = n_new, context = w.context} end
    outputs = w.batch_per_gpu * gpus * acc
  else
    local prompts = math.floor(w.tokens_per_gpu * gpus / w.input + 0.5)
    for i = 1, prompts do batch[i] = {n_new = w.input, context = 0, prefill = true} end
    tokens = prompts * w.input
  end
  local args = {batch = batch, tp = d.tp}
  for k, v in pairs(knobs) do args[k] = v end
  local ok, s = pcall(cost.step_time, cost, args)
  if not ok then return nil, tostring(s) end
  return {input_throughput = tokens / s, output_throughput = outputs / s, step_ms = 1000 * s}
end

-- A deployment the build cannot run (a GPU with no preset, settings a cost
-- model refuses) is shown as skipped with the reason, not scored.
local configs, meta, skipped = {}, {}, {}
for _, d in ipairs(data.deployments) do
  -- the layout goes into the cost model too, so its tensor-parallel
  -- check sees the attention groups (72 GPUs split no 128 heads, but 72
  -- groups of one GPU do)
  local spec = {kind = "roofline", version = 1, model = d.model, gpu = d.gpu, tp = d.tp, dtype = d.dtype or "bf16"}
  if d.ep and d.ep == d.tp then
    spec.ep = d.ep
    spec.dp_attention = d.dp_attention and true or false
    spec.moe_a2a_backend = d.moe_a2a_backend or "none"
    spec.ep_num_redundant_experts = d.ep_num_redundant_experts
  end
  local ok, cost = pcall(rehearse.cost.new, spec)
  local w, knobs = d.workload, knobs_of(d)
  if not ok then
    skipped[#skipped + 1] = {d = d, why = tostring(cost)}
  elseif w.kind == "decode_step" or w.kind == "prefill_step" then
    local m, why = step_metrics(cost, d, knobs)
    if m then meta[#meta + 1] = {d = d, metrics = m} else skipped[#skipped + 1] = {d = d, why = why} end
  else
    local cfg = {trace = trace_of(w), cost = cost, scheduler = d.scheduler,
                 max_concurrency = (not w.offline) and w.concurrency or nil, label = d.id}
    for k, v in pairs(knobs) do cfg[k] = v end
    -- the same knobs on one short request first: an error skips this one only
    local try = {trace = probe_trace, cost = cost}
    for k, v in pairs(cfg) do if k ~= "trace" and k ~= "cost" and k ~= "label" then try[k] = v end end
    local good, err = pcall(rehearse.sim.run, try)
    if good then
      configs[#configs + 1] = cfg
      meta[#meta + 1] = {d = d, config = #configs}
    else
      skipped[#skipped + 1] = {d = d, why = tostring(err)}
    end
  end
end
local results = rehearse.sweep(configs)

local names = {}
for knob, ids in pairs(unknown) do
  if #ids > 0 then names[#names + 1] = string.format("%s (%d deployments)", knob, #ids) end
end
table.sort(names)
if #names > 0 then
  print("not yet known to this build, left out: " .. table.concat(names, ", "))
end

local TTFT = {median_ttft_ms = true, mean_ttft_ms = true}
local function group_of(d)
  return d.group or (d.model:find("^deepseek") and "deepseek" or "dense")
end
local scored = {dense = {ttft = {}, throughput = {}, off2 = 0, n = 0},
                deepseek = {ttft = {}, throughput = {}, off2 = 0, n = 0}}
local rows = {}
print(string.format("%-38s %-8s %-27s %12s %12s %8s", "deployment", "group", "metric", "measured", "predicted",
                    "error"))
for _, e in ipairs(meta) do
  local d = e.d
  local m = e.metrics or results[e.config].metrics
  local group = group_of(d)
  local mnames = {}
  for name in pairs(d.measured) do mnames[#mnames + 1] = name end
  table.sort(mnames)
  for _, name in ipairs(mnames) do
    local meas, pred = d.measured[name], predicted(name, m, d)
    local err = (pred - meas) / meas
    local class = TTFT[name] and "ttft" or "throughput"
    local s = scored[group] or {ttft = {}, throughput = {}, off2 = 0, n = 0}
    scored[group] = s
    if not d.calibration then
      table.insert(s[class], math.abs(err))
      s.n = s.n + 1
      if pred > 2 * meas or pred < meas / 2 then s.off2 = s.off2 + 1 end
    end
    local flags = (d.calibration and "  (calibration)" or "") .. (d.derived and "  (derived)" or "") ..
                  (d.quality and ("  (" .. d.quality .. ")") or "")
    rows[#rows + 1] = {deployment = d.id, group = group, system = d.system, model = d.model,
                       gpus = string.format("%d x %s", gpus_of(d), d.gpu), metric = name, measured = meas,
                       predicted = pred, error_pct = 100 * err, scored = d.calibration and "no" or "yes"}
    print(string.format("%-38s %-8s %-27s %12.2f %12.2f %7.1f%%%s", d.id, group, name, meas, pred, 100 * err, flags))
  end
end
for _, s in ipairs(skipped) do
  print(string.format("%-38s %-8s skipped: %s", s.d.id, group_of(s.d), s.why))
end
rehearse.csv.write(out .. "/deployments.csv", rows,
                   {"deployment", "group", "system", "model", "gpus", "metric", "measured", "predicted", "error_pct",
                    "scored"})

local function median(v)
  table.sort(v)
  local n = #v
  if n == 0 then return nil end
  return n % 2 == 1 and v[(n + 1) / 2] or (v[n / 2] + v[n / 2 + 1]) / 2
end
local med = {}
for _, g in ipairs{"dense", "deepseek"} do
  local s = scored[g]
  med[g] = {ttft = median(s.ttft), throughput = median(s.throughput)}
  print(string.format("%-8s median |error|: TTFT %.1f%% (%d measurements), throughput or TPOT %.1f%% (%d); "
                      .. "off by more than 2x: %d of %d", g, 100 * (med[g].ttft or 0), #s.ttft,
                      100 * (med[g].throughput or 0), #s.throughput, s.off2, s.n))
end
if #skipped > 0 then print(string.format("%d deployments skipped (above)", #skipped)) end
rehearse.plot.scatter{csv = out .. "/deployments.csv", out = out .. "/predicted_vs_measured",
  x = "measured", y = "predicted", by = "metric", logx = true, logy = true, diagonal = true,
  title = "Published measurements of real deployments against rehearse's predictions",
  xlabel = "measured (ms, tokens/s)", ylabel = "predicted by rehearse"}
local dense, ds = scored.dense, scored.deepseek
C.summary(out, {median_abs_error_ttft = med.dense.ttft, median_abs_error_throughput_tpot = med.dense.throughput,
                ttft_measurements = #dense.ttft, throughput_tpot_measurements = #dense.throughput,
                off_by_2x = dense.off2,
                deepseek_median_abs_error_ttft = med.deepseek.ttft,
                deepseek_median_abs_error_throughput_tpot = med.deepseek.throughput,
                deepseek_ttft_measurements = #ds.ttft, deepseek_throughput_tpot_measurements = #ds.throughput,
                deepseek_off_by_2x = ds.off2, skipped = #skipped,
                plots = {{file = "predicted_vs_measured.png",
                          caption = "Each published measurement (vLLM, SGLang, NIM, TensorRT-LLM; dense models and "
                                    .. "DeepSeek-V3/R1) against rehearse's prediction with the shipped presets; "
                                    .. "the diagonal is a perfect prediction."}}})
