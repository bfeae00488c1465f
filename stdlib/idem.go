package stdlib

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	lua "github.com/yuin/gopher-lua"

	"apollo/eventlog"
	"apollo/luart"
)

// KeyHexLen is the length of an idem.key: the first 32 hex digits (128 bits) of a SHA-256.
// That is far beyond any chance of collision within a task, and short enough for resource
// names and Idempotency-Key headers with length limits.
const KeyHexLen = 32

// Marker states.
const (
	MarkerPending = "pending"
	MarkerDone    = "done"
	MarkerCleared = "cleared"
)

// resourcePrefix is put in front of idem.resource keys to name their markers.
const resourcePrefix = "resource:"

func (lib *library) idemFuncs() map[string]lua.LGFunction {
	return map[string]lua.LGFunction{
		"key":      lib.idemKey,
		"write":    lib.idemWrite,
		"replace":  lib.idemReplace,
		"once":     lib.idemOnce,
		"resource": lib.idemResource,
	}
}

// Key returns the idempotency key of a step's attempt and extra parts, as idem.key does:
// the first KeyHexLen hex digits of the SHA-256 of the canonical JSON array
// [task id, step id, input digest, parts...]. The array makes the encoding unambiguous:
// ("a", "b") and ("a b") differ, and so do the number 1 and the string "1".
func Key(env Env, parts ...any) (string, error) {
	all := append([]any{env.TaskID(), env.StepID(), env.InputDigest()}, parts...)
	enc, err := luart.EncodeJSON(all)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(enc)
	return hex.EncodeToString(sum[:])[:KeyHexLen], nil
}

func (lib *library) idemKey(L *lua.LState) int {
	const fn = "idem.key"
	n := L.GetTop()
	parts := make([]any, 0, n)
	for i := 1; i <= n; i++ {
		v := L.Get(i)
		switch v.(type) {
		case lua.LString, lua.LNumber, lua.LBool, *lua.LTable:
		case *lua.LNilType:
			// A nil part is most often a missing parameter: two dates, one key. Refuse it.
			argError(L, fn, i, "part is nil")
		default:
			if !luart.IsNull(v) {
				argError(L, fn, i, "a part must be a string, number, boolean or table, got %s", typeName(v))
			}
		}
		g, err := luart.ToGoNamed("part #"+strconv.Itoa(i), v)
		if err != nil {
			raise(L, fn, "%v", err)
		}
		parts = append(parts, g)
	}
	key, err := Key(lib.env, parts...)
	if err != nil {
		raise(L, fn, "%v", err)
	}
	L.Push(lua.LString(key))
	return 1
}

func (lib *library) idemWrite(L *lua.LState) int {
	const fn = "idem.write"
	path := checkPath(L, fn, 1)
	data := checkString(L, fn, 2, "data")
	checkContext(L, fn)
	p, err := lib.confine().resolve(path)
	if err != nil {
		raise(L, fn, "%v", err)
	}
	ctx := stepContext(L)
	err = p.with(func(r *os.Root, rel string) error {
		return lockedWrite(ctx, r, rel, func(w io.Writer) error {
			_, err := io.WriteString(w, data)
			return err
		})
	})
	if err != nil {
		raise(L, fn, "%v", err)
	}
	return 0
}

// lockedWrite is atomicWrite under the lock of rel (lockBeside) when rel has one, that is,
// when idem.replace has been used on it: a write never lands between a replace's read and
// rename. A file only ever written by idem.write gets no lock file beside it.
func lockedWrite(ctx context.Context, r *os.Root, rel string, write func(w io.Writer) error) error {
	if rel == "." {
		return &fs.PathError{Op: "write", Path: rel, Err: errIsFolder}
	}
	if err := mkdirAll(r, filepath.Dir(rel)); err != nil {
		return err
	}
	unlock, err := lockBeside(ctx, r, rel, false)
	if err != nil {
		return err
	}
	defer unlock()
	return atomicWrite(r, rel, write)
}

// atomicWrite replaces file rel of r with what write writes, through
// eventlog.WriteFileAtomic (a temporary file in the same folder, fsync,
// rename over rel, fsync of the folder) confined to r. Missing parent
// folders are created (and their parents fsynced). An existing file's
// permissions are kept. What is at rel must be a regular file, or nothing: a
// symbolic link is not replaced (a script that writes "out.json" must not
// turn a link someone planted into its file, nor be told it wrote the
// target), nor is a FIFO, socket or device. On any error rel is untouched.
func atomicWrite(r *os.Root, rel string, write func(w io.Writer) error) error {
	if rel == "." {
		return &fs.PathError{Op: "write", Path: rel, Err: errIsFolder}
	}
	if err := mkdirAll(r, filepath.Dir(rel)); err != nil {
		return err
	}
	if fi, err := r.Lstat(rel); err == nil {
		if err := checkRegular(rel, fi, ""); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return eventlog.WriteFileAtomic(rootFS{r}, rel, 0o644, write)
}

func (lib *library) idemReplace(L *lua.LState) int {
	const fn = "idem.replace"
	path := checkPath(L, fn, 1)
	key := checkString(L, fn, 2, "key")
	recs, ok := L.Get(3).(*lua.LTable)
	if !ok {
		argError(L, fn, 3, "records must be an array of tables, got %s", typeName(L.Get(3)))
	}
	lines, err := replaceRecords(key, recs)
	if err != nil {
		raise(L, fn, "%v", err)
	}
	checkContext(L, fn)
	p, err := lib.confine().resolve(path)
	if err != nil {
		raise(L, fn, "%v", err)
	}
	ctx := stepContext(L)
	err = p.with(func(r *os.Root, rel string) error {
		if rel == "." {
			return &fs.PathError{Op: "write", Path: rel, Err: errIsFolder}
		}
		if err := mkdirAll(r, filepath.Dir(rel)); err != nil {
			return err
		}
		// The lock is held from the read to the rename: two replaces of one file, from
		// parallel steps or other processes, would otherwise each keep the lines they read
		// and drop the other's records.
		unlock, err := lockBeside(ctx, r, rel, true)
		if err != nil {
			return err
		}
		defer unlock()
		old, err := openLeaf(r, rel, os.O_RDONLY, 0)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			old = nil
		case err != nil:
			return err
		}
		if old != nil {
			defer old.Close()
			fi, err := old.Stat()
			if err != nil {
				return err
			}
			if fi.Size() > MaxReplaceBytes {
				return &fs.PathError{Op: "read", Path: rel, Err: fmt.Errorf("larger than the %d MiB idem.replace rewrites (split the data into several files)", MaxReplaceBytes>>20)}
			}
		}
		return atomicWrite(r, rel, func(w io.Writer) error {
			if old != nil {
				if err := keepOtherLines(ctx, old, w, key); err != nil {
					return &fs.PathError{Op: "read", Path: rel, Err: err}
				}
			}
			for _, l := range lines {
				if _, err := w.Write(l); err != nil {
					return err
				}
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return nil
		})
	})
	if err != nil {
		raise(L, fn, "%v", err)
	}
	return 0
}

// replaceRecords encodes records (a Lua array of tables) as canonical JSON lines with _key
// set to key.
func replaceRecords(key string, recs *lua.LTable) ([][]byte, error) {
	v, err := luart.ToGoNamed("records", recs)
	if err != nil {
		return nil, err
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, errors.New("records must be an array of tables (got a table with string keys: wrap one record as {record})")
	}
	lines := make([][]byte, 0, len(arr))
	for i, e := range arr {
		var obj map[string]any
		switch e := e.(type) {
		case map[string]any:
			obj = e
		case []any:
			if len(e) != 0 {
				return nil, fmt.Errorf("records[%d] must be a table with string keys, got an array", i+1)
			}
			obj = map[string]any{}
		default:
			return nil, fmt.Errorf("records[%d] must be a table, got %s", i+1, goTypeName(e))
		}
		obj["_key"] = key
		b, err := luart.EncodeJSON(obj)
		if err != nil {
			return nil, fmt.Errorf("records[%d]: %w", i+1, err)
		}
		lines = append(lines, append(b, '\n'))
	}
	return lines, nil
}

func goTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "nil"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	}
	return fmt.Sprintf("%T", v)
}

// keepOtherLines copies the lines of old to w, except those holding a JSON object whose
// _key is key, and blank lines. Other lines, JSON or not, are copied byte for byte: the
// step owns only its own key's records. A last line without a newline gets one. It reads
// at most MaxReplaceBytes, refuses a line longer than MaxLineBytes (a file of zeros has no
// lines), and stops when ctx ends.
func keepOtherLines(ctx context.Context, old io.Reader, w io.Writer, key string) error {
	lr := &io.LimitedReader{R: &ctxReader{ctx: ctx, r: old}, N: MaxReplaceBytes + 1}
	br := bufio.NewReaderSize(lr, 256<<10)
	var long []byte // a line longer than br's buffer, gathered
	for n := 1; ; {
		frag, err := br.ReadSlice('\n')
		line := frag
		if err == bufio.ErrBufferFull || len(long) > 0 {
			if len(long)+len(frag) > MaxLineBytes {
				return fmt.Errorf("line %d is longer than the %d MiB idem.replace reads", n, MaxLineBytes>>20)
			}
			if len(long)+len(frag) > cap(long) {
				long = slices.Grow(long, max(len(long), len(frag))) // double: append grows big slices by a quarter
			}
			long = append(long, frag...)
			if err == bufio.ErrBufferFull {
				continue
			}
			line = long
		}
		if len(line) > 0 {
			body := bytes.TrimRight(line, "\r\n")
			if len(bytes.TrimSpace(body)) > 0 && !hasKey(body, key) {
				if _, err := w.Write(body); err != nil {
					return err
				}
				if _, err := w.Write([]byte{'\n'}); err != nil {
					return err
				}
			}
			n++
		}
		long = long[:0]
		if err == io.EOF {
			if lr.N <= 0 {
				return fmt.Errorf("larger than the %d MiB idem.replace rewrites", MaxReplaceBytes>>20)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// hasKey reports whether line is a JSON object whose "_key" member is the string key.
func hasKey(line []byte, key string) bool {
	t := bytes.TrimSpace(line)
	if len(t) == 0 || t[0] != '{' {
		return false
	}
	var obj map[string]json.RawMessage
	if json.Unmarshal(t, &obj) != nil {
		return false
	}
	raw, ok := obj["_key"]
	if !ok {
		return false
	}
	var k string
	return json.Unmarshal(raw, &k) == nil && k == key
}

func (lib *library) idemOnce(L *lua.LState) int {
	const fn = "idem.once"
	name := checkString(L, fn, 1, "name")
	if name == "" {
		argError(L, fn, 1, "name is empty")
	}
	f := checkFunction(L, fn, 2, "fn")
	opts := optTable(L, fn, 3, "options")
	return lib.guard(L, fmt.Sprintf("%s %q", fn, name), name, f, opts)
}

func (lib *library) idemResource(L *lua.LState) int {
	const fn = "idem.resource"
	key := checkString(L, fn, 1, "key")
	if key == "" {
		argError(L, fn, 1, "key is empty")
	}
	f := checkFunction(L, fn, 2, "create")
	opts := optTable(L, fn, 3, "options")
	return lib.guard(L, fmt.Sprintf("%s %q", fn, key), resourcePrefix+key, f, opts)
}

// guard runs f at most once per task under the marker name (idem.once, idem.resource) and
// pushes its result. what names the call in messages.
//
//   - done: the recorded result, f is not called;
//   - pending (an earlier attempt stopped between its pending marker and its end): opts.verify
//     decides — true records done with verify's result, false records cleared and f runs;
//     without verify an "uncertain" error is raised;
//   - absent or cleared: pending is recorded (durable) before f runs; f's result is recorded
//     as done, and f's error records cleared and is raised again.
//
// When the step's context ends while f runs (a timeout, an interruption), the marker stays
// pending, as after a crash: whether the side effect happened is unknown.
func (lib *library) guard(L *lua.LState, what, name string, f *lua.LFunction, opts *lua.LTable) int {
	checkContext(L, what)
	var verify *lua.LFunction
	if opts != nil {
		checkOptions(L, what, opts, "verify")
		switch v := opts.RawGetString("verify").(type) {
		case *lua.LNilType:
		case *lua.LFunction:
			verify = v
		default:
			raise(L, what, "options.verify must be a function, got %s", typeName(v))
		}
	}
	// While fn (or verify) runs, the marker is pending: a call of the same name inside it
	// would find that and wrongly blame an earlier attempt.
	if !lib.enterGuard(name) {
		L.RaiseError("%s called inside itself", what)
	}
	defer lib.leaveGuard(name)

	if m, ok := lib.env.Marker(name); ok {
		switch m.State {
		case MarkerDone:
			L.Push(decodeResult(L, what, m.Result))
			return 1
		case MarkerPending:
			if verify == nil {
				raise(L, what, "uncertain: the marker %q is pending from an earlier attempt that stopped "+
					"while the guarded code ran (a crash or a kill), so whether its side effect happened is unknown. "+
					"Pass {verify = function() ... return done, result end} as the options to decide, "+
					"or clear the marker after checking by hand, in a recovery script run with `apollo script`: "+
					"require(\"apollo.state\").clear_marker(%q, \"why\")", name, name)
			}
			L.Push(verify)
			L.Call(0, 2)
			done, result := lua.LVAsBool(L.Get(-2)), L.Get(-1)
			L.Pop(2)
			if done {
				enc := encodeResult(L, what, "verify's result", result)
				if err := lib.env.RecordMarker(Marker{Name: name, State: MarkerDone, Result: enc}); err != nil {
					raise(L, what, "cannot record the done marker after verify: %v", err)
				}
				L.Push(decodeResult(L, what, enc))
				return 1
			}
			if err := lib.env.RecordMarker(Marker{Name: name, State: MarkerCleared}); err != nil {
				raise(L, what, "cannot clear the marker after verify: %v", err)
			}
		case MarkerCleared:
		default:
			raise(L, what, "the marker %q has an unknown state %q", name, m.State)
		}
	}

	checkContext(L, what)
	if err := lib.env.RecordMarker(Marker{Name: name, State: MarkerPending}); err != nil {
		raise(L, what, "cannot record the pending marker, so the guarded code was not run: %v", err)
	}
	L.Push(f)
	if err := luart.PCall(L, 0, 1); err != nil { // no traceback: one of an endless tail call could take gigabytes
		var obj lua.LValue = lua.LString(err.Error())
		var ae *lua.ApiError
		if errors.As(err, &ae) && ae.Object != nil {
			obj = ae.Object
		}
		if stepContext(L).Err() != nil {
			// Stopped from outside: as after a crash, leave the marker pending.
			L.Error(obj, 0)
		}
		if cerr := lib.env.RecordMarker(Marker{Name: name, State: MarkerCleared}); cerr != nil {
			raise(L, what, "%s; and the marker could not be cleared, so it stays pending: %v", lua.LVAsString(L.ToStringMeta(obj)), cerr)
		}
		L.Error(obj, 0)
	}
	result := L.Get(-1)
	L.Pop(1)
	enc, encErr := encodeResultErr(result)
	if encErr != nil {
		// The side effect happened: record done (with null) so it is never repeated, and say
		// why the result is lost.
		if err := lib.env.RecordMarker(Marker{Name: name, State: MarkerDone, Result: json.RawMessage("null")}); err != nil {
			raise(L, what, "the guarded code ran, but its result cannot be recorded (%v), and the done marker could not be recorded: %v", encErr, err)
		}
		raise(L, what, "the guarded code ran and the marker is done, but its result cannot be recorded (return JSON values): %v", encErr)
	}
	if err := lib.env.RecordMarker(Marker{Name: name, State: MarkerDone, Result: enc}); err != nil {
		raise(L, what, "the guarded code ran, but the done marker could not be recorded, so it stays pending (a later call will be uncertain): %v", err)
	}
	// The result a later call returns, so the first call returns the same value.
	L.Push(decodeResult(L, what, enc))
	return 1
}

// enterGuard marks name's guarded call as running; false when it already is.
func (lib *library) enterGuard(name string) bool {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	if lib.guarding[name] {
		return false
	}
	if lib.guarding == nil {
		lib.guarding = map[string]bool{}
	}
	lib.guarding[name] = true
	return true
}

func (lib *library) leaveGuard(name string) {
	lib.mu.Lock()
	defer lib.mu.Unlock()
	delete(lib.guarding, name)
}

func encodeResultErr(v lua.LValue) (json.RawMessage, error) {
	g, err := luart.ToGoNamed("result", v)
	if err != nil {
		return nil, err
	}
	return luart.EncodeJSON(g)
}

func encodeResult(L *lua.LState, what, name string, v lua.LValue) json.RawMessage {
	enc, err := encodeResultErr(v)
	if err != nil {
		raise(L, what, "%s cannot be recorded: %v", name, err)
	}
	return enc
}

func decodeResult(L *lua.LState, what string, enc json.RawMessage) lua.LValue {
	if len(bytes.TrimSpace(enc)) == 0 {
		return lua.LNil
	}
	v, err := luart.DecodeJSON(L, enc)
	if err != nil {
		raise(L, what, "the recorded result cannot be read: %v", err)
	}
	return v
}
