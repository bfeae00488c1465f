--- publish: copy an artifact to its destination atomically and idempotently.
---
--- The copy is written with idem.write (temporary file, fsync, rename,
--- folder fsync): readers of the destination see the old file or the new one,
--- never half of it. When the destination already holds the same bytes,
--- nothing is written.
---
--- with:
---   src   (string, required)  the file to publish, relative to the workspace
---   dest  (string, required)  where to publish it, relative to the workspace
--- returns: {dest = dest, digest = "sha256:...", copied = true|false}
local fs = require("apollo.fs")
local idem = require("apollo.idem")
local digest = require("apollo.digest")
local log = require("apollo.log")

local M = {}

function M.run(ctx)
  local p = ctx.params
  assert(type(p.src) == "string", "publish: with.src is required")
  assert(type(p.dest) == "string", "publish: with.dest is required")
  local want = digest.file(p.src)
  if fs.exists(p.dest) and digest.file(p.dest) == want then
    log.info("publish: " .. p.dest .. " is already up to date")
    return {dest = p.dest, digest = want, copied = false}
  end
  idem.write(p.dest, fs.read(p.src))
  log.info("publish: " .. p.src .. " -> " .. p.dest)
  return {dest = p.dest, digest = want, copied = true}
end

return M
