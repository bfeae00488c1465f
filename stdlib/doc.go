// Package stdlib is apollo's Lua standard library, the apollo.* modules a Lua step reaches
// with require("apollo.<name>"). Modules(env) returns their loaders for one step, to pass
// as luart.StateOptions.Modules; env (an Env) is the step's view of the task: its ids, its
// workspace and state directory, its markers in the event log and its output file. Every
// helper honours the step's context (L.Context(): its timeout and cancellation) wherever it
// can wait or loop (reads, digests, listings, removals, lock waits, commands, requests) and
// reports a bad call or a failure as a Lua error that names the function ("fs.read: ...")
// and, through gopher-lua, the script's line. None panics. An option table's unknown key is
// an error naming it and the known ones ("exec.run: unknown option \"timout\" (the options
// are dir, env, stdin, timeout)"), never silently ignored.
//
// # Files: the confinement rule
//
// apollo.fs, apollo.idem, apollo.digest and exec's dir reach only the workspace and the state
// directory. A relative path is taken from the workspace; an absolute path must lie inside one
// of the two (".." that leaves them, an absolute path elsewhere: "path ... is outside the
// workspace and the state directory"). Every operation then runs through an os.Root opened on
// that folder, so a symbolic link that points out (even one swapped in while the step runs) is
// refused the same way, and links that stay inside work for reading. When the state directory
// lies inside the workspace (the usual .apollo/), its files are reached through either.
//
// # Files: only regular files, never written through a link
//
// A helper that reads or writes a file's content (fs.read, fs.write, fs.append, idem.write,
// idem.replace, digest.file) takes only a regular file: a FIFO, a socket or a device is
// refused ("\"p\": is a named pipe (FIFO), not a regular file"), since reading a FIFO waits
// for a writer forever and a device never ends. The type is checked before opening, so a
// device is not even opened, and again on the opened descriptor, which is opened
// non-blocking, so one swapped in meanwhile cannot hold the step. The helpers that do not
// open the file (exists, stat, remove, rename, mkdir) work on any kind; list and exec's dir
// take only folders. The writing helpers (fs.write, fs.append, idem.write, idem.replace)
// also refuse a symbolic link as the path's last component, even one that stays inside
// ("is a symbolic link, which apollo does not write through or replace"): its last name is
// opened with O_NOFOLLOW from its folder's descriptor, so a link planted in the state
// folder, or swapped in between a check and the open, is never written through. Links in
// the folders above it are followed while they stay inside, as for reads.
//
// Reads are bounded: fs.read returns at most MaxReadBytes (64 MiB), idem.replace rewrites
// files of at most MaxReplaceBytes (1 GiB) with lines of at most MaxLineBytes (64 MiB), and
// fs.list returns at most MaxListNames (1,048,576) names; anything larger is an error that
// says so. A huge sparse file is refused by its size, not read.
//
// # apollo.idem: the four idempotency patterns
//
//	idem.key(...)                  -> string
//	idem.write(path, data)         overwrite: atomically
//	idem.replace(path, key, recs)  delete-then-write, for JSON Lines
//	idem.once(name, fn [, opts])   a marker: at most once per task
//	idem.resource(key, create [, opts])  the idempotency-key pattern
//
// key returns the first 32 hex digits (128 bits; KeyHexLen) of the SHA-256 of the canonical
// JSON array [task id, step id, input digest, parts...]: stable across attempts and resumes of
// the same step with the same inputs, different for any other part (strings, numbers, booleans,
// tables by their canonical JSON; nil is refused, as it usually means a missing parameter).
//
// write replaces a file atomically: a temporary file in the same folder, write, fsync, rename
// over the file, fsync of the folder, so the rename is durable before the step's STEP_END.
// Missing parent folders are made, and their parents fsynced; an existing file keeps its
// permissions. Readers see the old file or the new one, never half of it. When the file has
// a lock file (replace has been used on it), write takes the lock too, so it never lands
// between a replace's read and rename.
//
// replace rewrites a JSON Lines data file the same way: every line holding a JSON object
// whose "_key" is key is dropped, the other lines are kept byte for byte (blank lines are
// dropped), then each record of recs (a Lua array of tables) is appended as one line of
// canonical JSON with "_key" set to key. A missing file is empty. Running it again with the
// same records leaves the same file: no duplicates. Writers of one file are serialised by an
// exclusive flock on a lock file beside it, ".<name>.lock" (made on first use, never through a
// link, and left in place), held from the read to the rename: replaces of one file from
// parallel steps, from other runners and from `apollo script` each keep the others' records.
// A replace waits for the lock until the step's context ends.
//
// once guards a side effect with a marker in the event log (MARKER records; marker names are
// per task). A marker "done" returns the result it recorded without calling fn. Otherwise a
// "pending" marker is recorded, and durable, before fn runs; fn's result is recorded as "done"
// (as canonical JSON; nil is null), and the call returns the recorded form, so the first call
// and later ones return the same value; an error from fn records "cleared" and is raised
// again, the same value. When the pending marker cannot be recorded, fn does not run. A marker
// still "pending" when once is called again means an earlier attempt stopped while fn ran (a
// crash, a kill): whether the side effect happened is unknown, so once raises an "uncertain"
// error, unless opts.verify is given: verify() returns done (and a result), true records
// "done" with that result, false records "cleared" and fn runs as new. A recovery script can
// also clear the marker (apollo script, apollo.state.clear_marker). When the step's context
// ends while fn runs (its timeout, an interruption), the marker is left pending, as after a
// crash. resource is once under the marker "resource:"+key, for creating something once.
// once called inside its own fn (or verify) with the same name raises
// "idem.once \"name\" called inside itself" (the outer call then fails as with any error).
//
// # apollo.fs
//
//	fs.read(path) -> string (at most 64 MiB)      fs.write(path, data)   fs.append(path, data)
//	fs.exists(path) -> boolean                    fs.remove(path [, {recursive = true}])
//	fs.mkdir(path) (with parents)                 fs.list(path) -> sorted names
//	fs.stat(path) -> {size, is_dir, mtime}        fs.rename(old, new)
//
// write and append are plain writes (use idem.write to overwrite atomically); they make
// missing parent folders. remove of a missing path is not an error; of the workspace or the
// state directory itself it is. stat and read of a missing path are errors (use exists).
// mtime is in Unix seconds. rename needs both paths in one area. A recursive remove follows
// no link (a link is removed, not its target) and stops when the step's context ends.
//
// # apollo.exec
//
//	exec.run(cmd [, {timeout=, env=, dir=, stdin=}]) -> {code, stdout, stderr [, timed_out, interrupted, signal]}
//
// cmd is an argv table, run without a shell, or a string, run by /bin/sh -c. env adds
// variables to apollo's environment; dir is confined like fs (default: the workspace); stdin
// is fed to the command (default: empty). A non-zero exit is returned, not raised; only a bad
// call or a command that cannot start raises. The command runs in its own process group: when
// timeout (seconds) expires or the step's context ends, the whole group gets SIGTERM, then
// SIGKILL after KillGrace, and the result has code -1 and timed_out = true or interrupted =
// true. A command killed by a signal has code -1 and signal set ("killed"). stdout and stderr
// keep MaxOutputBytes (16 MiB) each, then a note says how many bytes were dropped. When the
// command exits, what it left running in its group (`sleep 100 &`) is ended the same way
// (SIGTERM, SIGKILL after KillGrace). Every process of the command carries the attempt's
// tags (the Env's ExecEnv, added after env so that env cannot change them: a resume finds
// what a crashed attempt left running by them) and a tag of its own, APOLLO_EXEC_<random>=1;
// on Linux, processes carrying it that left the group (setsid, a daemon's double fork) are
// found in /proc and ended too, when the command exits or is stopped. So nothing a command
// starts outlives exec.run, except, on systems without /proc (macOS), a process that left
// the group, and anywhere one that left it and also cleared its environment. Such a process
// that still holds the command's output delays the result by at most two seconds.
//
// # apollo.http
//
//	http.request{method=, url=, headers=, body=, timeout=} -> {status, body, headers}
//	http.get(url [, opts])   http.post(url, body [, opts])
//
// The timeout (seconds) defaults to 30 and covers the whole exchange; the step's context
// also ends a request. Any status is returned, 500 too; a connection error, a timeout, a
// non-http(s) url and a body over MaxResponseBytes (64 MiB) raise errors that name the method
// and the url. Response header names are lower case, repeated headers joined by ", ".
// Redirects are followed (at most 10).
//
// # apollo.json
//
//	json.encode(v) -> string   json.decode(s) -> value   json.null
//
// The encoding is luart's canonical JSON: keys sorted, no spaces, integers without ".0". An
// array with holes encodes the holes as null ({1, nil, 3} is [1,null,3]; a table with more
// holes than values and over 16 holes is refused as sparse); json.null is null anywhere; an
// empty table is [] unless it came from decoding {} (or is marked with
// setmetatable(t, {__jsontype = "object"})). decode makes objects and arrays tables, null
// inside arrays json.null (positions are kept), a null document json.null; a null object
// member is left out, since a Lua table cannot hold nil.
//
// # apollo.log and apollo.digest
//
//	log.info(...)  log.warn(...)  log.error(...)
//	digest.sha256(s) -> "sha256:<hex>"   digest.file(path) -> "sha256:<hex>"
//
// A log call writes one line "<RFC 3339 UTC time> LEVEL message" to the step's output file;
// the arguments are joined by spaces, tables shown as canonical JSON. The time comes from the
// Env's Now method when it has one (see Clock). digest.file reads the (confined) file in
// pieces, so any size works, and stops when the step's context ends.
//
// # apollo.state
//
//	state.steps() -> {{id, status, attempts, retry_count, dirty, last_error}, ...}
//	state.markers() -> {{name, state}, ...}
//	state.reset(step, why)   state.skip(step, why)   state.clear_marker(name, why)
//
// Only recovery scripts run by `apollo script` have it (Modules adds it when the Env is a
// StateEnv). The three interventions are appended to the log as WARNING-backed records by
// StateEnv.Intervene; why is required and recorded.
package stdlib
