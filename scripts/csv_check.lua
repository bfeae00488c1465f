--- csv_check: validate a CSV file and report every problem clearly.
---
--- Checks the header, the number of fields on every row, the type of chosen
--- columns and the number of rows. Fails with a report of up to `max_report`
--- problems, each "path:line: column c: what is wrong". Read-only.
---
--- with:
---   path       (string, required)  the CSV file, relative to the workspace
---   header     (array, optional)   the exact column names expected
---   types      (table, optional)   column name -> "number" | "integer" | "string" | "date" (YYYY-MM-DD)
---   min_rows   (number, optional)  default 1
---   max_rows   (number, optional)
---   delimiter  (string, optional)  default ","
---   max_report (number, optional)  default 20
--- returns: {rows = n, columns = {names}}
local fs = require("apollo.fs")

local M = {}

-- split parses one CSV line, honouring double-quoted fields.
local function split(line, delim)
  local fields, field, i, n, quoted = {}, {}, 1, #line, false
  while i <= n do
    local c = line:sub(i, i)
    if quoted then
      if c == '"' then
        if line:sub(i + 1, i + 1) == '"' then
          field[#field + 1] = '"'
          i = i + 1
        else
          quoted = false
        end
      else
        field[#field + 1] = c
      end
    elseif c == '"' then
      quoted = true
    elseif c == delim then
      fields[#fields + 1] = table.concat(field)
      field = {}
    else
      field[#field + 1] = c
    end
    i = i + 1
  end
  fields[#fields + 1] = table.concat(field)
  return fields
end

local checks = {
  number = function(v) return v:match("^%-?%d+%.?%d*$") ~= nil or v:match("^%-?%d*%.%d+$") ~= nil end,
  integer = function(v) return v:match("^%-?%d+$") ~= nil end,
  string = function(v) return true end,
  date = function(v) return v:match("^%d%d%d%d%-%d%d%-%d%d$") ~= nil end,
}

function M.run(ctx)
  local p = ctx.params
  assert(type(p.path) == "string", "csv_check: with.path is required")
  local delim = p.delimiter or ","
  local limit = p.max_report or 20
  local problems = {}
  local function problem(line, msg)
    if #problems < limit then
      problems[#problems + 1] = string.format("%s:%d: %s", p.path, line, msg)
    elseif #problems == limit then
      problems[#problems + 1] = "… more problems not shown"
    end
  end
  local text = fs.read(p.path)
  local lineno, header, rows = 0, nil, 0
  for line in (text .. "\n"):gmatch("(.-)\r?\n") do
    lineno = lineno + 1
    if header == nil then
      header = split(line, delim)
      if p.header then
        local want, got = table.concat(p.header, delim), table.concat(header, delim)
        if want ~= got then problem(1, string.format("header is %q, expected %q", got, want)) end
      end
    elseif line ~= "" then
      rows = rows + 1
      local f = split(line, delim)
      if #f ~= #header then
        problem(lineno, string.format("%d fields, the header has %d", #f, #header))
      elseif p.types then
        for i, name in ipairs(header) do
          local kind = p.types[name]
          if kind then
            local ok = checks[kind]
            if not ok then error("csv_check: unknown type " .. tostring(kind) .. " for column " .. name) end
            if not ok(f[i]) then problem(lineno, string.format("column %s: %q is not a %s", name, f[i], kind)) end
          end
        end
      end
    end
  end
  if header == nil then problem(1, "the file is empty; expected a header") end
  if rows < (p.min_rows or 1) then problem(lineno, string.format("%d rows, expected at least %d", rows, p.min_rows or 1)) end
  if p.max_rows and rows > p.max_rows then problem(lineno, string.format("%d rows, expected at most %d", rows, p.max_rows)) end
  if #problems > 0 then
    error("csv_check found problems:\n" .. table.concat(problems, "\n"), 0)
  end
  print(string.format("csv_check: %s: %d rows, %d columns, all valid", p.path, rows, #header))
  return {rows = rows, columns = header}
end

return M
