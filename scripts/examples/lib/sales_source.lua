--- sales_source: writes a day's generated sales to a CSV file, atomically.
--- A stand-in for a real download so the example runs anywhere.
---
--- with: dest (string), date (YYYY-MM-DD), region (string), rows (number)
--- returns: {path = dest, rows = n}
local idem = require("apollo.idem")

local M = {}

local cities = {"berlin", "paris", "madrid", "rome", "lisbon", "vienna"}

function M.run(ctx)
  local p = ctx.params
  local rows = tonumber(p.rows) or 100
  -- A small deterministic generator: the same date gives the same data.
  local seed = 0
  for i = 1, #p.date do seed = (seed * 31 + p.date:byte(i)) % 2147483647 end
  local function rand()
    seed = (seed * 16807) % 2147483647
    return seed / 2147483647
  end
  local out = {"date,region,city,order_id,amount"}
  for i = 1, rows do
    local city = cities[math.floor(rand() * #cities) + 1]
    out[#out + 1] = string.format("%s,%s,%s,%d,%.2f", p.date, p.region, city, i, rand() * 100)
  end
  idem.write(p.dest, table.concat(out, "\n") .. "\n")
  print(string.format("sales_source: %d rows for %s (%s)", rows, p.date, p.region))
  return {path = p.dest, rows = rows}
end

return M
