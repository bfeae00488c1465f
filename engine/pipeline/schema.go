package pipeline

// Schema returns a JSON Schema (draft 2020-12) of the pipeline
// file, for editors: `apollo schema > pipeline.schema.json`, then
// `# yaml-language-server: $schema=./pipeline.schema.json` at the top of a
// pipeline. It describes every key the loader accepts, with its type,
// bounds and choices, and the shape rules a schema can hold (exactly one
// body, at most one cleanup hook, Lua-only keys). What it cannot hold —
// unknown template variables, dependencies on missing steps, cycles — only
// apollo validate finds. A test keeps it in step with the loader.
func Schema() []byte { return []byte(pipelineSchema) }

// The integer bounds mirror load.go: maxRetryCount, maxSeconds,
// maxMemoryMB, math.MaxInt32 and maxStepIDLen.
const pipelineSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "apollo pipeline",
  "description": "A pipeline for apollo run: steps and their dependencies, run as a resumable DAG.",
  "type": "object",
  "required": ["task_name", "steps"],
  "additionalProperties": false,
  "properties": {
    "task_name": {
      "description": "Names the pipeline; the task id defaults to <task_name>-<task_date>.",
      "$ref": "#/$defs/name",
      "pattern": "^[A-Za-z0-9_.-]+$"
    },
    "max_retries": {
      "description": "Retries per invocation (default 0); a step may override. Needs a retry_policy.",
      "$ref": "#/$defs/retries"
    },
    "retry_delay_seconds": {
      "description": "Base delay for fixed and exponential retries (default 10).",
      "$ref": "#/$defs/seconds"
    },
    "max_retry_delay_seconds": {
      "description": "Cap on the retry delay (default: none).",
      "$ref": "#/$defs/seconds"
    },
    "parallelism": {
      "description": "Most steps running at once (default: the CPU count).",
      "type": "integer", "minimum": 1, "maximum": 2147483647
    },
    "durability": {
      "description": "always: every record is fsynced; batch: records share fsyncs (group commit). A step may override.",
      "$ref": "#/$defs/durability"
    },
    "vars": {
      "description": "Template variables and their defaults; --var k=v overrides.",
      "type": ["object", "null"],
      "propertyNames": {
        "pattern": "^[A-Za-z_][A-Za-z0-9_]*$",
        "not": {"enum": ["task_id", "task_name", "step_id", "artifacts_dir", "state_dir"]}
      },
      "additionalProperties": {"$ref": "#/$defs/text"}
    },
    "resume_from": {
      "description": "Run this step and its descendants again once; skip other unfinished steps.",
      "$ref": "#/$defs/nonEmpty"
    },
    "max_dirty_restarts": {
      "description": "A step cut off by a crash in this many runs in a row fails with \"crash loop\" (default 3).",
      "type": "integer", "minimum": 1, "maximum": 2147483647
    },
    "max_instances": {
      "description": "The most instances one foreach or matrix step makes (default 10000).",
      "type": "integer", "minimum": 1, "maximum": 1000000
    },
    "max_steps": {
      "description": "The most steps the pipeline has once its foreach and matrix steps are expanded (default 100000).",
      "type": "integer", "minimum": 1, "maximum": 1000000
    },
    "modules": {
      "description": "Extra Lua module folders, relative to the pipeline file.",
      "type": ["array", "null"],
      "items": {"$ref": "#/$defs/localPath"}
    },
    "isolation": {
      "description": "process: run every Lua step in a fresh worker process of its own (the default pools them).",
      "enum": ["", "process"]
    },
    "resources": {
      "description": "Named resources and how many steps may hold each at once; a step holds them with uses_resource.",
      "type": ["object", "null"],
      "propertyNames": {"pattern": "^[A-Za-z0-9_.-]+$"},
      "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 2147483647}
    },
    "env_file": {
      "description": "A dotenv file (or a list), relative to the pipeline file: NAME=VALUE lines, every step's environment under env:.",
      "oneOf": [{"$ref": "#/$defs/nonEmpty"}, {"type": "array", "items": {"$ref": "#/$defs/nonEmpty"}}]
    },
    "secrets": {
      "description": "Secrets given to every step as environment variables (ctx.secrets in Lua), never written: a list of names read from apollo's environment or else the env_file: files, or a mapping of names to env, {env: VAR}, {file: PATH} or {command: CMD}.",
      "oneOf": [
        {"type": "array", "uniqueItems": true, "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}},
        {"type": ["object", "null"],
         "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
         "additionalProperties": {
           "oneOf": [
             {"const": "env"},
             {"type": "object", "additionalProperties": false, "minProperties": 1, "maxProperties": 1,
              "properties": {"env": {"$ref": "#/$defs/nonEmpty"}, "file": {"$ref": "#/$defs/nonEmpty"}, "command": {"$ref": "#/$defs/nonEmpty"}}}
           ]
         }}
      ]
    },
    "secret_vars": {
      "description": "Vars whose values apollo masks as *** wherever it prints or records them.",
      "type": ["array", "null"],
      "items": {"type": "string"}
    },
    "defaults": {
      "description": "Settings every step gets unless it sets its own.",
      "type": ["object", "null"],
      "additionalProperties": false,
      "properties": {
        "retry_policy": {"$ref": "#/$defs/retryPolicy"},
        "max_retries": {"$ref": "#/$defs/retries"},
        "timeout_seconds": {"$ref": "#/$defs/seconds"},
        "env": {"$ref": "#/$defs/env"},
        "memory_mb": {"$ref": "#/$defs/memoryMB"},
        "working_dir": {"$ref": "#/$defs/workingDir"},
        "allow": {"$ref": "#/$defs/allow"},
        "shell": {"$ref": "#/$defs/shell"},
        "image": {"$ref": "#/$defs/image"}
      },
      "if": {"required": ["max_retries"], "properties": {"max_retries": {"minimum": 1}}},
      "then": {"required": ["retry_policy"]}
    },
    "env": {
      "description": "Environment variables of every step (a step's env: adds to them).",
      "$ref": "#/$defs/env"
    },
    "working_dir": {
      "description": "Where shell steps run, relative to the pipeline file's folder (default: the folder apollo runs in).",
      "$ref": "#/$defs/workingDir"
    },
    "container": {
      "description": "The OCI engine that runs image: steps (default: $APOLLO_CONTAINER_ENGINE, else podman).",
      "type": ["object", "null"], "additionalProperties": false,
      "properties": {"engine": {"enum": ["podman", "docker"]}}
    },
    "schedule": {
      "description": "When apollo serve runs the pipeline: a cron expression (minute hour day-of-month month day-of-week, or @daily, @hourly, ...) or a mapping.",
      "oneOf": [
        {"type": "string", "pattern": "\\S"},
        {
          "type": "object",
          "required": ["cron"],
          "additionalProperties": false,
          "properties": {
            "cron": {"description": "Five fields or an @ shorthand, read in timezone.", "type": "string", "pattern": "\\S"},
            "timezone": {"description": "IANA time zone name (default UTC); task_date is the date there.", "type": "string", "pattern": "\\S"},
            "catchup": {"description": "Scheduled times missed while apollo serve was down: none, latest (default) or all.", "enum": ["none", "latest", "all"]},
            "catchup_limit": {"description": "With catchup: all, the most missed times run (default 10).", "type": "integer", "minimum": 1, "maximum": 10000},
            "overlap": {"description": "A time that comes while a run of the pipeline goes on: skip (default) or queue.", "enum": ["skip", "queue"]}
          }
        }
      ]
    },
    "notify": {"description": "Who is told of the task's events: failure, success, recovered, sla_missed (and every step's retry).", "$ref": "#/$defs/notify"},
    "sla": {"description": "How long after the task's first start it should be complete (a duration: 30m, 2h); past it, sla_missed is raised once.", "type": "string", "pattern": "^([0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"},
    "triggers": {
      "description": "What besides the schedule makes apollo serve start the pipeline: each entry one of after:, file: or webhook:.",
      "type": ["array", "null"],
      "items": {
        "type": "object",
        "additionalProperties": false,
        "oneOf": [{"required": ["after"]}, {"required": ["file"]}, {"required": ["webhook"]}],
        "properties": {
          "after": {"description": "A pipeline file (relative to this one's folder): a run of it that ends with status starts this one; {{trigger.task_id}} and {{trigger.outputs.STEP.KEY}} tell of it.", "type": "string", "pattern": "\\.ya?ml$"},
          "status": {"description": "With after: which ends of the upstream run start this one: success (default), failure or any.", "enum": ["success", "failure", "any"]},
          "file": {"description": "A glob (relative to this pipeline's folder, or absolute; wildcards in the file name only): each new or changed file starts a run, {{trigger.path}} naming it.", "type": "string", "pattern": "\\S"},
          "settle_seconds": {"description": "With file: how long a file's size and modification time must stay the same before it counts as written (default 2).", "type": "number", "minimum": 0},
          "webhook": {"description": "A hook name: POST /hooks/NAME on apollo serve, signed with X-Hub-Signature-256, starts a run.", "type": "string", "pattern": "^[A-Za-z0-9_-]+$"},
          "secret": {"description": "With webhook: the entry of secrets: whose value signs deliveries (HMAC-SHA256).", "type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
          "vars": {"description": "With webhook: each var (declared under vars:) and the JSON path ($.ref, $.commits[0].id) of the payload field it takes.", "type": "object", "additionalProperties": {"type": "string", "pattern": "^\\$"}}
        }
      }
    },
    "steps": {
      "description": "The steps of the DAG.",
      "type": "array",
      "minItems": 1,
      "items": {"$ref": "#/$defs/step"}
    },
    "on_failure": {
      "description": "Steps that run once every step has settled, when the task failed (ctx.failed, $APOLLO_FAILED_STEPS); optional, depending only on each other.",
      "type": ["array", "null"],
      "items": {"$ref": "#/$defs/step"}
    },
    "finally": {
      "description": "Steps that always run once every step (and on_failure) has settled; optional, depending only on each other.",
      "type": ["array", "null"],
      "items": {"$ref": "#/$defs/step"}
    }
  },
  "$defs": {
    "notify": {
      "type": ["array", "null"],
      "items": {
        "type": "object", "additionalProperties": false, "required": ["on"],
        "properties": {
          "on": {"type": "array", "minItems": 1, "uniqueItems": true, "items": {"enum": ["failure", "success", "retry", "recovered", "sla_missed"]}},
          "webhook": {"description": "A URL that gets a JSON POST with a Slack-compatible text field and the event's fields.", "type": "string", "pattern": "^https?://[^/?#]+"},
          "email": {
            "type": "object", "additionalProperties": false, "required": ["to", "smtp"],
            "properties": {
              "to": {"type": "array", "minItems": 1, "items": {"type": "string", "pattern": "@"}},
              "smtp": {"description": "HOST:PORT of the SMTP server (STARTTLS when offered).", "type": "string", "pattern": "^.*:[0-9]+$"},
              "from": {"$ref": "#/$defs/nonEmpty"},
              "user": {"$ref": "#/$defs/nonEmpty"},
              "password_secret": {"description": "A secret of secrets: holding the SMTP password.", "$ref": "#/$defs/nonEmpty"}
            },
            "if": {"required": ["password_secret"]}, "then": {"required": ["user"]}
          }
        },
        "oneOf": [{"required": ["webhook"]}, {"required": ["email"]}]
      }
    },
    "image": {
      "description": "Run this command step in a container of the image: NAME[:TAG|@DIGEST], or {name, pull, mounts, user, cpus, memory, network}.",
      "oneOf": [
        {"$ref": "#/$defs/imageName"},
        {"type": "object", "additionalProperties": false, "required": ["name"], "properties": {
          "name": {"$ref": "#/$defs/imageName"},
          "pull": {"enum": ["missing", "always", "never"]},
          "mounts": {"type": ["array", "null"], "items": {"type": "string", "pattern": "^[^:]+:/[^:]*(:(rw|ro|outside)(,(rw|ro|outside))*)?$"}},
          "user": {"type": "string", "pattern": "^[A-Za-z0-9_][A-Za-z0-9_.-]*(:[A-Za-z0-9_][A-Za-z0-9_.-]*)?$"},
          "cpus": {"type": ["number", "string"]},
          "memory": {"type": ["string", "integer"], "pattern": "^[0-9]+[bkmgBKMG]?$"},
          "network": {"enum": ["none", "host", "default"]}
        }}
      ]
    },
    "imageName": {"type": "string", "maxLength": 255, "pattern": "^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?(/[a-z0-9._-]+)*(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$"},
    "text": {
      "description": "A string (a number or a boolean keeps its text).",
      "type": ["string", "number", "boolean"]
    },
    "nonEmpty": {
      "type": ["string", "number", "boolean"],
      "pattern": "\\S"
    },
    "cachePaths": {
      "type": ["array", "null"],
      "uniqueItems": true,
      "items": {"type": "string", "pattern": "^[^/\\\\]", "minLength": 1}
    },
    "name": {
      "type": ["string", "number", "boolean"],
      "minLength": 1
    },
    "retries": {"type": "integer", "minimum": 0, "maximum": 10000},
    "retryPolicy": {"description": "none (default), fixed or exponential.", "enum": ["none", "fixed", "exponential"]},
    "memoryMB": {"description": "Memory bound of a Lua step (default 256).", "type": "integer", "minimum": 1, "maximum": 1048576},
    "workingDir": {"description": "A folder, relative to the pipeline file's folder.", "$ref": "#/$defs/nonEmpty"},
    "shell": {
      "description": "The interpreter of shell bodies: sh (default: /bin/sh -c with set -e, and pipefail where sh has it), bash (bash -e -o pipefail -c), or a command line that gets the body as its last argument, as written (\"sh -c\" for plain sh, \"python3 -c\", [bash, -eu, -c]).",
      "oneOf": [
        {"type": "string", "pattern": "^\\s*(sh|bash)\\s*$"},
        {"type": "string", "pattern": "\\S\\s+\\S"},
        {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/nonEmpty"}}
      ]
    },
    "allow": {
      "description": "Capabilities a Lua step gets beyond fs, idem, json, log and digest: exec, and http (any host, or {http: [hosts]}, *.example.com for a domain).",
      "type": ["array", "null"],
      "uniqueItems": true,
      "items": {"oneOf": [
        {"enum": ["exec", "http"]},
        {"type": "object", "additionalProperties": false, "required": ["http"],
         "properties": {"http": {"type": "array", "items": {"$ref": "#/$defs/nonEmpty"}}}}
      ]}
    },
    "env": {
      "description": "Environment variables. Templates: {{name}}.",
      "type": ["object", "null"],
      "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
      "additionalProperties": {"$ref": "#/$defs/text"}
    },
    "seconds": {"type": "number", "minimum": 0, "maximum": 1000000000},
    "durability": {"enum": ["always", "batch"]},
    "localPath": {
      "type": ["string", "number", "boolean"],
      "pattern": "^[^/\\\\]",
      "not": {"type": "string", "pattern": "^\\.\\.(/|$)"}
    },
    "luaFile": {
      "allOf": [{"$ref": "#/$defs/localPath"}],
      "type": "string",
      "pattern": "\\.lua$"
    },
    "step": {
      "type": "object",
      "required": ["id"],
      "additionalProperties": false,
      "properties": {
        "id": {
          "description": "Unique; names output files.",
          "$ref": "#/$defs/name",
          "pattern": "^[A-Za-z0-9_-]+$",
          "maxLength": 128
        },
        "command": {"description": "A shell command, run by /bin/sh -c with set -e (see shell) in the workspace. Templates: {{name}}.", "$ref": "#/$defs/nonEmpty"},
        "lua": {"description": "An inline Lua body; its return value is the step's output.", "$ref": "#/$defs/nonEmpty"},
        "script": {"description": "A .lua file, relative to the pipeline file.", "$ref": "#/$defs/luaFile"},
        "uses": {
          "description": "A Lua step module: the pipeline's modules folders, then the bundled ones.",
          "type": ["string", "number", "boolean"],
          "pattern": "^[A-Za-z0-9_]+(\\.[A-Za-z0-9_]+)*$"
        },
        "run": {
          "description": "A sub-pipeline: a pipeline file, relative to this one's folder, run as a task of its own (task id <task id>~<step id>, its own log); with: sets its vars.",
          "allOf": [{"$ref": "#/$defs/localPath"}],
          "type": "string",
          "pattern": "\\.ya?ml$"
        },
        "with": {"description": "Parameters for a Lua step (ctx.params); for a run step, variables of the sub-pipeline.", "type": ["object", "null"]},
        "depends_on": {
          "description": "Ids of the steps that must end first.",
          "type": ["array", "null"],
          "uniqueItems": true,
          "items": {"$ref": "#/$defs/text"}
        },
        "optional": {"description": "Its failure is reported, not fatal; its dependents still run.", "type": "boolean"},
        "timeout_seconds": {"description": "Per attempt; 0 or absent: none.", "$ref": "#/$defs/seconds"},
        "retry_policy": {"$ref": "#/$defs/retryPolicy"},
        "max_retries": {"$ref": "#/$defs/retries"},
        "durability": {"$ref": "#/$defs/durability"},
        "cleanup_command": {"description": "Runs before a failed or cut-off attempt is run again.", "$ref": "#/$defs/nonEmpty"},
        "cleanup_lua": {"$ref": "#/$defs/nonEmpty"},
        "cleanup_script": {"$ref": "#/$defs/luaFile"},
        "env": {"$ref": "#/$defs/env"},
        "memory_mb": {"$ref": "#/$defs/memoryMB"},
        "isolation": {"description": "Lua steps run in pooled worker processes with a hard memory limit; process: a fresh worker of its own; inprocess: in the runner, without a hard bound.", "enum": ["", "inprocess", "process"]},
        "working_dir": {"description": "Where this shell step runs, relative to the pipeline file's folder.", "$ref": "#/$defs/workingDir"},
        "shell": {"$ref": "#/$defs/shell"},
        "uses_resource": {
          "description": "A resource (or a list) the step holds while it runs; declared under resources.",
          "oneOf": [{"$ref": "#/$defs/nonEmpty"}, {"type": "array", "uniqueItems": true, "items": {"$ref": "#/$defs/nonEmpty"}}]
        },
        "foreach": {
          "description": "Make the step a template of instances, one per item: a list, {var: NAME} (a var listing the items, separated by commas or spaces) or {output: STEP} (an upstream output that is a list; STEP.KEY for a key of it).",
          "oneOf": [
            {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/nonEmpty"}},
            {"type": "object", "additionalProperties": false, "required": ["var"], "properties": {"var": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"}}},
            {"type": "object", "additionalProperties": false, "required": ["output"], "properties": {"output": {"$ref": "#/$defs/nonEmpty"}}}
          ]
        },
        "matrix": {
          "description": "Make the step a template of instances, one per combination of these lists ({{item.NAME}}).",
          "type": "object",
          "minProperties": 1,
          "propertyNames": {"pattern": "^[A-Za-z0-9_-]+$"},
          "additionalProperties": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/nonEmpty"}}
        },
        "exclude": {
          "description": "Combinations of the matrix left out.",
          "type": ["array", "null"],
          "items": {"type": "object", "additionalProperties": {"$ref": "#/$defs/text"}}
        },
        "allow": {"$ref": "#/$defs/allow"},
        "image": {"$ref": "#/$defs/image"},
        "when": {"description": "A Lua expression over ctx.vars, ctx.outputs and ctx.status, evaluated when the step is ready: false skips it.", "$ref": "#/$defs/nonEmpty"},
        "notify": {"description": "Who is told of this step's events: failure, success, retry, recovered.", "$ref": "#/$defs/notify"},
        "pool": {"description": "With apollo run --hub: the worker pool that runs the step (default: default, or --pool).", "$ref": "#/$defs/name", "pattern": "^[A-Za-z0-9_-]+$", "maxLength": 128},
        "cache": {
          "description": "Reuse the result of an earlier successful run of this pipeline whose inputs were the same (body, env, with, upstream outputs, inputs files): true, or {key: extra text in the cache key, paths: files saved and restored like outputs}.",
          "oneOf": [
            {"type": "boolean"},
            {"type": "object", "additionalProperties": false, "properties": {
              "key": {"$ref": "#/$defs/nonEmpty"},
              "paths": {"$ref": "#/$defs/cachePaths"}
            }}
          ]
        },
        "inputs": {"description": "With cache: files (relative to where the step runs) whose content is part of the cache key.", "$ref": "#/$defs/cachePaths"},
        "outputs": {"description": "With cache: files (relative to where the step runs) the step makes; saved with its result and restored when it comes from the cache.", "$ref": "#/$defs/cachePaths"}
      },
      "oneOf": [
        {"required": ["command"]},
        {"required": ["lua"]},
        {"required": ["script"]},
        {"required": ["uses"]},
        {"required": ["run"]}
      ],
      "not": {
        "anyOf": [
          {"required": ["cleanup_command", "cleanup_lua"]},
          {"required": ["cleanup_command", "cleanup_script"]},
          {"required": ["cleanup_lua", "cleanup_script"]}
        ]
      },
      "allOf": [
        {
          "if": {"required": ["command"]},
          "then": {"not": {"anyOf": [{"required": ["with"]}, {"required": ["memory_mb"]}, {"required": ["isolation"]}, {"required": ["allow"]}]}}
        },
        {
          "if": {"not": {"required": ["command"]}},
          "then": {"not": {"required": ["image"]}}
        },
        {
          "if": {"required": ["run"]},
          "then": {
            "not": {"anyOf": [{"required": ["env"]}, {"required": ["memory_mb"]}, {"required": ["isolation"]}, {"required": ["allow"]},
              {"required": ["working_dir"]}, {"required": ["cleanup_command"]}, {"required": ["cleanup_lua"]}, {"required": ["cleanup_script"]}]},
            "properties": {"with": {"type": ["object", "null"], "additionalProperties": {"type": ["string", "number", "boolean"]}}}
          }
        },
        {
          "if": {"required": ["shell"]},
          "then": {"anyOf": [{"required": ["command"]}, {"required": ["cleanup_command"]}]}
        },
        {
          "if": {"required": ["working_dir"]},
          "then": {"not": {"anyOf": [{"required": ["lua"]}, {"required": ["script"]}, {"required": ["uses"]}]}}
        }
      ]
    }
  },
  "allOf": [
    {
      "if": {"not": {"required": ["defaults"], "properties": {"defaults": {"type": "object", "required": ["retry_policy"]}}}},
      "then": {"properties": {"steps": {"items": {
        "if": {"required": ["max_retries"], "properties": {"max_retries": {"minimum": 1}}},
        "then": {"required": ["retry_policy"]}
      }}}}
    }
  ]
}
`
