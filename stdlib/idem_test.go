package stdlib

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestKey(t *testing.T) {
	env := newFakeEnv(t)
	key := func(args string) string {
		t.Helper()
		v := mustRun(t, env, `return require("apollo.idem").key(`+args+`)`)
		s, ok := v.(string)
		if !ok {
			t.Fatalf("idem.key(%s) = %v, want a string", args, v)
		}
		return s
	}
	k := key(`"a", 1, {x = 1, y = {2, 3}}`)
	if got, want := len(k), KeyHexLen; got != want {
		t.Errorf("len(idem.key) = %d, want %d", got, want)
	}
	want, err := Key(env, "a", 1.0, map[string]any{"y": []any{2.0, 3.0}, "x": 1.0})
	if err != nil {
		t.Fatal(err)
	}
	if k != want {
		t.Errorf("idem.key = %q, want Key() = %q", k, want)
	}
	if got := key(`"a", 1, {y = {2, 3}, x = 1}`); got != k {
		t.Errorf("idem.key with the table keys in another order = %q, want %q", got, k)
	}
	for _, other := range []string{`"a", "1", {x = 1, y = {2, 3}}`, `"a 1"`, `"a", 1`, ``, `true`} {
		if got := key(other); got == k {
			t.Errorf("idem.key(%s) = idem.key(\"a\", 1, {...})", other)
		}
	}
	if key(``) == key(`""`) {
		t.Errorf(`idem.key() = idem.key("")`)
	}
	wantError(t, env, `require("apollo.idem").key("a", nil)`, "idem.key", "#2", "nil")
	wantError(t, env, `require("apollo.idem").key(function() end)`, "idem.key", "function")
}

func TestWrite(t *testing.T) {
	env := newFakeEnv(t)
	mustRun(t, env, `
		local idem = require("apollo.idem")
		idem.write("out/deep/a.txt", "first")
		idem.write("out/deep/a.txt", "second")
	`)
	path := filepath.Join(env.workspace, "out/deep/a.txt")
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "second" {
		t.Errorf("content = %q, want %q", got, "second")
	}
	names, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 {
		t.Errorf("folder holds %v, want only a.txt (no temporary files left)", names)
	}

	// An existing file's permissions are kept.
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, env, `require("apollo.idem").write("out/deep/a.txt", "third")`)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("mode after idem.write = %v, want %v", got, want)
	}

	// Absolute paths in the state directory work; a folder is not a file.
	abs := filepath.Join(env.stateDir, "artifacts", "t", "x.txt")
	mustRun(t, env, `require("apollo.idem").write("`+abs+`", "in state")`)
	if got, err := os.ReadFile(abs); err != nil || string(got) != "in state" {
		t.Errorf("state dir file = %q, %v; want %q", got, err, "in state")
	}
	wantError(t, env, `require("apollo.idem").write("out", "x")`, "idem.write", "folder")
}

func TestWriteFailureLeavesNoTemp(t *testing.T) {
	env := newFakeEnv(t)
	// A folder in the way of the target: the rename fails, nothing is left behind.
	if err := os.MkdirAll(filepath.Join(env.workspace, "d", "target", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	wantError(t, env, `require("apollo.idem").write("d/target", "x")`, "idem.write")
	names, _ := os.ReadDir(filepath.Join(env.workspace, "d"))
	if len(names) != 1 || names[0].Name() != "target" {
		t.Errorf("folder holds %v, want only target", names)
	}
}

// readLines returns the JSON objects of a JSON Lines file.
func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestReplace(t *testing.T) {
	env := newFakeEnv(t)
	path := filepath.Join(env.workspace, "data.jsonl")
	if err := os.WriteFile(path, []byte(`{"_key":"other","v":1}`+"\n"+`{"_key":"k1","v":0}`+"\n"+`{"v":"no key"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
		local idem = require("apollo.idem")
		idem.replace("data.jsonl", "k1", {{v = 1, name = "a"}, {v = 2, name = "b", _key = "ignored"}})
	`
	mustRun(t, env, script)
	mustRun(t, env, script) // a rerun: no duplicates

	got := readLines(t, path)
	want := []map[string]any{
		{"_key": "other", "v": 1.0},
		{"v": "no key"},
		{"_key": "k1", "name": "a", "v": 1.0},
		{"_key": "k1", "name": "b", "v": 2.0},
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if string(gb) != string(wb) {
		t.Errorf("after two replaces:\n got %s\nwant %s", gb, wb)
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), `{"_key":"k1","name":"a","v":1}`+"\n") {
		t.Errorf("records are not canonical JSON lines:\n%s", raw)
	}

	// Another key is appended beside; an empty list removes the key's records.
	mustRun(t, env, `require("apollo.idem").replace("data.jsonl", "k2", {{v = 3}})`)
	mustRun(t, env, `require("apollo.idem").replace("data.jsonl", "k1", {})`)
	var keys []string
	for _, m := range readLines(t, path) {
		k, _ := m["_key"].(string)
		keys = append(keys, k)
	}
	if want := []string{"other", "", "k2"}; !slices.Equal(keys, want) {
		t.Errorf("keys = %q, want %q", keys, want)
	}

	// A missing file is empty.
	mustRun(t, env, `require("apollo.idem").replace("new/fresh.jsonl", "k", {{a = {1, 2}}})`)
	if got := readLines(t, filepath.Join(env.workspace, "new/fresh.jsonl")); len(got) != 1 || got[0]["_key"] != "k" {
		t.Errorf("fresh file = %v", got)
	}

	for _, tt := range []struct{ name, args, want string }{
		{"records not a table", `"k", "x"`, "records must be an array"},
		{"record not a table", `"k", {1}`, "records[1] must be a table"},
		{"records an object", `"k", {a = 1}`, "array of tables"},
		{"record an array", `"k", {{1, 2}}`, "records[1] must be a table with string keys"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, env, `require("apollo.idem").replace("data.jsonl", `+tt.args+`)`, "idem.replace", tt.want)
		})
	}
}

const onceScript = `
	local idem = require("apollo.idem")
	local fs = require("apollo.fs")
	return idem.once("charge", function()
		fs.append("calls.txt", "call\n")
		return {id = "ch_1", amount = 5}
	end)
`

func callCount(t *testing.T, env *fakeEnv) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.workspace, "calls.txt"))
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "call\n")
}

func TestOnceRunsOnce(t *testing.T) {
	env := newFakeEnv(t)
	first := mustRun(t, env, onceScript)
	second := mustRun(t, env, onceScript) // a second state: a retry or a resume
	if !jsonEqual(t, first, `{"id":"ch_1","amount":5}`) {
		t.Errorf("first once = %v", first)
	}
	if !jsonEqual(t, second, `{"id":"ch_1","amount":5}`) {
		t.Errorf("second once = %v, want the recorded result", second)
	}
	if got, want := callCount(t, env), 1; got != want {
		t.Errorf("fn ran %d times, want %d", got, want)
	}
	if got, want := env.states("charge"), []string{"pending", "done"}; !slices.Equal(got, want) {
		t.Errorf("marker states = %q, want %q", got, want)
	}
	m, _ := env.Marker("charge")
	if got, want := string(m.Result), `{"amount":5,"id":"ch_1"}`; got != want {
		t.Errorf("recorded result = %s, want %s", got, want)
	}

	// nil results are recorded as null, and returned as nil.
	got := mustRun(t, env, `
		local idem = require("apollo.idem")
		local n = 0
		local a = idem.once("nothing", function() n = n + 1 end)
		local b = idem.once("nothing", function() n = n + 1 end)
		return {a == nil, b == nil, n}
	`)
	if !jsonEqual(t, got, `[true, true, 1]`) {
		t.Errorf("nil result: %v", got)
	}
	if m, _ := env.Marker("nothing"); string(m.Result) != "null" {
		t.Errorf("nil result recorded as %q, want null", m.Result)
	}
}

func TestOncePendingUncertain(t *testing.T) {
	env := newFakeEnv(t)
	env.markers["charge"] = Marker{Name: "charge", State: MarkerPending}
	err := wantError(t, env, onceScript, "uncertain", "charge", "verify", "apollo script", "clear_marker")
	if strings.Contains(err.Error(), "\n") && !strings.Contains(err.Error(), "uncertain") {
		t.Errorf("error %q", err)
	}
	if got := callCount(t, env); got != 0 {
		t.Errorf("fn ran %d times with an uncertain marker, want 0", got)
	}
	if got := env.states("charge"); len(got) != 0 {
		t.Errorf("recorded %q, want nothing", got)
	}
}

func TestOnceVerify(t *testing.T) {
	tests := []struct {
		name       string
		verify     string
		wantResult string
		wantCalls  int
		wantStates []string
	}{
		{"verify true", `return true, "checked"`, `"checked"`, 0, []string{"done"}},
		{"verify true without result", `return true`, `null`, 0, []string{"done"}},
		{"verify false", `return false`, `{"id":"ch_1","amount":5}`, 1, []string{"cleared", "pending", "done"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := newFakeEnv(t)
			env.markers["charge"] = Marker{Name: "charge", State: MarkerPending}
			got := mustRun(t, env, `
				local idem = require("apollo.idem")
				local fs = require("apollo.fs")
				return idem.once("charge", function()
					fs.append("calls.txt", "call\n")
					return {id = "ch_1", amount = 5}
				end, {verify = function() `+tt.verify+` end})
			`)
			if !jsonEqual(t, got, tt.wantResult) {
				t.Errorf("once = %v, want %s", got, tt.wantResult)
			}
			if got := callCount(t, env); got != tt.wantCalls {
				t.Errorf("fn ran %d times, want %d", got, tt.wantCalls)
			}
			if got := env.states("charge"); !slices.Equal(got, tt.wantStates) {
				t.Errorf("marker states = %q, want %q", got, tt.wantStates)
			}
			// Decided: a later call returns the result without fn or verify.
			again := mustRun(t, env, `return require("apollo.idem").once("charge", function() error("ran again") end,
				{verify = function() error("verify again") end})`)
			if !jsonEqual(t, again, tt.wantResult) {
				t.Errorf("later once = %v, want %s", again, tt.wantResult)
			}
		})
	}
}

func TestOnceError(t *testing.T) {
	env := newFakeEnv(t)
	wantError(t, env, `
		local idem = require("apollo.idem")
		idem.once("boom", function() error("the api said no") end)
	`, "the api said no")
	if got, want := env.states("boom"), []string{"pending", "cleared"}; !slices.Equal(got, want) {
		t.Errorf("marker states = %q, want %q", got, want)
	}
	// A table error value is re-raised as it was.
	got := mustRun(t, env, `
		local idem = require("apollo.idem")
		local ok, err = pcall(idem.once, "boom2", function() error({code = 7}) end)
		return {ok, err.code}
	`)
	if !jsonEqual(t, got, `[false, 7]`) {
		t.Errorf("pcall(once) = %v, want [false, 7]", got)
	}
	// Cleared: the next call runs fn again.
	got = mustRun(t, env, `return require("apollo.idem").once("boom", function() return "second try" end)`)
	if got != "second try" {
		t.Errorf("once after cleared = %v", got)
	}
}

func TestOncePendingNotRecorded(t *testing.T) {
	env := newFakeEnv(t)
	env.failRecord = func(m Marker) error {
		if m.State == MarkerPending {
			return errors.New("disk full")
		}
		return nil
	}
	wantError(t, env, onceScript, "cannot record the pending marker", "disk full", "not run")
	if got := callCount(t, env); got != 0 {
		t.Errorf("fn ran %d times though its pending marker failed, want 0", got)
	}
}

func TestOnceDoneNotRecorded(t *testing.T) {
	env := newFakeEnv(t)
	env.failRecord = func(m Marker) error {
		if m.State == MarkerDone {
			return errors.New("disk full")
		}
		return nil
	}
	wantError(t, env, onceScript, "done marker could not be recorded", "disk full")
	env.failRecord = nil
	wantError(t, env, onceScript, "uncertain")
	if got := callCount(t, env); got != 1 {
		t.Errorf("fn ran %d times, want 1", got)
	}
}

func TestOnceBadResult(t *testing.T) {
	env := newFakeEnv(t)
	wantError(t, env, `require("apollo.idem").once("f", function() return function() end end)`, "cannot be recorded")
	// The side effect happened: the marker is done, fn is not run again.
	if got := mustRun(t, env, `return require("apollo.idem").once("f", function() error("ran again") end)`); got != nil {
		t.Errorf("once after an unrecordable result = %v, want nil", got)
	}
}

func TestOnceArguments(t *testing.T) {
	env := newFakeEnv(t)
	for _, tt := range []struct{ args, want string }{
		{`"", function() end`, "name is empty"},
		{`"x"`, "fn must be a function"},
		{`"x", function() end, 3`, "options must be a table"},
		{`"x", function() end, {verify = 1}`, "verify must be a function"},
		{`"x", function() end, {verfy = function() end}`, `unknown option "verfy" (the options are verify)`},
	} {
		wantError(t, env, `require("apollo.idem").once(`+tt.args+`)`, "idem.once", tt.want)
	}
}

func TestResource(t *testing.T) {
	env := newFakeEnv(t)
	script := `
		local idem = require("apollo.idem")
		local fs = require("apollo.fs")
		return idem.resource(idem.key("bucket"), function()
			fs.append("calls.txt", "call\n")
			return {bucket = "b-1"}
		end)
	`
	a := mustRun(t, env, script)
	b := mustRun(t, env, script)
	if !jsonEqual(t, a, `{"bucket":"b-1"}`) || !jsonEqual(t, b, `{"bucket":"b-1"}`) {
		t.Errorf("resource = %v then %v", a, b)
	}
	if got := callCount(t, env); got != 1 {
		t.Errorf("create ran %d times, want 1", got)
	}
	key, _ := Key(env, "bucket")
	if got, want := env.states("resource:"+key), []string{"pending", "done"}; !slices.Equal(got, want) {
		t.Errorf("marker states = %q, want %q", got, want)
	}

	// A pending resource is uncertain without verify, decided with it.
	env.markers["resource:r2"] = Marker{Name: "resource:r2", State: MarkerPending}
	wantError(t, env, `require("apollo.idem").resource("r2", function() return 1 end)`, "uncertain", "idem.resource")
	got := mustRun(t, env, `return require("apollo.idem").resource("r2", function() return 1 end, {verify = function() return false end})`)
	if got != 1.0 {
		t.Errorf("resource after verify false = %v, want 1", got)
	}
}

// TestOnceNested: idem.once (or idem.resource) called inside itself with the same name says
// so, rather than calling its own pending marker an earlier attempt's; the outer call fails
// with that error and clears its marker, and the name can be used again afterwards.
func TestOnceNested(t *testing.T) {
	env := newFakeEnv(t)
	for _, tt := range []struct{ src, want, marker string }{
		{`idem.once("x", function() return idem.once("x", function() return 1 end) end)`, `idem.once "x" called inside itself`, "x"},
		{`idem.resource("r", function() return idem.resource("r", function() return 1 end) end)`, `idem.resource "r" called inside itself`, "resource:r"},
		{`idem.once("v", function() return 1 end, {verify = function() return idem.once("v", function() end) end})`, `idem.once "v" called inside itself`, "v"},
	} {
		if tt.marker == "v" {
			env.markers["v"] = Marker{Name: "v", State: MarkerPending}
		}
		err := wantError(t, env, `local idem = require("apollo.idem"); `+tt.src, tt.want)
		if strings.Contains(err.Error(), "uncertain") {
			t.Errorf("%s: %v, want no talk of an uncertain earlier attempt", tt.src, err)
		}
	}
	if got, want := env.states("x"), []string{"pending", "cleared"}; !slices.Equal(got, want) {
		t.Errorf("marker states = %q, want %q", got, want)
	}
	got := mustRun(t, env, `
		local idem = require("apollo.idem")
		local inner = idem.once("a", function() return idem.once("b", function() return 2 end) + 1 end)
		return {inner, idem.once("x", function() return "again" end)}
	`)
	if !jsonEqual(t, got, `[3, "again"]`) {
		t.Errorf("nested once of other names, then x again = %v", got)
	}
}
