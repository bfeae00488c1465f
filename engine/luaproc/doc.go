// Package luaproc runs jobs in a pool of pre-started child processes, one
// job per child at a time, each job under a hard memory limit of its own, so
// that the parent never holds a job's heap. It knows nothing of pipelines or
// Lua: a job is bytes in and bytes out, and the child may send requests back
// to the parent while the job runs. The engine runs every Lua attempt this
// way: gopher-lua has no allocator hook, and `..` and table constructors
// allocate inside the VM, so parallel states sharing one Go heap cannot be
// bounded one by one.
//
// # Roles
//
// The parent makes a Pool (New) with the child's command and calls
// Pool.Run(ctx, job, limits, onRequest). The child's main calls
// Serve(ctx, stdin, stdout, handler) with ctx ended by SIGTERM
// (signal.NotifyContext), and exits when Serve returns.
//
// # Protocol
//
// Frames over the child's stdin (parent → child) and stdout (child →
// parent): a 4-byte big-endian length n (at most MaxFrame), then n bytes: a
// kind byte and the payload.
//
//	'H' child → parent  "luaproc 3"; once, when the child is ready
//	'J' parent → child  8-byte big-endian memory limit in bytes (0: none), a flags byte
//	                    (1: held, a go-ahead may follow), then the job
//	'Q' child → parent  a request (the handler's call)
//	'A' parent → child  flags byte (1: the request failed), then the answer or the error
//	                    message; also a held job's go-ahead (1: refused, with the message)
//	'R' child → parent  flags byte, then the result or the handler's error message;
//	                    flags: 1 the handler failed, 2 the memory meter stopped the job,
//	                    4 the child exits after this frame (retired)
//
// A job is 'J', then, if it is held (Pool.RunSent), its go-ahead 'A' once the
// parent has done what the job waits for; then any number of 'Q'/'A' pairs
// (the child waits for each answer, so whatever the parent does before
// answering — making a record durable — is done before the job goes on),
// then 'R'. The handler of a held job waits for the go-ahead with call(nil)
// before whatever must wait for it (its first request reads it first), and
// may need none: it then sends its 'R' without it, and the parent, finding
// the result there once it has done its part, sends no go-ahead (a refusal
// it still sends). A go-ahead that comes after the result is read and
// dropped before the next 'J'. So a job that needs nothing of the parent
// runs while the parent does its part, and its result waits in the pipe:
// neither side sleeps for the other's frame. A child that is not retired
// then waits for the next 'J'; at the end of its stdin it exits. The parent
// answers requests on Run's goroutine, one at a time. Anything else ends the
// child: a parent never reads a frame it did not expect.
//
// The parent reads a child's stream on Run's goroutine (the end of Run's
// ctx stops the read with a read deadline), and the child reads the
// parent's stream on the goroutine that runs the
// handler, and only between jobs and while a request waits for its answer:
// a job crosses no hand-off from a reading goroutine to another. While a
// job runs and nothing reads, the child learns that the parent is gone from
// the meter's timer, which looks at the pipe (poll(2), POLLHUP) every 2 ms.
// Serve gives the child's Go runtime one P (GOMAXPROCS 1) between jobs and
// for a job's first 2 ms: a second one only adds a thread that spins and
// sleeps around every frame. A job that runs longer gets the child's Ps
// back until it ends, so that the collector works beside it.
//
// # Children
//
// The pool starts children on demand and keeps those that finish a job
// idle, as many as were ever busy at once (so no more than the caller's
// parallelism; Options.MaxIdle < 0 keeps none, for a fresh child per job),
// each for IdleTimeout; a child is started in the background to replace
// one that died, was stopped, went over its limit or retired, so the next
// job finds one ready (Pool.Warm starts one ahead). An apollo Lua process
// takes about 18 ms from exec to its hello, and a job with one request
// 0.14-0.24 ms (BenchmarkRun; 2 shared cores under a load of 17-20). A child retires after a job that left the Go runtime holding
// more than 64 MiB beyond what it started with: its heap is not what the
// next job's limit assumes. Each child leads its own process
// group: a terminal's ^C reaches only the parent, which decides, and the
// child and what it started are ended as one.
//
// When Run's ctx ends (a timeout, the parent's own SIGTERM), the child's
// group gets SIGTERM — Serve's ctx ends, the handler stops the job and the
// child exits — and SIGKILL after Limits.KillGrace; Run returns
// context.Cause(ctx) once the child is gone. A child whose stdin ends
// mid-job (the parent died) stops the job, and exits within 5 s even if the
// handler does not return.
//
// # Memory
//
// The child bounds each job with three mechanisms (memory.go), relative to
// what the process holds when they are set (base). The heap meter is set
// for each job; the Go memory limit and RLIMIT_DATA are set for the first
// job and kept for the next ones while their limit is the same and the
// runtime's memory has not moved by more than 4 MiB (setting RLIMIT_DATA
// reads /proc/self/status, which costs more than a no-op job):
//
//   - a heap meter: a timer reads runtime/metrics every 2 ms and stops
//     the job (ErrMemoryLimit is the cause of the handler's ctx) when the
//     live heap the last collection marked is over base + limit, or the
//     heap's objects, live or garbage, over base + 1.5 × limit, and a
//     collection run then confirms it (its live heap, less what the job
//     allocated while it ran, which a collection counts as live, is over
//     base + limit);
//   - the Go memory limit (debug.SetMemoryLimit) at 1.25 × limit over the
//     runtime's memory at the start, so that garbage is collected before it
//     counts, and the live figure is fresh as the heap nears the limit;
//   - RLIMIT_DATA (Linux), which nothing in the process can raise from
//     Lua: the data segment at the start + 1.75 × limit + 64 MiB. Only one
//     allocation the meter cannot see coming (a `..` of two huge strings)
//     reaches it; the runtime then dies with "fatal error: out of memory".
//
// Run returns a *MemoryError, "memory limit exceeded (memory_mb N)", in
// both cases: with the handler's result when the meter stopped the job, and
// with Died set when the child died out of memory (its standard error says
// so, or shows the runtime faulting at address 0 outside any goroutine,
// which is how it dies when one of its own allocations it does not check
// is refused); any other death is an *ExitError with the child's exit status and
// the start of its standard error. A command the child starts would inherit
// its RLIMIT_DATA; WithoutDataLimit lifts it around the start of one.
//
// Why this mix, measured with TestMeterModes (LUAPROC_MEASURE=1; limit 256
// MiB; the engine's Lua bombs, and two jobs near the limit that must
// finish: 60% of the limit kept in strings while 6 × the limit passes as
// garbage, and half the limit in small tables; 2 shared cores under a load
// of 15 to 20, so the times are long and only their order counts):
//
//	mode               bombs (5 kinds)                  near the limit   child peak
//	default            4 stopped, `..` died; 3.5-8.8 s  both finish      330-455 MiB
//	objects meter      all stopped; 2.1-5.8 s           strings stopped  270-520 MiB
//	Go memory limit    all died; 6-21 s                 both finish      455-553 MiB
//	RLIMIT_DATA alone  all died; 4-13 s                 both finish      500-520 MiB
//
// RLIMIT_DATA alone kills the child ("fatal error: out of memory", or a
// SIGSEGV inside the runtime that no message explains) once the collector's
// doubling heap reaches it, and the script's position is lost. The Go
// memory limit turns a heap that only grows into back-to-back collections
// until the CPU limiter lets it pass: the slowest to fail, and the same
// deaths. A meter on the heap's objects alone is the fastest but stops jobs
// for their garbage. The default stops each bomb at the script's position
// once a collection confirms the live heap is over the limit (the Go memory
// limit makes that collection come in time), lets both jobs near the limit
// finish, and fails the `..` doubling, whose next string alone is over
// every threshold, by RLIMIT_DATA. What remains is the time the kernel
// takes to hand out the pages a bomb writes.
package luaproc
