package stdlib

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/luart"
)

// fakeEnv is an Env whose markers live in memory. Two states given the same fakeEnv share
// the markers, as two attempts of a task share its log.
type fakeEnv struct {
	workspace, stateDir string
	now                 time.Time

	mu      sync.Mutex
	markers map[string]Marker
	records []Marker // every RecordMarker, in order
	// failRecord, when set, fails RecordMarker for the markers it returns an error for.
	failRecord func(Marker) error
	log        bytes.Buffer
}

func newFakeEnv(t *testing.T) *fakeEnv {
	t.Helper()
	root := t.TempDir()
	e := &fakeEnv{
		workspace: filepath.Join(root, "ws"),
		stateDir:  filepath.Join(root, "state"),
		now:       time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC),
		markers:   map[string]Marker{},
	}
	for _, d := range []string{e.workspace, e.stateDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *fakeEnv) TaskID() string      { return "task-1" }
func (e *fakeEnv) StepID() string      { return "step-1" }
func (e *fakeEnv) RetryCount() int     { return 0 }
func (e *fakeEnv) InputDigest() string { return "sha256:abc" }
func (e *fakeEnv) Workspace() string   { return e.workspace }
func (e *fakeEnv) StateDir() string    { return e.stateDir }
func (e *fakeEnv) Now() time.Time      { return e.now }

func (e *fakeEnv) Log() io.Writer { return &lockedWriter{mu: &e.mu, w: &e.log} }

func (e *fakeEnv) Marker(name string) (Marker, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.markers[name]
	return m, ok
}

func (e *fakeEnv) RecordMarker(m Marker) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.failRecord != nil {
		if err := e.failRecord(m); err != nil {
			return err
		}
	}
	e.markers[m.Name] = m
	e.records = append(e.records, m)
	return nil
}

// states returns the recorded states of marker name, in order.
func (e *fakeEnv) states(name string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, m := range e.records {
		if m.Name == name {
			out = append(out, m.State)
		}
	}
	return out
}

func (e *fakeEnv) logText() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.log.String()
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// fakeStateEnv adds apollo.state's access.
type fakeStateEnv struct {
	*fakeEnv
	steps         []StepReport
	interventions []string // "action target why"
}

func (e *fakeStateEnv) Steps() []StepReport { return e.steps }

func (e *fakeStateEnv) Markers() []Marker {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Marker
	for _, m := range e.markers {
		out = append(out, m)
	}
	return out
}

func (e *fakeStateEnv) Intervene(action, target, why string) error {
	if target == "nosuch" {
		return fmt.Errorf("no step %q", target)
	}
	e.interventions = append(e.interventions, action+" "+target+" "+why)
	return nil
}

// runLua runs src in a fresh luart state with the standard library of env and returns its
// first result as Go data (see luart.ToGo).
func runLua(t *testing.T, env Env, src string) (any, error) {
	t.Helper()
	return runLuaCtx(t, t.Context(), env, src)
}

func runLuaCtx(t *testing.T, ctx context.Context, env Env, src string) (any, error) {
	t.Helper()
	rt := luart.New(luart.Options{Root: env.Workspace()})
	st, err := rt.NewState(ctx, luart.StateOptions{Modules: Modules(env)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	res, err := st.DoChunk("test.lua", src)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	v, cerr := luart.ToGo(res[0])
	if cerr != nil {
		t.Fatalf("result: %v", cerr)
	}
	return v, nil
}

// mustRun is runLua that fails the test on a Lua error.
func mustRun(t *testing.T, env Env, src string) any {
	t.Helper()
	v, err := runLua(t, env, src)
	if err != nil {
		t.Fatalf("lua error: %v\nscript:\n%s", err, src)
	}
	return v
}

// wantError checks that running src fails with an error containing every one of subs.
func wantError(t *testing.T, env Env, src string, subs ...string) error {
	t.Helper()
	_, err := runLua(t, env, src)
	if err == nil {
		t.Fatalf("script succeeded, want an error containing %q\nscript:\n%s", subs, src)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
	var se *luart.ScriptError
	if !errors.As(err, &se) {
		t.Errorf("error %T %v, want a *luart.ScriptError", err, err)
	}
	return err
}

// jsonEqual compares two values as decoded JSON.
func jsonEqual(t *testing.T, got any, want string) bool {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want %q: %v", want, err)
	}
	gb, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g any
	if err := json.Unmarshal(gb, &g); err != nil {
		t.Fatal(err)
	}
	wb, _ := json.Marshal(w)
	gb, _ = json.Marshal(g)
	return bytes.Equal(gb, wb)
}

func TestModulesNames(t *testing.T) {
	env := newFakeEnv(t)
	var got []string
	for name := range Modules(env) {
		got = append(got, name)
	}
	if len(got) != 7 {
		t.Errorf("Modules(Env) has %d modules %v, want 7", len(got), got)
	}
	if _, ok := Modules(env)["apollo.state"]; ok {
		t.Errorf("Modules(Env) has apollo.state, want it only for a StateEnv")
	}
	if _, ok := Modules(&fakeStateEnv{fakeEnv: env})["apollo.state"]; !ok {
		t.Errorf("Modules(StateEnv) has no apollo.state")
	}
	wantError(t, env, `require("apollo.state")`, "module not found")
}
