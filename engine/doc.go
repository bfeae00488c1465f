// Package engine runs a pipeline's task as a resumable DAG over its event
// log: it plans what a run must do from the log alone (keep, clean and
// rerun, rerun, skip), schedules steps in parallel with retries and
// timeouts, hands their bodies to executors, records every attempt durably,
// writes snapshots and tells package progress what happens. It is built in
// main with its options; nothing in it is global.
//
// The packages under engine/ each have one job, and their imports point one
// way: down this list, never up (TestImportArrows checks these lines
// against the code).
//
//	engine     → cache, clock, container, executor, markers, notify, pipeline, progress, remote, statedir, template, textfmt, trace, usage; eventlog, luart
//	history    → pipeline, statedir, textfmt, usage; eventlog
//	worker     → container, executor, remote, textfmt, trace; stdlib
//	hub        → listen, remote
//	hubtest    → hub, remote, statedir; eventlog
//	hubview    → remote, statedir; eventlog
//	remote     → pipeline; luart
//	completion → pipeline, usage
//	cron       → clock, pipeline, statedir; eventlog
//	web        → cron, history, intervene, pipeline, statedir, template, textfmt; eventlog
//	recovery   → clock, intervene, markers, pipeline, statedir, usage; eventlog, luart, stdlib
//	intervene  → pipeline; eventlog
//	container  → executor, pipeline
//	executor   → luaproc, pipeline, textfmt; luart, stdlib
//	markers    → eventlog, stdlib
//	pipeline   → statedir, template, usage; luart, stdlib
//	statedir   → eventlog
//	cache      → eventlog
//	luaproc    → (nothing of apollo)
//	notify     → (nothing of apollo)
//	template   → (nothing of apollo)
//	clock      → (nothing of apollo)
//	progress   → clock, textfmt
//	textfmt    → (nothing of apollo)
//	listen     → (nothing of apollo)
//	usage      → (nothing of apollo)
//	trace      → (nothing of apollo)
//	e2e        → (nothing of apollo: its tests drive the built binary)
//	nemesis    → eventlog
//
// What each holds: engine the scheduler and everything of one run (plan,
// digests, snapshots, progress, summary, the child tasks of sub-pipelines); history the read-only views
// (inspect, list, logs, graph) and gc; completion shell completion scripts;
// cron apollo serve's schedules, triggers and its schedule log; web apollo serve's
// pages, API, live updates and metrics; intervene the manual interventions
// apollo script and apollo serve append;
// executor the shell and Lua executors behind one seam; container the
// run of a command step's body in a container of its image, for a local
// run and for a worker; luaproc the pool of
// Lua processes, each job under a hard memory limit; markers a task's
// idempotency markers; remote the names, messages and deadline-bounded
// client that a coordinator and its workers share through the hub; worker
// apollo worker; hub an embedded hub node; hubtest hub clusters for tests; hubview the copy of the hub's task logs that apollo serve --hub shows;
// pipeline the pipeline language; statedir the state
// folder's files; cache the store of cached step results (cache: true);
// template the {{name}} renderer; clock the injected time;
// textfmt what people read; progress the board and the line reporter of apollo run; e2e the end-to-end tests; trace the OpenTelemetry spans of runs, exported over OTLP; nemesis the randomized fault schedule over real processes and its checker; listen the rule a listening address follows (loopback, or
// credentials); usage the command-line error. Outside engine/,
// eventlog (the log format), luart (the Lua sandbox), stdlib (apollo.*
// modules) and scripts (bundled Lua modules) import nothing of engine.
package engine
