--- notify_webhook: POST a JSON message to a webhook at most once per task.
---
--- needs: http (the step says allow: [http], or lists the hosts)
---
--- The POST is guarded by idem.once: a MARKER record is made durable before
--- the request, and its result after. A rerun (a retry, a resume) returns the
--- recorded result without posting again. If apollo was killed during the
--- request, whether it arrived is uncertain: the step fails and says so,
--- unless `assume_sent_if_uncertain` is true (then it is not sent again).
---
--- with:
---   url      (string)            the webhook; empty or absent: nothing is sent
---   message  (string, required)  the text
---   name     (string, optional)  the marker's name, default "notify_webhook:<step id>"
---   headers  (table, optional)   request headers
---   timeout  (number, optional)  seconds, default 30
---   assume_sent_if_uncertain (boolean, optional) default false
--- returns: {sent = true|false, status = http status}
local http = require("apollo.http")
local idem = require("apollo.idem")
local json = require("apollo.json")
local log = require("apollo.log")

local M = {}

function M.run(ctx)
  local p = ctx.params
  assert(type(p.message) == "string", "notify_webhook: with.message is required")
  if p.url == nil or p.url == "" then
    log.info("notify_webhook: no url; nothing sent")
    return {sent = false}
  end
  local name = p.name or ("notify_webhook:" .. ctx.step_id)
  local opts = {}
  if p.assume_sent_if_uncertain then
    opts.verify = function() return true, {sent = true, status = 0, assumed = true} end
  end
  return idem.once(name, function()
    local headers = p.headers or {}
    headers["Content-Type"] = headers["Content-Type"] or "application/json"
    local res = http.post(p.url, json.encode({task_id = ctx.task_id, step_id = ctx.step_id, message = p.message}),
      {headers = headers, timeout = p.timeout or 30})
    if res.status < 200 or res.status > 299 then
      error(string.format("notify_webhook: POST %s answered %d", p.url, res.status))
    end
    return {sent = true, status = res.status}
  end, opts)
end

return M
