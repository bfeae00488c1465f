package recovery

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"

	"apollo/engine/clock"
	"apollo/engine/intervene"
	"apollo/engine/markers"
	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/usage"
	"apollo/eventlog"
	"apollo/luart"
	"apollo/stdlib"
)

// Options say which task a recovery script works on and where.
type Options struct {
	// TaskID is the task whose log the script reads and amends.
	TaskID string
	// Args are the script's arguments (its global arg).
	Args []string
	// StateDir is the state folder; Workdir the workspace the script's
	// files are confined to.
	StateDir, Workdir string
	// Stdout receives the script's print and a line per appended record.
	Stdout io.Writer
	// Bundled holds the bundled Lua modules.
	Bundled fs.FS
	// FS is the event log's file-system seam; nil means the real one.
	FS eventlog.FS
	// Clock stamps the records; nil means the real time.
	Clock clock.Clock
}

// Run runs a recovery script in the Lua sandbox with apollo.state: it
// reads the task's steps and markers and appends interventions (reset,
// skip, clear_marker) as WARNING-backed records under the log's flock,
// honoured by the next apollo run. It never rewrites a past line.
func Run(ctx context.Context, path string, o Options) error {
	if err := statedir.ValidTaskID(o.TaskID); err != nil {
		return &usage.Error{Msg: fmt.Sprintf("--task-id: %v", err)}
	}
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return &usage.Error{Msg: fmt.Sprintf("%s: not a readable Lua file", path)}
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Workdir == "" {
		o.Workdir, _ = os.Getwd()
	}
	dir := statedir.Dir{Root: o.StateDir}
	logPath, err := dir.LatestLog(o.TaskID)
	if err != nil {
		return err
	}
	if logPath == "" {
		return &statedir.NotFoundError{TaskID: o.TaskID, StateDir: o.StateDir, Suggestion: pipeline.Suggest(o.TaskID, dir.KnownTasks())}
	}
	env := &scriptEnv{o: &o, path: path, logPath: logPath, state: eventlog.NewState(o.TaskID), stateDir: absPath(o.StateDir)}
	env.book = markers.New(nil)
	w, err := eventlog.Open(logPath, eventlog.WriterOptions{TaskID: o.TaskID, Durability: eventlog.Always,
		FS: o.FS, Now: o.Clock.Now, OnForeign: env.apply}, func(r *eventlog.Record) error {
		env.apply(r)
		return nil
	})
	if err != nil {
		return err
	}
	defer w.Close()
	env.w = w
	env.book.Attach(w, nil)

	rt := luart.New(luart.Options{Bundled: o.Bundled, Root: o.Workdir})
	st, err := rt.NewState(ctx, luart.StateOptions{Print: o.Stdout, Modules: stdlib.Modules(env)})
	if err != nil {
		return err
	}
	defer st.Close()
	L := st.L()
	argv := L.NewTable()
	for _, a := range o.Args {
		argv.Append(lua.LString(a))
	}
	L.SetGlobal("arg", argv)
	ctxTable := L.NewTable()
	ctxTable.RawSetString("task_id", lua.LString(o.TaskID))
	ctxTable.RawSetString("log", lua.LString(logPath))
	ctxTable.RawSetString("args", argv)
	L.SetGlobal("ctx", ctxTable)
	if _, err := st.DoFile(absPath(path)); err != nil {
		return &Error{Path: path, Err: err}
	}
	return nil
}

// Error is a recovery script that failed.
type Error struct {
	Path string
	Err  error
}

func (e *Error) Error() string { return fmt.Sprintf("script %s: %v", e.Path, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// scriptEnv is the standard library's view of a recovery script.
type scriptEnv struct {
	o        *Options
	path     string
	logPath  string
	stateDir string
	w        *eventlog.Writer
	book     *markers.Book

	mu    sync.Mutex
	state *eventlog.State
}

func (s *scriptEnv) apply(r *eventlog.Record) {
	s.mu.Lock()
	s.state.Apply(r)
	s.mu.Unlock()
	s.book.Observe(r)
}

func (s *scriptEnv) TaskID() string      { return s.state.TaskID }
func (s *scriptEnv) StepID() string      { return "" }
func (s *scriptEnv) RetryCount() int     { return 0 }
func (s *scriptEnv) InputDigest() string { return "" }
func (s *scriptEnv) Workspace() string   { return absPath(s.o.Workdir) }
func (s *scriptEnv) StateDir() string    { return s.stateDir }
func (s *scriptEnv) Log() io.Writer      { return s.o.Stdout }

func (s *scriptEnv) Marker(name string) (stdlib.Marker, bool) { return s.book.Marker(name) }

func (s *scriptEnv) RecordMarker(m stdlib.Marker) error {
	if err := s.book.RecordMarker("", 0, m); err != nil {
		return err
	}
	s.appended(fmt.Sprintf("marker %q %s", m.Name, m.State))
	return nil
}

// appended tells the user what the script added to the log, as it is
// added: a script that fails later has still appended it.
func (s *scriptEnv) appended(what string) {
	fmt.Fprintf(s.o.Stdout, "apollo script: appended to %s: %s\n", s.logPath, what)
}

func (s *scriptEnv) append(r *eventlog.Record) error {
	if err := s.w.AppendDurable(r); err != nil {
		return err
	}
	s.apply(r)
	return nil
}

// Steps lists the task's steps in the order of its graph.
func (s *scriptEnv) Steps() []stdlib.StepReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []stdlib.StepReport
	for _, id := range s.state.Order {
		st := s.state.Steps[id]
		out = append(out, stdlib.StepReport{ID: id, Status: st.Status, Attempts: st.Attempts,
			RetryCount: st.RetryCount, Dirty: st.Dirty, LastError: st.LastError})
	}
	return out
}

// Markers lists the task's markers by name.
func (s *scriptEnv) Markers() []stdlib.Marker { return s.book.All() }

// Intervene appends a WARNING that says who changed what, and why.
func (s *scriptEnv) Intervene(action, target, why string) error {
	req := intervene.Request{Action: action, Target: target, Why: why}
	if why != "" {
		req.By = s.who()
	}
	hasMarker := func(name string) bool {
		_, ok := s.Marker(name)
		return ok
	}
	s.mu.Lock()
	rec, err := intervene.Record(s.state, hasMarker, req)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if err := s.append(rec); err != nil {
		return err
	}
	// The user is who it names: say what was done, without the "by".
	what := rec.Message
	if req.By != "" {
		what = strings.TrimPrefix(what, "manual intervention by "+req.By+": ")
	}
	s.appended("WARNING " + what)
	return nil
}

func (s *scriptEnv) who() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s@%s via apollo script %s (pid %d)", name, host, filepath.Base(s.path), os.Getpid())
}

// absPath is p made absolute, or p when it cannot be.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}
