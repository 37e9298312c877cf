-- pd_vs_colocated.lua — prefill-decode disaggregation against colocated
-- serving at an equal GPU count, on the Azure LLM inference traces: goodput
-- (requests per second meeting both the TTFT and the TPOT SLO) against the
-- prefill:decode split of the replicas. Colocated replicas interleave
-- prefills with decodes, so a long prompt stretches every running request's
-- TPOT; a split pool keeps decodes steady and pays a KV transfer instead.
-- Goodput peaks at the split that balances the two pools for the trace's
-- prompt and output lengths (the shape of DistServe's result).
--   rehearse run scripts/experiments/pd_vs_colocated.lua [replicas=8] [code_rate_scale=6] [conv_rate_scale=16]
--       [slo_ttft_ms=2000] [slo_tpot_ms=60] [link=ib] [requests=6000]
--       [cost=FILE | model= gpu= tp=] [out=DIR]
local C = require "common"
local out = C.outdir("pd_vs_colocated")
local cost, cost_label = C.cost()
local n = C.arg("replicas", 8)
local link = C.arg("link", "ib")
local slo = {slo_ttft = C.arg("slo_ttft_ms", 2000), slo_tpot = C.arg("slo_tpot_ms", 60)}

local traces = {}
for _, f in ipairs({"AzureLLMInferenceTrace_code.csv", "AzureLLMInferenceTrace_conv.csv"}) do
  local path = C.shared(f)
  if path then
    local name = f:match("_(%a+)%.csv$")
    -- Each trace sped up to load the replicas near where the SLOs start to bind.
    traces[#traces + 1] = {name = name, trace = rehearse.trace.load(path),
                           rate = C.arg(name .. "_rate_scale", name == "code" and 6 or 16)}
  end
end
if #traces == 0 then
  -- Without the shared traces: long prompts with short answers, and the reverse.
  for _, shape in ipairs({{"long-prompt", 2000, 30}, {"long-output", 300, 400}}) do
    local t = rehearse.trace.new{}
    for i = 1, 3000 do t:add{arrival = i * 0.2, input_len = shape[2], output_len = shape[3]} end
    traces[#traces + 1] = {name = shape[1], trace = t, rate = 1}
  end
  rehearse.log("pd_vs_colocated: ../shared/traces is absent; using two synthetic shapes")
end

local configs, labels = {}, {}
for _, tr in ipairs(traces) do
  local trace = tr.trace:slice{first = C.arg("requests", 6000)}
  local base = {trace = trace, cost = cost, rate_scale = tr.rate, slo_ttft = slo.slo_ttft,
                slo_tpot = slo.slo_tpot, chunked_prefill_size = 8192, max_running_requests = 128}
  local colocated = {}
  for k, v in pairs(base) do colocated[k] = v end
  colocated.cluster = {replicas = n, router = "least-outstanding"}
  configs[#configs + 1] = colocated
  labels[#configs] = {trace = tr.name, mode = "colocated", prefill = 0, decode = 0}
  for p = 1, n - 1 do
    local c = {}
    for k, v in pairs(base) do c[k] = v end
    c.cluster = {prefill_replicas = p, decode_replicas = n - p, router = "least-outstanding", pd_link = link}
    configs[#configs + 1] = c
    labels[#configs] = {trace = tr.name, mode = "pd", prefill = p, decode = n - p}
  end
end
rehearse.log("pd_vs_colocated: %d configurations on %d replicas, %s, link %s", #configs, n, cost_label, link)
local results = rehearse.sweep(configs)
local rows, best = {}, {}
for i, l in ipairs(labels) do
  local r = results[i]
  local m = r.metrics
  local gpus = r.gpus or 1
  rows[i] = {trace = l.trace, mode = l.mode, prefill = l.prefill, decode = l.decode,
             prefill_share = l.mode == "pd" and l.prefill / n or -1,
             goodput = m.request_goodput, goodput_per_gpu = m.request_goodput / gpus,
             p99_ttft_ms = m.p99_ttft_ms, p99_tpot_ms = m.p99_tpot_ms,
             kv_transfer_ms = r.mean_kv_transfer_ms or 0}
  local b = best[l.trace]
  if l.mode == "pd" and (not b or rows[i].goodput > b.goodput) then best[l.trace] = rows[i] end
end
rehearse.csv.write(out .. "/pd.csv", rows, {"trace", "mode", "prefill", "decode", "prefill_share", "goodput",
                                             "goodput_per_gpu", "p99_ttft_ms", "p99_tpot_ms", "kv_transfer_ms"})
print(string.format("%-6s %-10s %8s %12s %14s %12s %12s %10s", "trace", "mode", "P:D", "goodput", "per GPU",
                    "p99 TTFT", "p99 TPOT", "KV xfer"))
for _, r in ipairs(rows) do
  print(string.format("%-6s %-10s %8s %10.2f/s %12.4f/s %9.0f ms %9.1f ms %7.2f ms", r.trace, r.mode,
                      r.mode == "pd" and (r.prefill .. ":" .. r.decode) or "-", r.goodput, r.goodput_per_gpu,
                      r.p99_ttft_ms, r.p99_tpot_ms, r.kv_transfer_ms))
end
local pd_rows = {}
for _, r in ipairs(rows) do if r.mode == "pd" then pd_rows[#pd_rows + 1] = r end end
rehearse.csv.write(out .. "/pd_only.csv", pd_rows, {"trace", "prefill_share", "goodput"})
rehearse.plot.lines{csv = out .. "/pd_only.csv", out = out .. "/goodput", x = "prefill_share", y = "goodput",
  by = "trace", title = string.format("Goodput against the prefill share of %d replicas (%s, link %s)", n,
                                      cost_label, link),
  xlabel = "prefill replicas / all replicas", ylabel = "requests/s meeting both SLOs"}
local summary_rows = {}
for _, r in ipairs(rows) do
  summary_rows[#summary_rows + 1] = {r.trace, r.mode == "pd" and (r.prefill .. ":" .. r.decode) or "colocated",
                                     r.goodput, r.goodput_per_gpu, r.p99_ttft_ms, r.p99_tpot_ms}
end
C.summary(out, {cost = cost_label, requests = C.arg("requests", 6000),
  headline = string.format("SLOs: TTFT %d ms, TPOT %d ms; %d replicas; KV over %s.", slo.slo_ttft, slo.slo_tpot, n,
                           link),
  table = {columns = {"trace", "P:D", "goodput (req/s)", "per GPU", "p99 TTFT (ms)", "p99 TPOT (ms)"},
           rows = summary_rows},
  plots = {{file = "goodput.png", caption = "Requests per second meeting both SLOs as the replicas are split "
            .. "between prefill and decode (colocated serving is in the table)."}}})
