-- common.lua — what the experiment scripts share: reading key=value
-- arguments, the output folder, the default cost models and traces.
local M = {}

-- The value of key=value on the command line, or the default.
function M.arg(name, default)
  local v = rehearse.args[name]
  if v == nil then return default end
  if type(default) == "number" then return tonumber(v) or error(name .. "=" .. tostring(v) .. " is not a number") end
  return v
end

-- reports/<name>/ (or out=DIR), created.
function M.outdir(name)
  local dir = M.arg("out", "reports/" .. name)
  rehearse.mkdir(dir)
  return dir
end

-- A cost model: cost=FILE on the command line, else a roofline preset,
-- its kernels and collectives as the GPU preset measured them (efficiency=F
-- scales every operator further; step_overhead_s=S and forward_s=S add the
-- step's CPU time and each forward's launches). Defaults are a 70B-class
-- model on 8 GPUs (as deployments serve it).
function M.cost(defaults)
  local file = rehearse.args.cost
  if file then return rehearse.cost.load(file), file end
  defaults = defaults or {}
  local spec = {
    kind = "roofline", version = 1,
    model = M.arg("model", defaults.model or "llama-3-70b"),
    gpu = M.arg("gpu", defaults.gpu or "h200"),
    tp = M.arg("tp", defaults.tp or 8),
    overheads = {step_s = M.arg("step_overhead_s", 0), forward_s = M.arg("forward_s", 0)},
  }
  if rehearse.args.efficiency then spec.efficiency = {default = M.arg("efficiency", 1)} end
  if defaults.draft_ratio then spec.draft_ratio = M.arg("draft_ratio", defaults.draft_ratio) end
  local label = string.format("roofline %s on %d x %s", spec.model, spec.tp, spec.gpu)
  return rehearse.cost.new(spec), label
end

-- A shared real trace by file name, or nil (with a note) when absent.
function M.shared(name)
  local dir = rehearse.shared_traces()
  if not dir then return nil end
  local path = dir .. "/" .. name
  if not rehearse.exists(path) then return nil end
  return path
end

-- Multi-turn chats whose turns extend each other (4 new 512-token blocks a
-- turn, 5 turns), one turn every `gap` s: the stand-in for the Mooncake
-- conversation trace when ../shared/traces is absent.
function M.multiturn_trace(sessions, gap)
  local trace = rehearse.trace.new{block_size = 512}
  local next_block, at = 1, 0
  for s = 1, sessions do
    local hashes = {}
    for turn = 1, 5 do
      for b = 1, 4 do hashes[#hashes + 1] = next_block; next_block = next_block + 1 end
      local h = {}
      for i, v in ipairs(hashes) do h[i] = v end
      at = at + gap
      trace:add{arrival = at, input_len = #hashes * 512 + 100, output_len = 300, session_id = s, hashes = h}
    end
  end
  return trace
end

-- Rows {k=v} from a config list and its results, picking metrics by name.
function M.rows(configs, results, keys, metrics)
  local rows = {}
  for i, c in ipairs(configs) do
    local r = {}
    for _, k in ipairs(keys) do r[k] = c[k] end
    for _, m in ipairs(metrics) do r[m] = results[i].metrics[m] end
    rows[i] = r
  end
  return rows
end

-- Column names for csv.write: keys then metrics.
function M.columns(keys, metrics)
  local c = {}
  for _, k in ipairs(keys) do c[#c + 1] = k end
  for _, m in ipairs(metrics) do c[#c + 1] = m end
  return c
end

-- Writes a small JSON summary next to the CSVs, read by the demo report.
function M.summary(dir, tbl)
  rehearse.json.write(dir .. "/summary.json", tbl)
end

return M
