/*
Package eventlog is apollo's durable record of a task run: an append-only
JSON Lines file that the engine writes and that tail, jq and apollo inspect
read. This comment is the format's specification.

# Files

One task run writes one log, logs/task_<task_id>_<start_unix_seconds>.jsonl
under the state directory. The runner holds logs/task_<task_id>.lock (flock,
with its pid as the file's content) for as long as it runs; the kernel drops
the lock when the process dies, so a killed runner never blocks the next.

A flock holds a file, not a name. The lock file is opened without following
a symbolic link and must be a regular file with one link (else an
UnsafeFileError: a link planted there must not have the pid written through
it); once locked, it must still be the file the name points to, else it was
deleted or replaced meanwhile and the lock is taken again on the new one.
A writer given the task lock (WriterOptions.Lock: the runner's) checks
before every append that the lock file is still its own (one lstat); a lock
file deleted or replaced during the run may have let a second runner in, so
the first stops at its next append with a LockLostError and writes nothing
more: a log never has two runners.

The writer opens the log without following a symbolic link and only if it
is a regular file (the state folder itself may be a link). Whole files —
the log's first record, snapshots, the side files of torn tails — are
written by WriteFileAtomic: a temporary file .<name>.tmp-<random> beside
the file, created exclusively, fsynced, renamed over the name (which
replaces a link there, never its target), and the folder fsynced. A crash
can leave such a temporary file; TempPattern matches them.

# Lines

Each line is one JSON object followed by "\n"; the newline is the only
record terminator (JSON escapes every newline inside strings). The object's
fields, in this order, are always present:

	seq            1, 2, 3 … with no gaps within a log
	timestamp      RFC 3339 with nanoseconds, UTC
	task_id        the task the record belongs to
	step_id        the step, or "" for task-level records
	event_type     TASK_START STEP_START STEP_PROCESS STEP_END CLEANUP MARKER
	               WARNING TASK_SUMMARY DISPATCH LOST NOTIFY_SENDING
	               NOTIFY_SENT NOTIFY_FAILED SLA_MISSED (see Records)
	status         the step's (or the task's) state after this event
	retry_count    the attempt number, 0 for the first
	input_digest   sha256:<hex> of what determines the step's result
	output_digest  sha256:<hex> of the attempt's output
	error_message  why an attempt failed, "" otherwise
	duration_ms    the attempt's (or the invocation's) duration

then optional fields (message, pgid, exit_code, next_delay_ms, interrupted,
timed_out, dirty, output, start, summary, marker, intervention, worker, pool,
src_seq, cached_from, child_log, image, image_id, notify), and last:

	crc            8 lower-case hex digits of the CRC-32C (Castagnoli) of the
	               line as it would read without this field: for a line
	               P,"crc":"hhhhhhhh"} the checksum of P}.

Readers ignore fields and event types they do not know. Order comes from seq,
never from timestamps.

A line is at most MaxLineBytes (64 MiB) long, newline included; a writer
refuses to write a longer one and a reader calls one corruption. The limit is
set by TASK_START, the one record whose size grows with the pipeline: it
names every step, 100 to 150 bytes a step (71 of them the definition
digest), so a 100,000-step pipeline's is 10 to 15 MB and the limit leaves
room for pipelines of several hundred thousand steps. What it carries per step is what
replay and resume need and nothing more (see Records), so it is kept as it
is rather than split across lines: one record stays one line and one fsync.

# Records

Each event type below lists what it sets; the fields not named keep their
zero value ("" or 0), and a reader must not read meaning into them. status
is the step's state after the event (the task's for TASK_START and
TASK_SUMMARY); retry_count is the attempt the event belongs to.

TASK_START opens every invocation of apollo run on the log and makes the log
self-describing. step_id is "", status RUNNING. start holds:

	v                format version (Version, 1)
	task_name        the pipeline's task name
	pipeline         the pipeline file's path, as given
	pipeline_digest  sha256:<hex> of the pipeline file
	steps            every step, in the pipeline's order: id, depends_on
	                 (never null), definition_digest (sha256:<hex> of what
	                 defines the step: a resume compares it to refuse a step
	                 changed since it succeeded), and optional and
	                 has_cleanup, left out when false, and child, the task
	                 id of the sub-pipeline a run: step runs, left out
	                 for other steps, and handler, the handler list
	                 (on_failure, finally) of a handler, left out for
	                 steps of steps:
	vars             the variables, name to value
	pid, host        the runner's process and host
	run_nonce        16 random hex digits, naming this log (a snapshot checks
	                 it)
	invocation       1 for the run that created the log, then 2, 3 …
	durability       the pipeline's default, always or batch (a step may
	                 override it)
	parallelism      how many steps may run at once
	apollo_version   the apollo that wrote it
	pipeline_file    the pipeline file's absolute path (left out by older
	                 versions): with task_name, the pipeline the log
	                 belongs to
	trace_id, span_id the invocation's span when it was traced (left out
	                 otherwise): the task's trace, which a resumed
	                 invocation joins and links to

Per step it holds only what replay and resume need. The first line of a log
is always a TASK_START. A writer refuses a log in which any TASK_START has a
newer v than its own: a newer apollo may have written records whose meaning
this one does not know.

STEP_START (status RUNNING) begins an attempt: step_id, retry_count and
input_digest (sha256:<hex> of what determines the attempt's result: its
rendered body, environment, parameters, upstream outputs' digests and
declared input files). It is fsynced before the attempt's body starts, under
every durability setting, so that a crash never leaves a body that ran
where the log shows none. A run: step's names child_log, the file name of
the log its sub-pipeline task runs in for this attempt. A STEP_START of an
older apollo may carry pgid.

STEP_PROCESS (status RUNNING) names the process group (pgid) of a shell
attempt's body, with the step_id and retry_count of its STEP_START, once
the body's process exists. It is not fsynced on its own: a later fsync
carries it, and if a crash loses it the attempt's processes are still found
by their environment tag. Replay takes its pgid only while the attempt it
names is the step's latest and is still running.

STEP_END closes an attempt, or settles a step this invocation does not run.
status is SUCCESS; FAILED; RUNNING when the attempt failed and will be
retried after next_delay_ms; or SKIPPED. It carries the attempt's
retry_count, input_digest, output_digest (sha256:<hex> of the attempt's
output: a shell body's stdout, a Lua body's returned value), duration_ms,
and where they apply: error_message (why the attempt failed), exit_code
(the body's exit status when not 0: 1 for a failed Lua body, -1 when the
body never started or a signal killed it), timed_out and interrupted (how
it was ended: its timeout, or a signal to apollo), message (what the
attempt's output lost to the output limit) and output (a succeeded step's
published value, JSON). A step whose result came from the cache has a
STEP_END SUCCESS with no STEP_START: cached_from names the task run that
made the result, output and output_digest are that run's, input_digest
this run's. A step skipped or failed without
running (not part of a resume_from; a crash loop) has a STEP_END with only
its status, its last retry_count and error_message saying why.

CLEANUP records what was done before a step runs again after an attempt
that failed or was cut off: the step_id and the retry_count of that
attempt; dirty when a crash cut the attempt off; message saying what
happened (the cut-off attempt, leftover processes ended, the cleanup hook's
outcome, or that there is none); duration_ms and exit_code (when not 0) of
the hook. Its status is PENDING when the step may run again, FAILED (with
error_message) when the hook failed: the step is not run again, its state
being unknown.

MARKER records an idempotency marker's change by a step's attempt (step_id,
retry_count, status RUNNING): marker.name, marker.state (pending before the
guarded code runs, done after it, cleared when it failed or its result was
disowned) and marker.result (the guarded code's result, JSON, when done). A
MARKER is fsynced before the code it guards runs.

WARNING carries a human message and, when it changes replayed state, an
intervention: action, steps, marker, why and by (who: "apollo run",
"apollo" or user@host for apollo script). The actions: resume_from (steps:
the step resumed from, then its descendants), accept_changes (steps: the
changed steps whose results are kept), reset and skip (steps: one step,
which then runs again or counts as SKIPPED), clear_marker (marker), and
torn_tail (informational: a torn tail was cut). step_id names the step of a
reset or skip, else it is "". status is RUNNING.

DISPATCH (status RUNNING) says attempt retry_count of the step was handed to
a hub (apollo run --hub): pool names the pool, input_digest the attempt's
inputs. It is fsynced before the attempt's message is published, so an
attempt that may run always has a record. From DISPATCH on the attempt is
dirty until a STEP_END, a LOST or a CLEANUP ends it; the STEP_START that
follows for the same attempt does not count it again.

LOST (status RUNNING) says a dispatched attempt's worker went silent past the
liveness deadline (the hub redelivered its message): the attempt is dirty, as
if a crash had cut it off. A CLEANUP with dirty: true follows before the next
attempt, and these count toward max_dirty_restarts.

NOTIFY_SENDING, NOTIFY_SENT and NOTIFY_FAILED record one notification
(docs/spec.md §2.13): notify holds its id, event, target and, on
NOTIFY_SENDING only, the payload sent; step_id and retry_count name the
step's attempt ("" and 0 for the task's events). NOTIFY_SENDING is fsynced
before the notification goes; one without a later NOTIFY_SENT or
NOTIFY_FAILED of its id is sent again by the next run. Replay changes no
step for them: State.Notifications keeps each id's last record. SLA_MISSED
(status RUNNING) says the task missed its sla; State.SLAMissed remembers it.

Records derived from the hub's events (STEP_START, STEP_END, LOST, MARKER and
WARNING of a remote attempt) carry src_seq, the event's sequence in the hub's
event stream, strictly increasing within a log: a restarted coordinator
ingests the events after the last src_seq it recorded. A remote STEP_START
carries worker, the host and pid that ran it.

TASK_SUMMARY closes an invocation: status SUCCESS when the task is
complete, PENDING when a run of apollo run --only or --until did what it was
asked and left other steps, else FAILED; duration_ms, the invocation's; error_message why it
is not complete; and summary: counts (steps per state), failed and
failed_optional (the steps that failed, required or optional), blocked
(steps not run because a required dependency failed) and interrupted (a
signal stopped the run).
summary.fsync is what the invocation's fsyncs of the log cost, up to the
summary: {count, total_us, max_us} (microseconds); apollo serve exports it as
the log fsync latency. Older logs lack it.

# Replay

A step's state is the status of its last record. A step whose last attempt
record is a STEP_START is dirty: a crash cut it off. See Replay.

# Durability

With durability always every record is fsynced before the engine goes on;
parallel steps share fsyncs (group commit). With batch, records may share a
later fsync, but a STEP_START is durable before its body starts, a STEP_END
before any dependent step starts, and a MARKER before the code it guards.
A log is created with its first record (its TASK_START) already durable,
by WriteFileAtomic: a crash during creation leaves no log, only a temporary
file, which no reader looks at. A failed write or fsync is final: the
writer refuses every later append (see WriteError), and says which record is
the last known to be on disk.

An fsync of the log is fdatasync(2) on Linux (the data, and the size needed
to read it back). Elsewhere it is the file's Sync, which on macOS is
fcntl(F_FULLFSYNC): macOS's fsync(2) leaves the data in the drive's cache,
which a power loss empties, so a STEP_START could vanish with the attempt
it records. F_FULLFSYNC costs more; group commit shares each among the
records of parallel steps.

# Damage

A torn tail — a last line without its newline, or damaged bytes at the end
in which no line decodes as a record, at most MaxTornTail (MaxLineBytes and
4 KiB) long, so that a crash while writing the longest TASK_START still
counts — is what a crash mid-write leaves. So is what a power cut leaves of
unsynced appends persisted out of order: zeros from the last good record to
a block boundary, the rest of that line, then only this task's records later
than the next (classifyTail). Readers ignore it. The next
writer cuts it under the flock, after saving the bytes to
<log>.torn-<offset> (by WriteFileAtomic), and appends a WARNING saying so.
Anything else — a damaged line followed by good ones, a checksum mismatch
in the middle, a gap in seq, a record of another task, a first line that is
not a TASK_START — is corruption: a CorruptError naming the file and line,
and nothing is written. So is a line, even the last, that is two good
records run together where the newline between them was damaged: a crash
never leaves that, since a record and its newline are written together.

When no line of a log is good, only a single line can be torn: a log made
by this writer begins with a durable record, and one created empty (by an
older writer, or without a first record) has its first record fsynced before
anything else is written, so a crash can cut only that one. Several lines with no good one (a file converted to CR LF line ends,
one with a byte order mark, someone else's file) is corruption: a writer will
not cut away a whole file it cannot recognise. A cut first record leaves an
empty log after the repair, with no WARNING, since a log must begin with a
TASK_START; the side file is the record of that repair.

# Writers

Every append takes the log's flock, so lines of the runner and of apollo
script never interleave. Inside the lock a writer first reads what other
processes appended, so seq stays contiguous; a writer given the task lock
also checks that the lock is still its own (see Files); apollo script holds
no task lock. One Writer per process and log.
*/
package eventlog
