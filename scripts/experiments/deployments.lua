-- deployments.lua — rehearse's predictions for published measurements of
-- real serving systems (deployments.json: each with its source, model, GPUs,
-- parallelism and workload), with the shipped presets, their fitted kernels
-- and measured collectives, and nothing tuned per deployment. Prints each
-- measurement beside its prediction and the error, and the median |error|
-- on TTFT and on throughput or TPOT (a figure a preset was set from is
-- shown, not scored).
--   rehearse run scripts/experiments/deployments.lua [file=deployments.json] [out=DIR]
local C = require "common"
local out = C.outdir("deployments")
local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
local data = rehearse.json.read(C.arg("file", here .. "deployments.json"))

-- The workload as a trace: every request at 0 (a closed loop of
-- `concurrency` clients sends them as clients free up).
local function trace_of(w)
  if w.range_ratio then
    return rehearse.trace.synth{requests = w.requests, rate = 1e6, seed = 1,
                                input_dist = "uniform", input_len = w.input, input_range_ratio = w.range_ratio,
                                output_dist = "uniform", output_len = w.output, output_range_ratio = w.range_ratio}
  end
  local t = rehearse.trace.new()
  for _ = 1, w.requests do t:add{arrival = 0, input_len = w.input, output_len = w.output} end
  return t
end

-- What a measurement names, from a simulation's metrics.
local function predicted(name, m)
  if name == "duration_ms" then return 1000 * m.duration end
  if name == "decode_tok_per_s" then return 1000 / m.median_tpot_ms end
  return m[name]
end

local configs, meta = {}, {}
for _, d in ipairs(data.deployments) do
  local cost = rehearse.cost.new{kind = "roofline", version = 1, model = d.model, gpu = d.gpu, tp = d.tp,
                                 dtype = d.dtype or "bf16"}
  local w = d.workload
  configs[#configs + 1] = {trace = trace_of(w), cost = cost, scheduler = d.scheduler,
                           max_concurrency = (not w.offline) and w.concurrency or nil,
                           max_running_requests = d.max_running_requests, label = d.id}
  meta[#meta + 1] = d
end
local results = rehearse.sweep(configs)

local rows, scored = {}, {ttft = {}, throughput = {}}
print(string.format("%-30s %-20s %12s %12s %8s", "deployment", "metric", "measured", "predicted", "error"))
for i, d in ipairs(meta) do
  local names = {}
  for name in pairs(d.measured) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local meas, pred = d.measured[name], predicted(name, results[i].metrics)
    local err = (pred - meas) / meas
    local class = name == "median_ttft_ms" and "ttft" or "throughput"
    if not d.calibration then table.insert(scored[class], math.abs(err)) end
    rows[#rows + 1] = {deployment = d.id, system = d.system, model = d.model,
                       gpus = string.format("%d x %s", d.tp, d.gpu), metric = name, measured = meas,
                       predicted = pred, error_pct = 100 * err, scored = d.calibration and "no" or "yes"}
    print(string.format("%-30s %-20s %12.2f %12.2f %7.1f%%%s", d.id, name, meas, pred, 100 * err,
                        d.calibration and "  (calibration)" or ""))
  end
end
rehearse.csv.write(out .. "/deployments.csv", rows,
                   {"deployment", "system", "model", "gpus", "metric", "measured", "predicted", "error_pct", "scored"})

local function median(v)
  table.sort(v)
  local n = #v
  if n == 0 then return nil end
  return n % 2 == 1 and v[(n + 1) / 2] or (v[n / 2] + v[n / 2 + 1]) / 2
end
local med_ttft, med_tput = median(scored.ttft), median(scored.throughput)
print(string.format("median |error|: TTFT %.1f%% (%d measurements), throughput or TPOT %.1f%% (%d)",
                    100 * (med_ttft or 0), #scored.ttft, 100 * (med_tput or 0), #scored.throughput))
rehearse.plot.scatter{csv = out .. "/deployments.csv", out = out .. "/predicted_vs_measured",
  x = "measured", y = "predicted", by = "metric", logx = true, logy = true, diagonal = true,
  title = "Published measurements of real deployments against rehearse's predictions",
  xlabel = "measured (ms, tokens/s)", ylabel = "predicted by rehearse"}
C.summary(out, {median_abs_error_ttft = med_ttft, median_abs_error_throughput_tpot = med_tput,
                ttft_measurements = #scored.ttft, throughput_tpot_measurements = #scored.throughput,
                plots = {{file = "predicted_vs_measured.png",
                          caption = "Each published measurement (vLLM, SGLang, NIM) against rehearse's prediction with the shipped presets; the diagonal is a perfect prediction."}}})
