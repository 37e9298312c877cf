-- calibrate_summary.lua — the demo report's calibration section: what was
-- measured (from the cost file) and how well the table predicts the steps the
-- engine ran (validate-steps' steps.csv beside it).
--   rehearse run scripts/experiments/calibrate_summary.lua dir=reports/demo/calibrate
local C = require "common"
local dir = C.arg("dir", "reports/demo/calibrate")
local cost = rehearse.json.read(dir .. "/cost.json")
local cal = cost.calibration or {}
local rows = {}
local f = io.open(dir .. "/steps.csv")
local errs = {prefill = {}, decode = {}, mixed = {}}
if f then
  local header = f:read("l")
  local cols = {}
  for name in header:gmatch("[^,]+") do cols[#cols + 1] = name end
  for line in f:lines() do
    local v, i = {}, 0
    for x in line:gmatch("[^,]+") do i = i + 1; v[cols[i]] = x end
    local e = tonumber(v.rel_error)
    if v.class and e and errs[v.class] then table.insert(errs[v.class], math.abs(e)) end
  end
  f:close()
end
local function pct(t, q)
  if #t == 0 then return nil end
  table.sort(t)
  local pos = q / 100 * (#t - 1)
  local lo = math.floor(pos)
  local hi = math.min(lo + 1, #t - 1)
  return 100 * (t[lo + 1] + (t[hi + 1] - t[lo + 1]) * (pos - lo))
end
for _, c in ipairs({"prefill", "decode", "mixed"}) do
  if #errs[c] > 0 then
    rows[#rows + 1] = {c, #errs[c], pct(errs[c], 50), pct(errs[c], 90), pct(errs[c], 100)}
  end
end
C.summary(dir, {
  model = cost.model and cost.model.name or "?",
  headline = string.format("%s backend, %d BLAS thread(s): %d grid points in %.0f s.", cost.backend or "?",
                           cost.threads or 0, cal.points or 0, cal.seconds or 0),
  table = {columns = {"step class", "steps", "median error %", "p90 error %", "max error %"}, rows = rows},
  plots = {{file = "scatter.png", caption = "Every step of the recorded engine run: the calibrated table's "
            .. "prediction against the measured time (log axes; the dashed line is a perfect prediction)."}}})
