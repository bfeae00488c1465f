---@meta
-- LuaLS annotations for apollo's Lua steps: the `ctx` global and the apollo.*
-- standard library. Point your editor at this file (print it with
-- `apollo lua-types > .apollo-types.lua`, then add the folder to
-- "Lua.workspace.library" in .luarc.json) to get completion and type checks.

---@class apollo.Ctx
---@field task_id string           the task run's id
---@field step_id string           this step's id
---@field retry_count integer      this attempt's number, 0 for the first
---@field input_digest string      "sha256:<hex>" of what determines the result
---@field vars table<string,string> template variables (vars:, --var, built-ins)
---@field params table<string,any> the step's `with:` map
---@field artifacts_dir string     the task's artifacts folder
---@field traceparent? string      with tracing on: the W3C traceparent of this attempt's span, for the step's own spans to join the run's trace
---@field outputs table<string,any> outputs of the step's dependencies, and of any other upstream step its code names (ctx.outputs.ID), by step id
---@field failed? {id: string, error: string, optional: boolean}[] in an on_failure or finally handler: the failed steps of the task
---@field item? string|table<string,string> in a foreach instance: its item; in a matrix instance: its value on each axis, by axis name
---@field status? table<string,string> in a when: condition only: the state of each of those upstream steps ("SUCCESS", "FAILED", "SKIPPED")
ctx = {}

---@class apollo.idem
local idem = {}

---A stable key from task id, step id, input digest and any extra parts.
---@param ... string|number|table
---@return string
function idem.key(...) end

---Overwrite a file atomically (temporary file, fsync, rename, folder fsync).
---@param path string relative to the workspace, or inside the state directory
---@param data string
function idem.write(path, data) end

---Delete-then-write for a JSON Lines file: drop every record whose `_key` is
---key, append records with `_key` set, atomically.
---@param path string
---@param key string
---@param records table[]
function idem.replace(path, key, records) end

---@class apollo.OnceOptions
---@field verify? fun(): boolean, any decides a marker left pending by a crash: true (and a result) if the effect happened

---At most once per task: fn runs unless the marker `name` is done, in which
---case its recorded result is returned. A marker left pending by a crash
---raises an "uncertain" error unless opts.verify decides.
---@generic T
---@param name string
---@param fn fun(): T
---@param opts? apollo.OnceOptions
---@return T
function idem.once(name, fn, opts) end

---Idempotency-key pattern: the recorded result for key, or create() called once and recorded.
---@generic T
---@param key string
---@param create fun(): T
---@return T
function idem.resource(key, create) end

---@class apollo.fs
local fs = {}
---@param path string
---@return string
function fs.read(path) end
---@param path string
---@param data string
function fs.write(path, data) end
---@param path string
---@param data string
function fs.append(path, data) end
---@param path string
---@return boolean
function fs.exists(path) end
---@param path string
function fs.remove(path) end
---@param path string
function fs.mkdir(path) end
---@param path string
---@return string[]
function fs.list(path) end
---@class apollo.Stat
---@field size integer
---@field is_dir boolean
---@field mtime integer
---@param path string
---@return apollo.Stat
function fs.stat(path) end
---@param old string
---@param new string
function fs.rename(old, new) end

---@class apollo.ExecResult
---@field code integer        exit status; -1 when killed
---@field stdout string
---@field stderr string
---@field timed_out? boolean
---@field interrupted? boolean

---@class apollo.ExecOptions
---@field timeout? number     seconds
---@field env? table<string,string>
---@field dir? string
---@field stdin? string

---@class apollo.exec
local exec = {}
---Run an argv table (no shell) or a string with /bin/sh -c. Never raises for a non-zero exit.
---@param cmd string|string[]
---@param opts? apollo.ExecOptions
---@return apollo.ExecResult
function exec.run(cmd, opts) end

---@class apollo.HttpResponse
---@field status integer
---@field body string
---@field headers table<string,string>

---@class apollo.HttpRequest
---@field method? string
---@field url string
---@field headers? table<string,string>
---@field body? string
---@field timeout? number seconds, default 30

---@class apollo.http
local http = {}
---@param req apollo.HttpRequest
---@return apollo.HttpResponse
function http.request(req) end
---@param url string
---@param opts? apollo.HttpRequest
---@return apollo.HttpResponse
function http.get(url, opts) end
---@param url string
---@param body string
---@param opts? apollo.HttpRequest
---@return apollo.HttpResponse
function http.post(url, body, opts) end

---@class apollo.json
---@field null any the JSON null value
local json = {}
---Canonical JSON: sorted keys; holes in arrays become null.
---@param v any
---@return string
function json.encode(v) end
---@param s string
---@return any
function json.decode(s) end

---@class apollo.log
local log = {}
---@param ... any
function log.info(...) end
---@param ... any
function log.warn(...) end
---@param ... any
function log.error(...) end

---@class apollo.digest
local digest = {}
---@param s string
---@return string "sha256:<hex>"
function digest.sha256(s) end
---@param path string
---@return string "sha256:<hex>"
function digest.file(path) end

---@class apollo.StepReport
---@field id string
---@field status string
---@field attempts integer
---@field retry_count integer
---@field dirty boolean
---@field last_error string

---@class apollo.MarkerReport
---@field name string
---@field state string

---apollo.state exists only in `apollo script` recovery scripts.
---@class apollo.state
local state = {}
---@return apollo.StepReport[]
function state.steps() end
---@return apollo.MarkerReport[]
function state.markers() end
---The next apollo run runs the step again.
---@param step string
---@param why string
function state.reset(step, why) end
---The next apollo run treats the step as SKIPPED.
---@param step string
---@param why string
function state.skip(step, why) end
---The guarded code of idem.once(name) may run again.
---@param name string
---@param why string
function state.clear_marker(name, why) end
