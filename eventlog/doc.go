/*
Package eventlog is apollo's durable record of a task run: an append-only
JSON Lines file that the engine writes and that tail, jq and apollo inspect
read. This comment is the format's specification.

# Files

One task run writes one log, logs/task_<task_id>_<start_unix_seconds>.jsonl
under the state directory. The runner holds logs/task_<task_id>.lock (flock,
with its pid as the file's content) for as long as it runs; the kernel drops
the lock when the process dies, so a killed runner never blocks the next.

# Lines

Each line is one JSON object followed by "\n"; the newline is the only
record terminator (JSON escapes every newline inside strings). The object's
fields, in this order, are always present:

	seq            1, 2, 3 … with no gaps within a log
	timestamp      RFC 3339 with nanoseconds, UTC
	task_id        the task the record belongs to
	step_id        the step, or "" for task-level records
	event_type     TASK_START STEP_START STEP_END CLEANUP MARKER WARNING TASK_SUMMARY
	status         the step's (or the task's) state after this event
	retry_count    the attempt number, 0 for the first
	input_digest   sha256:<hex> of what determines the step's result
	output_digest  sha256:<hex> of the attempt's output
	error_message  why an attempt failed, "" otherwise
	duration_ms    the attempt's (or the invocation's) duration

then optional fields (message, pgid, exit_code, next_delay_ms, interrupted,
timed_out, dirty, output, start, summary, marker, intervention), and last:

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

TASK_START opens every invocation of apollo run on the log and makes the log
self-describing: start.v (format version, 1), the pipeline's path and digest,
every step's id, depends_on, optional flag and definition digest, the
variables, pid, host, a random run_nonce, the invocation number, durability
and parallelism. Per step it holds only the id, the edges, the definition
digest (which tells a resume that a step changed) and the optional and
has_cleanup flags, which are left out when false. The first line of a log
is always a TASK_START. A writer refuses a log in which any TASK_START has a
newer start.v than its own: a newer apollo may have written records whose
meaning this one does not know.

STEP_START (status RUNNING) is written and fsynced before the step's body
starts, under every durability setting. For a shell step it names the
attempt's process group (pgid): the process is created first and held until
the record is durable, so a crash can never leave a body running that the
log does not show.

STEP_END closes an attempt: SUCCESS, FAILED, or RUNNING with error_message
and next_delay_ms when the attempt failed and will be retried after that
delay. A skip is a STEP_END with status SKIPPED. interrupted and timed_out
say how an attempt was ended; output holds a succeeded step's published
value.

CLEANUP records a step's cleanup hook before a rerun of an attempt that
failed or was cut off (dirty: true when a crash cut it off). Its status is
PENDING when the step may run again, FAILED when the cleanup failed.

MARKER records an idempotency marker (marker.name, marker.state pending, done
or cleared, marker.result).

WARNING carries a human message and, when it changes replayed state, an
intervention: resume_from, reset and skip (with the steps), clear_marker,
accept_changes, or torn_tail (informational).

TASK_SUMMARY closes an invocation: summary.counts per state, failed,
failed_optional and blocked steps, and interrupted. Its status is SUCCESS
when the task is complete. summary.fsync is what the invocation's fsyncs of
the log cost, up to the summary: {count, total_us, max_us} (microseconds);
apollo serve exports it as the log fsync latency. Older logs lack it.

# Replay

A step's state is the status of its last record. A step whose last attempt
record is a STEP_START is dirty: a crash cut it off. See Replay.

# Durability

With durability always every record is fsynced before the engine goes on;
parallel steps share fsyncs (group commit). With batch, records may share a
later fsync, but a STEP_START is durable before its body starts, a STEP_END
before any dependent step starts, and a MARKER before the code it guards.
A log is created with its first record (its TASK_START) already durable: the
record is written to <log>.new, fsynced, renamed to the log's name, and the
folder fsynced. A crash during creation leaves no log, only the .new file,
which no reader looks at. A failed write or fsync is final: the
writer refuses every later append (see WriteError), and says which record is
the last known to be on disk.

# Damage

A torn tail — a last line without its newline, or damaged bytes at the end
in which no line decodes as a record, at most MaxTornTail (MaxLineBytes and
4 KiB) long, so that a crash while writing the longest TASK_START still
counts — is what a crash mid-write leaves. Readers ignore it. The next
writer cuts it under the flock, after saving the bytes to
<log>.torn-<offset> and fsyncing that, and appends a WARNING saying so.
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
processes appended, so seq stays contiguous. One Writer per process and log.
*/
package eventlog
