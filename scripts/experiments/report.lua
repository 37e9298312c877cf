-- report.lua — the HTML page of a demo run: one section per experiment found
-- under DIR (each wrote DIR/<name>/summary.json with its plots and captions),
-- with the validation table when DIR/validate/summary.json exists.
--   rehearse run scripts/experiments/report.lua dir=reports/demo [title=...] [note=...]
local C = require "common"
local dir = C.arg("dir", "reports/demo")
local title = C.arg("title", "rehearse — demo report")

local sections = {
  {name = "validate", head = "The simulator against the real engine",
   text = "The same trace and configuration ran twice: through the CPU engine (a real transformer, real "
       .. "timings, recorded) and through the simulator with a cost model calibrated from this machine's "
       .. "kernels. Each metric is shown measured, simulated, and the relative error."},
  {name = "calibrate", head = "The calibrated cost model",
   text = "Per-operator times of this machine's CPU kernels over a grid of shapes, and how well the table "
       .. "predicts the steps the engine actually ran."},
  {name = "deployments", head = "Predictions of published deployments",
   text = "Published measurements of real serving systems (vLLM, SGLang, NVIDIA NIM), each predicted with "
       .. "the shipped presets, their fitted kernels and measured collectives, nothing tuned per deployment."},
  {name = "deepseek", head = "DeepSeek-R1 as teams deploy it",
   text = "Four questions of a DeepSeek-R1 deployment with the shipped presets (FP8 weights, SGLang's host, "
       .. "nothing tuned): where a lone prompt's TTFT turns with TP16 over two H100 nodes and chunked prefill "
       .. "8192; throughput and TTFT against concurrency at --max-running-requests 78; MTP's speed-up against "
       .. "concurrency on 8 x H20; TP16 against data-parallel attention with 16-way expert parallelism."},
  {name = "knob_grid", head = "Chunked-prefill size × max running requests on a real trace",
   text = "The main question of a deployment: which pair of knobs keeps the tail latencies under the SLOs "
       .. "at this load. Every cell is one simulated replay of the trace."},
  {name = "spec_depth", head = "Speculative decoding: where it stops paying",
   text = "Speculative depth against load and draft acceptance. Verifying drafts is nearly free while the "
       .. "target model is memory-bound (few requests) and costs real compute once the batch is large."},
  {name = "ttft_vs_prompt_length", head = "TTFT against prompt length, and the price of not chunking",
   text = "One prompt of growing length arrives while other requests decode."},
  {name = "concurrency_sweep", head = "TTFT and throughput against concurrency",
   text = "A closed loop of clients sending 1024-token prompts, as a benchmark client does."},
  {name = "prefix_cache", head = "Prefix cache: pool size and queue policy",
   text = "Multi-turn conversations re-send their history; the pool size decides how much of it is still cached."},
  {name = "router_policy", head = "Replicas behind a router: cache-aware against load-only routing",
   text = "The same trace over 2, 4 and 8 simulated replicas (the load grows with them), routed by each policy "
       .. "of the router core. A conversation's turns share its earlier turns' blocks: sent where they are "
       .. "cached, they skip that prefill."},
  {name = "mixed_gpus", head = "A cluster of unlike GPUs: round-robin against load-aware routing",
   text = "Four H100 and four A100 replicas of one model, each group priced by its own cost model (a "
       .. "CLUSTER.json). Round-robin gives every replica the same share, so the slower GPUs queue first."},
  {name = "pd_vs_colocated", head = "Prefill-decode disaggregation against colocated serving",
   text = "The same GPUs as colocated replicas or split into a prefill and a decode pool, the KV moved over "
       .. "the link between them: goodput under a TTFT and a TPOT SLO against the split."},
  {name = "lora", head = "Many LoRA adapters on one base model",
   text = "Throughput and p99 TTFT against the number of adapters (1 to 1,000), their popularity's skew and "
       .. "--max-loras-per-batch, on llama-3-8b on one H100, in the shape of S-LoRA's evaluation; then S-LoRA's "
       .. "setting S1 with its published throughputs beside the prediction. A request whose adapter would pass "
       .. "the cap waits (SGLang's rule); each adapter entering a slot is copied from host memory first."},
  {name = "hicache", head = "A host-memory tier below the GPU's prefix cache (HiCache)",
   text = "TTFT, throughput and prefix hits per tier against the host tier's size (0 to 8 times the GPU pool) and "
       .. "its write policy, on multi-turn chats in the shape of SGLang's bench_multiturn and on the Mooncake "
       .. "conversation trace, llama-3.1-8b on one H100. Host hits load back over PCIe layer by layer while the "
       .. "prefill computes; the Mooncake paper's capacity figures and SGLang's published HiCache gains beside."},
  {name = "head_of_line", head = "Head-of-line blocking",
   text = "One long prompt arrives among short ones, with and without chunked prefill."},
}

local function esc(s)
  return (tostring(s):gsub("&", "&amp;"):gsub("<", "&lt;"):gsub(">", "&gt;"))
end

local function fmt(v)
  if type(v) == "number" then
    if math.type(v) == "integer" then return tostring(v) end
    if math.abs(v) >= 100 then return string.format("%.0f", v) end
    return string.format("%.3g", v)
  end
  if type(v) == "table" then return esc(rehearse.json.encode(v)) end
  return esc(v)
end

local parts = {}
local function add(s) parts[#parts + 1] = s end
add("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" .. esc(title) .. "</title>\n")
add([[<style>
body { font: 15px/1.5 "DejaVu Sans", sans-serif; max-width: 1080px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.7em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2.2em; }
figure { margin: 1.2em 0; } figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { color: #444; font-size: .95em; margin-top: .3em; }
table { border-collapse: collapse; margin: 1em 0; font-size: .92em; }
td, th { border: 1px solid #ccc; padding: .25em .6em; text-align: right; } th { background: #f4f4f4; }
td:first-child, th:first-child { text-align: left; }
.note { background: #fff8e0; border-left: 4px solid #e6a700; padding: .5em 1em; }
.facts { color: #555; }
</style></head><body>
]])
add("<h1>" .. esc(title) .. "</h1>\n")
add("<p>rehearse replays serving traces through the same scheduler code the real engine runs, on a virtual "
    .. "clock priced by a cost model, so a deployment's knobs can be tuned before the live one is touched. "
    .. "This page was written by <code>make demo</code>; every figure below links to its PNG, SVG and CSV "
    .. "beside it.</p>\n")
if rehearse.args.note then add("<p class=\"note\">" .. esc(rehearse.args.note) .. "</p>\n") end

local toc = {}
for _, s in ipairs(sections) do
  local path = dir .. "/" .. s.name .. "/summary.json"
  if rehearse.exists(path) then toc[#toc + 1] = s end
end
add("<ul>\n")
for _, s in ipairs(toc) do add("<li><a href=\"#" .. s.name .. "\">" .. esc(s.head) .. "</a></li>\n") end
add("</ul>\n")

for _, s in ipairs(toc) do
  local sum = rehearse.json.read(dir .. "/" .. s.name .. "/summary.json")
  add("<h2 id=\"" .. s.name .. "\">" .. esc(s.head) .. "</h2>\n<p>" .. esc(s.text) .. "</p>\n")
  local facts = {}
  for _, k in ipairs({"cost", "trace", "requests", "rate_scale", "slo_ttft_ms", "slo_tpot_ms", "model", "runtime_s"}) do
    if sum[k] ~= nil then facts[#facts + 1] = k .. ": " .. fmt(sum[k]) end
  end
  if #facts > 0 then add("<p class=\"facts\">" .. table.concat(facts, " · ") .. "</p>\n") end
  if sum.headline then add("<p><b>" .. esc(sum.headline) .. "</b></p>\n") end
  if sum.best and type(sum.best) == "table" then
    add(string.format("<p><b>Best under the SLOs:</b> --chunked-prefill-size %s, --max-running-requests %s "
        .. "(goodput %s req/s, p99 TTFT %s ms, p99 TPOT %s ms).</p>\n", fmt(sum.best.chunked_prefill),
        fmt(sum.best.max_running), fmt(sum.best.request_goodput), fmt(sum.best.p99_ttft_ms), fmt(sum.best.p99_tpot_ms)))
  end
  if sum.table and sum.table.columns then
    add("<table><tr>")
    for _, c in ipairs(sum.table.columns) do add("<th>" .. esc(c) .. "</th>") end
    add("</tr>\n")
    for _, row in ipairs(sum.table.rows) do
      add("<tr>")
      for _, v in ipairs(row) do add("<td>" .. fmt(v) .. "</td>") end
      add("</tr>\n")
    end
    add("</table>\n")
  end
  for _, p in ipairs(sum.plots or {}) do
    local base = s.name .. "/" .. p.file:gsub("%.png$", "")
    add("<figure><a href=\"" .. s.name .. "/" .. p.file .. "\"><img src=\"" .. s.name .. "/" .. p.file
        .. "\" alt=\"" .. esc(p.caption) .. "\"></a><figcaption>" .. esc(p.caption)
        .. " <a href=\"" .. base .. ".svg\">SVG</a></figcaption></figure>\n")
  end
end
add("</body></html>\n")
local f = assert(io.open(dir .. "/index.html", "w"))
f:write(table.concat(parts))
f:close()
print(dir .. "/index.html")
