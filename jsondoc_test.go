package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"apollo/engine"
	"apollo/engine/history"
)

// listJSON is the object history.WriteListJSON prints (TestListJSONWrapper
// checks that it is).
type listJSON struct {
	Runs []history.RunInfo `json:"runs"`
}

// TestJSONDocs checks each --json shape that --help documents against the
// type that produces it: every JSON field of the type, nested ones
// included, is named, each left out when empty is marked ?, and the doc
// names no field the type does not have.
func TestJSONDocs(t *testing.T) {
	tests := []struct {
		cmd string
		doc string
		typ reflect.Type
	}{
		{"run", engine.PlanJSONDoc, reflect.TypeFor[engine.Plan]()},
		{"inspect", history.ReportJSONDoc, reflect.TypeFor[history.Report]()},
		{"list", history.ListJSONDoc, reflect.TypeFor[listJSON]()},
		{"gc", history.GCJSONDoc, reflect.TypeFor[history.GCResult]()},
	}
	for _, tt := range tests {
		for _, p := range docProblems(tt.doc, tt.typ) {
			t.Errorf("apollo %s --help: %s", tt.cmd, p)
		}
	}
}

// TestJSONDocValues checks the values the docs list for fields whose
// values the engine names as constants.
func TestJSONDocValues(t *testing.T) {
	tests := []struct {
		doc, field string
		want       []string
	}{
		{engine.PlanJSONDoc, "steps.action", []string{engine.ActionRun, engine.ActionKeep, engine.ActionRerun,
			engine.ActionCleanRerun, engine.ActionSkip, engine.ActionCrashLoop, engine.ActionLeave, engine.ActionCached}},
		{history.GCJSONDoc, "kept.reason", []string{history.KeepRunning, history.KeepUnfinished, history.KeepRecent, history.KeepCorrupt}},
	}
	for _, tt := range tests {
		d, err := parseJSONDoc(tt.doc)
		if err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(slices.Values(d.values[tt.field]))
		want := slices.Sorted(slices.Values(tt.want))
		if !slices.Equal(got, want) {
			t.Errorf("the doc lists %q for %s, want %q", got, tt.field, want)
		}
	}
}

// TestListJSONWrapper checks that listJSON is what history.WriteListJSON
// prints, so that TestJSONDocs checks list's doc against the real shape.
func TestListJSONWrapper(t *testing.T) {
	runs := []history.RunInfo{{TaskID: "t", Status: "running", PID: 7}}
	var got bytes.Buffer
	if err := history.WriteListJSON(&got, runs); err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(listJSON{Runs: runs})
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got.Bytes(), &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("WriteListJSON printed %s, want %s", got.Bytes(), want)
	}
}

// TestDocProblems checks that docProblems finds each kind of drift.
func TestDocProblems(t *testing.T) {
	type inner struct {
		ID  string `json:"id"`
		PID int    `json:"pid,omitempty"`
	}
	type shape struct {
		Name   string  `json:"name"`
		Items  []inner `json:"items"`
		Hidden string  `json:"-"`
		Note   string  `json:"note,omitempty"`
	}
	tests := []struct {
		doc  string
		want []string
	}{
		{`{"name", "items": [{"id", "pid"?}], "note"?}`, nil},
		{`{"name", "items": [{"id"}], "note"?}` + "\n  \"items[].pid\"? is a footnote.", nil},
		{`{"name", "items": [{"id"}], "note"?}`, []string{`misses "items.pid"`}},
		{`{"name", "items": [{"id", "pid"?, "pgid"}], "note"?}`, []string{`names "items.pgid", which is no field`}},
		{`{"name", "items": [{"id", "pid"}], "note"}`, []string{`marks "items.pid" as always there; it is left out when empty`,
			`marks "note" as always there; it is left out when empty`}},
		{`{"name"?, "items": [{"id", "pid"?}], "note"?}`, []string{`marks "name" as left out when empty; it is always there`}},
		{`{"name": "a"|"b", "items": [{"id", "pid"?}], "note"?}`, nil},
		{`{"name", "items": [{"id", "pid"?}], "note"?`, []string{"unbalanced braces"}},
		{`{"name", "items": [{"id", "pid"?}], "note"?} and "what"`, []string{`"what" is outside the braces`}},
	}
	for _, tt := range tests {
		got := docProblems(tt.doc, reflect.TypeFor[shape]())
		if len(got) != len(tt.want) {
			t.Errorf("docProblems(%s) = %q, want %d problem(s) like %q", tt.doc, got, len(tt.want), tt.want)
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tt.want[i]) {
				t.Errorf("docProblems(%s)[%d] = %q, want it to say %q", tt.doc, i, got[i], tt.want[i])
			}
		}
	}
}

// docProblems returns what doc gets wrong about the JSON encoding of t,
// sorted; nil if nothing.
func docProblems(doc string, t reflect.Type) []string {
	d, err := parseJSONDoc(doc)
	if err != nil {
		return []string{err.Error()}
	}
	want := map[string]bool{}
	jsonFields(t, "", want, nil)
	var out []string
	for path, omit := range want {
		switch got, ok := d.fields[path]; {
		case !ok:
			out = append(out, fmt.Sprintf("misses %q", path))
		case got && !omit:
			out = append(out, fmt.Sprintf("marks %q as left out when empty; it is always there", path))
		case !got && omit:
			out = append(out, fmt.Sprintf("marks %q as always there; it is left out when empty", path))
		}
	}
	for path := range d.fields {
		if _, ok := want[path]; !ok {
			out = append(out, fmt.Sprintf("names %q, which is no field of %s", path, t))
		}
	}
	sort.Strings(out)
	return out
}

// jsonFields adds to out the JSON field paths of t ("steps.id": the
// elements of a slice share its path), each true if encoding/json leaves it
// out when empty. A struct that holds itself (a sub-pipeline's plan in a
// step of the plan) is documented once: within is the path's structs.
func jsonFields(t reflect.Type, prefix string, out map[string]bool, within []reflect.Type) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.Implements(reflect.TypeFor[json.Marshaler]()) ||
		t.Implements(reflect.TypeFor[encoding.TextMarshaler]()) || slices.Contains(within, t) {
		return
	}
	within = append(slices.Clip(within), t)
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" && opts == "" {
			continue
		}
		if name == "" && f.Anonymous {
			jsonFields(f.Type, prefix, out, within) // embedded: its fields are the parent's
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		o := strings.Split(opts, ",")
		out[prefix+name] = slices.Contains(o, "omitempty") || slices.Contains(o, "omitzero")
		jsonFields(f.Type, prefix+name+".", out, within)
	}
}

// jsonDoc is what a --json doc says.
type jsonDoc struct {
	fields map[string]bool     // field path ("steps.id") -> marked ? (left out when empty)
	values map[string][]string // field path -> the values listed for it
}

// parseJSONDoc reads the notation of the --json docs: an object in braces
// whose quoted names are its fields, a name followed by ? being left out
// when empty; a quoted word after : or | is a value, not a field; the names
// in the {...} or [{...}] after a field are the fields of its value or its
// elements; text in parentheses, and unquoted text, is commentary. A quoted
// jq-like path ("kept[].pid") names a field from the top, anywhere.
func parseJSONDoc(doc string) (*jsonDoc, error) {
	d := &jsonDoc{fields: map[string]bool{}, values: map[string][]string{}}
	var (
		stack  []string // the path prefix of each open brace
		field  string   // the last field named
		prev   byte     // the last character read, blanks and ? aside; '"' for a quoted word
		parens int
	)
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case c == '(':
			parens++
		case c == ')':
			parens--
		case parens > 0:
		case c == '"':
			end := strings.IndexByte(doc[i+1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("unclosed quote at %q", doc[i:])
			}
			word := doc[i+1 : i+1+end]
			i += end + 1
			optional := i+1 < len(doc) && doc[i+1] == '?'
			switch {
			case prev == ':' || prev == '|':
				d.values[field] = append(d.values[field], word)
			case strings.Contains(word, "."):
				field = strings.ReplaceAll(word, "[]", "")
				d.fields[field] = optional
			case len(stack) == 0:
				return nil, fmt.Errorf("%q is outside the braces", word)
			default:
				field = stack[len(stack)-1] + word
				d.fields[field] = optional
			}
			prev = '"'
		case c == '{':
			prefix := ""
			if len(stack) > 0 {
				prefix = field + "."
			}
			stack = append(stack, prefix)
			prev = c
		case c == '}':
			if len(stack) == 0 {
				return nil, fmt.Errorf("unbalanced braces")
			}
			stack = stack[:len(stack)-1]
			prev = c
		case c == ' ' || c == '\n' || c == '\t' || c == '?':
		default:
			prev = c
		}
	}
	if len(stack) != 0 || parens != 0 {
		return nil, fmt.Errorf("unbalanced braces")
	}
	return d, nil
}
