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
    "modules": {
      "description": "Extra Lua module folders, relative to the pipeline file.",
      "type": ["array", "null"],
      "items": {"$ref": "#/$defs/localPath"}
    },
    "isolation": {
      "description": "process: run every Lua step in a child apollo process with a hard memory limit.",
      "enum": ["", "process"]
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
    "steps": {
      "description": "The steps of the DAG.",
      "type": "array",
      "minItems": 1,
      "items": {"$ref": "#/$defs/step"}
    }
  },
  "$defs": {
    "text": {
      "description": "A string (a number or a boolean keeps its text).",
      "type": ["string", "number", "boolean"]
    },
    "nonEmpty": {
      "type": ["string", "number", "boolean"],
      "pattern": "\\S"
    },
    "name": {
      "type": ["string", "number", "boolean"],
      "minLength": 1
    },
    "retries": {"type": "integer", "minimum": 0, "maximum": 10000},
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
        "command": {"description": "A shell command, run by /bin/sh -c in the workspace. Templates: {{name}}.", "$ref": "#/$defs/nonEmpty"},
        "lua": {"description": "An inline Lua body; its return value is the step's output.", "$ref": "#/$defs/nonEmpty"},
        "script": {"description": "A .lua file, relative to the pipeline file.", "$ref": "#/$defs/luaFile"},
        "uses": {
          "description": "A Lua step module: the pipeline's modules folders, then the bundled ones.",
          "type": ["string", "number", "boolean"],
          "pattern": "^[A-Za-z0-9_]+(\\.[A-Za-z0-9_]+)*$"
        },
        "with": {"description": "Parameters for a Lua step (ctx.params).", "type": ["object", "null"]},
        "depends_on": {
          "description": "Ids of the steps that must end first.",
          "type": ["array", "null"],
          "uniqueItems": true,
          "items": {"$ref": "#/$defs/text"}
        },
        "optional": {"description": "Its failure is reported, not fatal; its dependents still run.", "type": "boolean"},
        "timeout_seconds": {"description": "Per attempt; 0 or absent: none.", "$ref": "#/$defs/seconds"},
        "retry_policy": {"description": "none (default), fixed or exponential.", "enum": ["none", "fixed", "exponential"]},
        "max_retries": {"$ref": "#/$defs/retries"},
        "durability": {"$ref": "#/$defs/durability"},
        "cleanup_command": {"description": "Runs before a failed or cut-off attempt is run again.", "$ref": "#/$defs/nonEmpty"},
        "cleanup_lua": {"$ref": "#/$defs/nonEmpty"},
        "cleanup_script": {"$ref": "#/$defs/luaFile"},
        "env": {
          "description": "Environment variables of the step. Templates: {{name}}.",
          "type": ["object", "null"],
          "propertyNames": {"pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},
          "additionalProperties": {"$ref": "#/$defs/text"}
        },
        "memory_mb": {"description": "Memory bound of a Lua step (default 256).", "type": "integer", "minimum": 1, "maximum": 1048576},
        "isolation": {"description": "process: run this Lua step in a child apollo process.", "enum": ["", "inprocess", "process"]}
      },
      "oneOf": [
        {"required": ["command"]},
        {"required": ["lua"]},
        {"required": ["script"]},
        {"required": ["uses"]}
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
          "then": {"not": {"anyOf": [{"required": ["with"]}, {"required": ["memory_mb"]}, {"required": ["isolation"]}]}}
        },
        {
          "if": {"required": ["max_retries"], "properties": {"max_retries": {"minimum": 1}}},
          "then": {"required": ["retry_policy"]}
        }
      ]
    }
  }
}
`
