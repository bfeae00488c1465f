--- http_fetch: download a URL into a file, atomically.
---
--- needs: http (the step says allow: [http], or lists the hosts)
---
--- The file is written with idem.write (temporary file, fsync, rename), so a
--- crash never leaves half a download in place. When `sha256` is given and the
--- file already has that digest, nothing is downloaded: a rerun costs nothing.
---
--- with:
---   url      (string, required)  what to download
---   dest     (string, required)  where to put it, relative to the workspace
---   sha256   (string, optional)  expected digest, "sha256:<hex>"; a mismatch fails the step
---   timeout  (number, optional)  seconds, default 60
---   headers  (table, optional)   request headers
--- returns: {path = dest, digest = "sha256:...", bytes = n, downloaded = true|false}
---
--- example:
---   - id: fetch
---     uses: http_fetch
---     with: {url: "https://example.com/data.csv", dest: "{{artifacts_dir}}/data.csv"}
local http = require("apollo.http")
local idem = require("apollo.idem")
local fs = require("apollo.fs")
local digest = require("apollo.digest")
local log = require("apollo.log")

local M = {}

function M.run(ctx)
  local p = ctx.params
  assert(type(p.url) == "string" and p.url ~= "", "http_fetch: with.url is required")
  assert(type(p.dest) == "string" and p.dest ~= "", "http_fetch: with.dest is required")
  if p.sha256 and fs.exists(p.dest) and digest.file(p.dest) == p.sha256 then
    log.info("http_fetch: " .. p.dest .. " already has " .. p.sha256 .. "; not downloading")
    return {path = p.dest, digest = p.sha256, bytes = fs.stat(p.dest).size, downloaded = false}
  end
  local res = http.get(p.url, {timeout = p.timeout or 60, headers = p.headers})
  if res.status < 200 or res.status > 299 then
    error(string.format("http_fetch: GET %s answered %d", p.url, res.status))
  end
  local got = digest.sha256(res.body)
  if p.sha256 and got ~= p.sha256 then
    error(string.format("http_fetch: %s has digest %s, expected %s", p.url, got, p.sha256))
  end
  idem.write(p.dest, res.body)
  log.info(string.format("http_fetch: %d bytes from %s to %s", #res.body, p.url, p.dest))
  return {path = p.dest, digest = got, bytes = #res.body, downloaded = true}
end

return M
