package stdlib

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestJSON(t *testing.T) {
	env := newFakeEnv(t)
	tests := []struct{ name, src, want string }{
		{"canonical", `return json.encode({b = 1, a = {z = true, y = "s"}, c = {1.5, "x"}})`, `{"a":{"y":"s","z":true},"b":1,"c":[1.5,"x"]}`},
		{"null", `return json.encode({1, json.null, 3})`, `[1,null,3]`},
		{"holes", `return json.encode({1, nil, 3})`, `[1,null,3]`},
		{"nil", `return json.encode(nil)`, `null`},
		{"empty table", `return json.encode({})`, `[]`},
		{"empty object", `return json.encode(json.decode("{}"))`, `{}`},
		{"round trip", `return json.encode(json.decode([[{"a":[1,null,{"b":"c"}],"n":-0.5,"s":"\u00e9\n"}]]))`, `{"a":[1,null,{"b":"c"}],"n":-0.5,"s":"é\n"}`},
		{"decode null in array", `local v = json.decode("[1,null,3]"); return tostring(v[2] == json.null) .. " " .. #v`, `true 3`},
		{"decode null document", `return tostring(json.decode("null") == json.null)`, `true`},
		{"decode null member", `return tostring(json.decode('{"a":null,"b":1}').a)`, `nil`},
		{"null tostring", `return tostring(json.null)`, `null`},
		{"big float round trip", `return json.encode(json.decode(json.encode({t = 2^60 + 2^10, u = 1.2345678901234568e18})))`,
			`{"t":1152921504606848000,"u":1234567890123456800}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustRun(t, env, `local json = require("apollo.json"); `+tt.src)
			if got != tt.want {
				t.Errorf("%s = %v, want %s", tt.src, got, tt.want)
			}
		})
	}
	for _, tt := range []struct{ src, want string }{
		{`json.encode(function() end)`, "cannot encode function"},
		{`json.encode({a = 1, [1] = 2})`, "both string keys and integer keys"},
		{`json.encode(0/0)`, "cannot encode"},
		{`json.decode("{")`, "json.decode"},
		{`json.decode("[1] 2")`, "after the top-level value"},
		{`json.decode('{"items":[{"id":9007199254740993}]}')`, "value.items[1].id: integer 9007199254740993 is not exact"},
		{`json.encode()`, "value expected"},
	} {
		wantError(t, env, `local json = require("apollo.json"); `+tt.src, tt.want)
	}
}

func TestDigest(t *testing.T) {
	env := newFakeEnv(t)
	data := strings.Repeat("apollo\n", 300000) // over one read buffer
	if err := os.WriteFile(filepath.Join(env.workspace, "f.txt"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(h[:])
	}
	got := mustRun(t, env, `
		local digest = require("apollo.digest")
		return {digest.sha256("abc"), digest.sha256(""), digest.file("f.txt")}
	`)
	want := []any{sum("abc"), sum(""), sum(data)}
	if !slices.Equal(got.([]any), want) {
		t.Errorf("digests = %v, want %v", got, want)
	}
	if want := "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"; want != sum("abc") {
		t.Errorf("sha256(abc) = %s", sum("abc"))
	}
	wantError(t, env, `require("apollo.digest").file("nope")`, "digest.file", "no such file")
	wantError(t, env, `require("apollo.digest").file(".")`, "digest.file", "is a folder")
}

func TestLog(t *testing.T) {
	env := newFakeEnv(t)
	mustRun(t, env, `
		local log = require("apollo.log")
		log.info("loaded", 3, "rows")
		log.warn("table", {b = 2, a = {1, 2}})
		log.error("nil and bool", nil, true)
		print("not a log line")
	`)
	got := env.logText()
	want := "2024-05-06T07:08:09Z INFO loaded 3 rows\n" +
		"2024-05-06T07:08:09Z WARN table {\"a\":[1,2],\"b\":2}\n" +
		"2024-05-06T07:08:09Z ERROR nil and bool nil true\n"
	if got != want {
		t.Errorf("log =\n%s\nwant\n%s", got, want)
	}
}

func TestState(t *testing.T) {
	env := &fakeStateEnv{
		fakeEnv: newFakeEnv(t),
		steps: []StepReport{
			{ID: "a", Status: "SUCCESS", Attempts: 1},
			{ID: "b", Status: "RUNNING", Attempts: 2, RetryCount: 1, Dirty: true, LastError: "killed"},
		},
	}
	env.markers["charge"] = Marker{Name: "charge", State: MarkerPending}
	got := mustRun(t, env, `
		local state = require("apollo.state")
		local out = {steps = state.steps(), markers = state.markers()}
		state.reset("b", "rerun after the fix")
		state.skip("a", "not needed today")
		state.clear_marker("charge", "checked with the bank: not charged")
		return out
	`)
	want := `{
		"steps": [
			{"id":"a","status":"SUCCESS","attempts":1,"retry_count":0,"dirty":false,"last_error":""},
			{"id":"b","status":"RUNNING","attempts":2,"retry_count":1,"dirty":true,"last_error":"killed"}
		],
		"markers": [{"name":"charge","state":"pending"}]
	}`
	if !jsonEqual(t, got, want) {
		t.Errorf("state = %v\nwant %s", got, want)
	}
	wantI := []string{"reset b rerun after the fix", "skip a not needed today", "clear_marker charge checked with the bank: not charged"}
	if !slices.Equal(env.interventions, wantI) {
		t.Errorf("interventions = %q, want %q", env.interventions, wantI)
	}
	for _, tt := range []struct{ src, want string }{
		{`state.reset("b")`, "why is required"},
		{`state.skip("b", "  ")`, "why is required"},
		{`state.clear_marker("charge")`, "why is required"},
		{`state.reset("", "x")`, "step is empty"},
		{`state.reset("nosuch", "x")`, `no step "nosuch"`},
	} {
		wantError(t, env, `local state = require("apollo.state"); `+tt.src, tt.want)
	}
	if len(env.interventions) != 3 {
		t.Errorf("failed calls made interventions: %q", env.interventions)
	}
}
