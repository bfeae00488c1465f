package pipeline

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"apollo/engine/template"
)

// schemaValidator checks values against the subset of JSON Schema 2020-12
// that Schema uses. A keyword it does not know fails the test, so
// that the schema cannot grow a rule that this validator silently skips.
type schemaValidator struct {
	t    *testing.T
	root map[string]any
}

func newSchemaValidator(t *testing.T) *schemaValidator {
	t.Helper()
	var root map[string]any
	if err := json.Unmarshal(Schema(), &root); err != nil {
		t.Fatalf("Schema() is not JSON: %v", err)
	}
	return &schemaValidator{t: t, root: root}
}

// annotations are keywords that do not validate.
var annotations = map[string]bool{"$schema": true, "$defs": true, "title": true, "description": true}

// validate returns the problems of v against schema s, each with its path.
func (sv *schemaValidator) validate(s map[string]any, v any, path string) []string {
	var probs []string
	fail := func(format string, args ...any) { probs = append(probs, path+": "+fmt.Sprintf(format, args...)) }
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kw := s[k]
		switch k {
		case "$ref":
			ref := kw.(string)
			name, ok := strings.CutPrefix(ref, "#/$defs/")
			def, found := sv.root["$defs"].(map[string]any)[name].(map[string]any)
			if !ok || !found {
				sv.t.Fatalf("schema: $ref %q does not resolve", ref)
			}
			probs = append(probs, sv.validate(def, v, path)...)
		case "type":
			types := []any{kw}
			if list, ok := kw.([]any); ok {
				types = list
			}
			if !slices.ContainsFunc(types, func(t any) bool { return hasType(v, t.(string)) }) {
				fail("%s is not of type %v", show(v), kw)
			}
		case "enum":
			if !slices.ContainsFunc(kw.([]any), func(e any) bool { return reflect.DeepEqual(e, v) }) {
				fail("%s is not one of %v", show(v), kw)
			}
		case "pattern":
			if s, ok := v.(string); ok && !regexp.MustCompile(kw.(string)).MatchString(s) {
				fail("%q does not match %s", s, kw)
			}
		case "minLength", "maxLength":
			if s, ok := v.(string); ok {
				n, lim := float64(len([]rune(s))), kw.(float64)
				if (k == "minLength" && n < lim) || (k == "maxLength" && n > lim) {
					fail("%q breaks %s %v", s, k, lim)
				}
			}
		case "minimum", "maximum":
			if f, ok := v.(float64); ok {
				lim := kw.(float64)
				if (k == "minimum" && f < lim) || (k == "maximum" && f > lim) {
					fail("%v breaks %s %v", f, k, lim)
				}
			}
		case "required":
			if m, ok := v.(map[string]any); ok {
				for _, r := range kw.([]any) {
					if _, has := m[r.(string)]; !has {
						fail("%s is required", r)
					}
				}
			}
		case "properties", "additionalProperties", "propertyNames":
			m, ok := v.(map[string]any)
			if !ok {
				continue
			}
			props, _ := s["properties"].(map[string]any)
			for name, val := range m {
				sub := path + "." + name
				switch k {
				case "properties":
					if ps, ok := props[name]; ok {
						probs = append(probs, sv.validate(ps.(map[string]any), val, sub)...)
					}
				case "additionalProperties":
					if _, ok := props[name]; ok {
						continue
					}
					if kw == false {
						fail("unknown key %q", name)
					} else if as, ok := kw.(map[string]any); ok {
						probs = append(probs, sv.validate(as, val, sub)...)
					}
				case "propertyNames":
					probs = append(probs, sv.validate(kw.(map[string]any), name, sub+" (name)")...)
				}
			}
		case "items":
			if list, ok := v.([]any); ok {
				for i, item := range list {
					probs = append(probs, sv.validate(kw.(map[string]any), item, fmt.Sprintf("%s[%d]", path, i))...)
				}
			}
		case "minItems":
			if list, ok := v.([]any); ok && float64(len(list)) < kw.(float64) {
				fail("has %d items, fewer than %v", len(list), kw)
			}
		case "maxProperties":
			if m, ok := v.(map[string]any); ok && float64(len(m)) > kw.(float64) {
				fail("has %d keys, more than %v", len(m), kw)
			}
		case "const":
			if v != kw {
				fail("is %v, not %v", v, kw)
			}
		case "minProperties":
			if m, ok := v.(map[string]any); ok && float64(len(m)) < kw.(float64) {
				fail("has %d keys, fewer than %v", len(m), kw)
			}
		case "uniqueItems":
			if list, ok := v.([]any); ok && kw == true {
				for i := range list {
					for j := i + 1; j < len(list); j++ {
						if reflect.DeepEqual(list[i], list[j]) {
							fail("items %d and %d are equal", i, j)
						}
					}
				}
			}
		case "allOf", "anyOf", "oneOf":
			passed := 0
			var sub []string
			for _, alt := range kw.([]any) {
				p := sv.validate(alt.(map[string]any), v, path)
				if len(p) == 0 {
					passed++
				}
				sub = append(sub, p...)
			}
			n := len(kw.([]any))
			switch {
			case k == "allOf" && passed < n:
				probs = append(probs, sub...)
			case k == "anyOf" && passed == 0:
				fail("matches none of anyOf: %v", sub)
			case k == "oneOf" && passed != 1:
				fail("matches %d of oneOf, want exactly 1", passed)
			}
		case "not":
			if len(sv.validate(kw.(map[string]any), v, path)) == 0 {
				fail("matches a schema it must not (not: %v)", kw)
			}
		case "if":
			if len(sv.validate(kw.(map[string]any), v, path)) == 0 {
				if then, ok := s["then"].(map[string]any); ok {
					probs = append(probs, sv.validate(then, v, path)...)
				}
			}
		case "then":
		default:
			if !annotations[k] {
				sv.t.Fatalf("schema: keyword %q at %s is not known to the test's validator", k, path)
			}
		}
	}
	return probs
}

func hasType(v any, t string) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == math.Trunc(f) && !math.IsInf(f, 0)
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	panic("unknown JSON type " + t)
}

func show(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// yamlValue decodes a YAML document the way an editor's YAML language
// server sees it: as JSON values (numbers as float64, keys as strings).
func yamlValue(src []byte) (any, error) {
	var v any
	if err := yaml.Unmarshal(src, &v); err != nil {
		return nil, err
	}
	return jsonish(v), nil
}

func jsonish(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			x[k] = jsonish(val)
		}
		return x
	case map[any]any:
		m := map[string]any{}
		for k, val := range x {
			m[fmt.Sprint(k)] = jsonish(val)
		}
		return m
	case []any:
		for i := range x {
			x[i] = jsonish(x[i])
		}
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	case time.Time:
		return x.Format(time.RFC3339Nano)
	case []byte:
		return string(x)
	}
	return v
}

// schemaProblems validates a pipeline's source against the schema; a
// document that is not YAML has the decoder's error as its one problem.
func (sv *schemaValidator) problems(src []byte) []string {
	v, err := yamlValue(src)
	if err != nil {
		return []string{err.Error()}
	}
	return sv.validate(sv.root, v, "$")
}

// loads reports whether the loader accepts src (with --var cli=1).
func loads(src []byte) (bool, error) {
	_, err := parse("pipeline.yaml", "/schema", src, LoadOptions{Vars: map[string]string{"cli": "1"}})
	return err == nil, err
}

func schemaObject(t *testing.T, sv *schemaValidator, path ...string) map[string]any {
	t.Helper()
	var cur any = sv.root
	for _, p := range path {
		cur = cur.(map[string]any)[p]
	}
	m, ok := cur.(map[string]any)
	if !ok {
		t.Fatalf("schema has no object at %v", path)
	}
	return m
}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}

func strs(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestSchemaMatchesLoaderTables checks the schema's keys, choices and
// bounds against the loader's tables and constants.
func TestSchemaMatchesLoaderTables(t *testing.T) {
	sv := newSchemaValidator(t)
	if got := sv.root["$schema"]; got != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v, want draft 2020-12", got)
	}
	step := schemaObject(t, sv, "$defs", "step")
	checks := []struct {
		what      string
		got, want []string
	}{
		{"top-level keys", keysOf(schemaObject(t, sv, "properties")), sorted(topKeys)},
		{"step keys", keysOf(schemaObject(t, sv, "$defs", "step", "properties")), sorted(stepKeys)},
		{"required top-level keys", strs(sv.root["required"]), []string{"task_name", "steps"}},
		{"required step keys", strs(step["required"]), []string{"id"}},
		{"durability", strs(schemaObject(t, sv, "$defs", "durability")["enum"]), []string{DurabilityAlways, DurabilityBatch}},
		{"retry_policy", strs(schemaObject(t, sv, "$defs", "retryPolicy")["enum"]), []string{RetryNone, RetryFixed, RetryExponential}},
		{"top-level isolation", strs(schemaObject(t, sv, "properties", "isolation")["enum"]), []string{"", "process"}},
		{"step isolation", strs(schemaObject(t, sv, "$defs", "step", "properties", "isolation")["enum"]), []string{"", "inprocess", "process"}},
		{"built-in vars that vars: cannot set", strs(schemaObject(t, sv, "properties", "vars", "propertyNames", "not")["enum"]),
			slices.DeleteFunc(template.BuiltinVars(), func(s string) bool { return s == "task_date" })},
	}
	var bodies []string
	for _, alt := range step["oneOf"].([]any) {
		bodies = append(bodies, strs(alt.(map[string]any)["required"])...)
	}
	checks = append(checks, struct {
		what      string
		got, want []string
	}{"bodies (oneOf)", bodies, bodyKeys})
	var cleanups []string
	for _, alt := range step["not"].(map[string]any)["anyOf"].([]any) {
		cleanups = append(cleanups, strings.Join(strs(alt.(map[string]any)["required"]), "+"))
	}
	checks = append(checks, struct {
		what      string
		got, want []string
	}{"cleanup pairs", cleanups, []string{
		cleanupKeys[0] + "+" + cleanupKeys[1], cleanupKeys[0] + "+" + cleanupKeys[2], cleanupKeys[1] + "+" + cleanupKeys[2]}})
	for _, c := range checks {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: schema has %q, loader has %q", c.what, c.got, c.want)
		}
	}
	bounds := []struct {
		path     []string
		min, max float64
	}{
		{[]string{"$defs", "retries"}, 0, maxRetryCount},
		{[]string{"$defs", "seconds"}, 0, maxSeconds},
		{[]string{"properties", "parallelism"}, 1, math.MaxInt32},
		{[]string{"properties", "max_dirty_restarts"}, 1, math.MaxInt32},
		{[]string{"$defs", "memoryMB"}, 1, maxMemoryMB},
	}
	for _, b := range bounds {
		o := schemaObject(t, sv, b.path...)
		if o["minimum"] != b.min || o["maximum"] != b.max {
			t.Errorf("%v: schema bounds [%v, %v], loader [%v, %v]", b.path, o["minimum"], o["maximum"], b.min, b.max)
		}
	}
	if got := schemaObject(t, sv, "$defs", "step", "properties", "id")["maxLength"]; got != float64(maxStepIDLen) {
		t.Errorf("step id maxLength = %v, loader %d", got, maxStepIDLen)
	}
}

// pipelineCorpus returns every pipeline the repository holds: the
// examples, the end-to-end scripts' pipelines, the loader's good and bad
// cases and the fuzz corpus.
func pipelineCorpus(t *testing.T) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{}
	examples, _ := filepath.Glob("../../scripts/examples/*.yaml")
	for _, p := range examples {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		docs[p] = data
	}
	archives, _ := filepath.Glob("../../testdata/script/*.txtar")
	loadCases, _ := filepath.Glob("testdata/load/*/*.txtar")
	for _, p := range append(archives, loadCases...) {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range parseArchive(data).Files {
			if strings.HasSuffix(f.Name, ".yaml") || strings.HasSuffix(f.Name, ".yml") {
				docs[p+":"+f.Name] = f.Data
			}
		}
	}
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzLoad/*")
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lit, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "go test fuzz v1\n[]byte(")
		if !ok {
			continue
		}
		s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		docs[p] = []byte(s)
	}
	if len(examples) == 0 || len(archives) == 0 || len(seeds) == 0 {
		t.Fatalf("corpus: %d examples, %d scripts, %d fuzz seeds; want some of each", len(examples), len(archives), len(seeds))
	}
	return docs
}

// TestSchemaAcceptsWhatLoaderAccepts validates every pipeline of the
// repository that the loader accepts against the schema: an editor must
// never flag a pipeline that apollo runs.
func TestSchemaAcceptsWhatLoaderAccepts(t *testing.T) {
	sv := newSchemaValidator(t)
	accepted := 0
	for name, src := range pipelineCorpus(t) {
		if ok, _ := loads(src); !ok {
			continue
		}
		accepted++
		if probs := sv.problems(src); len(probs) > 0 {
			t.Errorf("%s: the loader accepts it, the schema does not:\n  %s", name, strings.Join(probs, "\n  "))
		}
	}
	if accepted < 20 {
		t.Errorf("only %d pipelines of the corpus load; want at least 20", accepted)
	}
}

// TestSchemaAgreesOnEachValue sets each key of a full pipeline, in turn, to
// each of a set of values, and checks that the schema accepts every
// variant the loader accepts, and rejects every variant the loader rejects
// for the value's type, choice or range.
func TestSchemaAgreesOnEachValue(t *testing.T) {
	sv := newSchemaValidator(t)
	base := func() (map[string]any, map[string]any) {
		step := map[string]any{"id": "a", "command": "echo {{cli}}"}
		top := map[string]any{"task_name": "t", "steps": []any{step, map[string]any{"id": "b", "lua": "return 1", "depends_on": []any{"a"}}}}
		return top, step
	}
	values := []any{nil, 0, 1, -1, 2.5, 10000, 10001, 1e10, true, "", " ", "x", "a.b", "a-b", "process", "inprocess", "batch",
		"fixed", "exponential", "none", "lib/x.lua", "../x.lua", "/abs.lua", "a", "task_id", "a b",
		[]any{}, []any{"a"}, []any{"a", "a"}, []any{"x"}, []any{1}, []any{nil}, map[string]any{}, map[string]any{"k": "v"},
		map[string]any{"1k": "v"}, map[string]any{"task_id": "v"}, map[string]any{"k": nil}, map[string]any{"k": []any{1}},
		strings.Repeat("x", 129)}
	// typeErrors are the loader's words for a value of the wrong type,
	// choice or range: the schema must refuse those too.
	typeErrors := regexp.MustCompile(`must be (a |at |true|a whole|a number|a finite|a mapping|a list|always|none|"")|has no value|is empty|may only hold|is not a module name|must name a \.lua|must be relative|leaves the pipeline|var name|env name|is built in|the limit is|lists .* twice|has no effect without|is read by Lua steps|applies to Lua steps|keep exactly one body|has no body`)
	checked := 0
	try := func(what string, v any, top map[string]any) {
		src, err := yaml.Marshal(top)
		if err != nil {
			t.Fatal(err)
		}
		ok, lerr := loads(src)
		probs := sv.problems(src)
		switch {
		case ok && len(probs) > 0:
			t.Errorf("%s: the loader accepts it, the schema does not: %v\n%s", what, probs, src)
		case !ok && len(probs) == 0 && typeErrors.MatchString(lerr.Error()) && !numberAsText(v, lerr):
			t.Errorf("%s: the loader refuses it (%v), the schema accepts it\n%s", what, lerr, src)
		}
		checked++
	}
	for _, key := range topKeys {
		for _, v := range values {
			top, _ := base()
			top[key] = v
			try(fmt.Sprintf("%s: %s", key, show(v)), v, top)
		}
	}
	for _, key := range stepKeys {
		for _, v := range values {
			top, step := base()
			step[key] = v
			if key != "command" && slices.Contains(bodyKeys, key) {
				delete(step, "command")
			}
			try(fmt.Sprintf("step %s: %s", key, show(v)), v, top)
		}
	}
	if checked < 1000 {
		t.Errorf("checked %d variants, want at least 1000", checked)
	}
}

// numberAsText reports whether the loader refused a number for the text it
// stands for (1e+10 is no name): a schema's pattern applies to strings
// only, so it cannot see that.
func numberAsText(v any, err error) bool {
	switch v.(type) {
	case int, float64, bool:
		return regexp.MustCompile(`may only hold|is not a module name`).MatchString(err.Error())
	}
	return false
}

// TestSchemaRejects lists mistakes that the schema catches as an editor
// types, each also refused by the loader.
func TestSchemaRejects(t *testing.T) {
	sv := newSchemaValidator(t)
	tests := []struct{ name, src, want string }{
		{"unknown top-level key", "task_name: t\nnmae: x\nsteps: [{id: a, command: x}]\n", `unknown key "nmae"`},
		{"unknown step key", "task_name: t\nsteps: [{id: a, command: x, needs: [b]}]\n", `unknown key "needs"`},
		{"no task_name", "steps: [{id: a, command: x}]\n", "task_name is required"},
		{"no steps", "task_name: t\n", "steps is required"},
		{"empty steps", "task_name: t\nsteps: []\n", "fewer than 1"},
		{"no id", "task_name: t\nsteps: [{command: x}]\n", "id is required"},
		{"two bodies", "task_name: t\nsteps: [{id: a, command: x, lua: y}]\n", "matches 2 of oneOf"},
		{"no body", "task_name: t\nsteps: [{id: a}]\n", "matches 0 of oneOf"},
		{"two cleanups", "task_name: t\nsteps: [{id: a, command: x, cleanup_command: y, cleanup_lua: z}]\n", "must not"},
		{"durability", "task_name: t\ndurability: sometimes\nsteps: [{id: a, command: x}]\n", "is not one of"},
		{"retry policy", "task_name: t\nsteps: [{id: a, command: x, retry_policy: linear}]\n", "is not one of"},
		{"negative timeout", "task_name: t\nsteps: [{id: a, command: x, timeout_seconds: -1}]\n", "minimum"},
		{"retries as text", "task_name: t\nmax_retries: three\nsteps: [{id: a, command: x}]\n", "not of type"},
		{"retries without a policy", "task_name: t\nsteps: [{id: a, command: x, max_retries: 2}]\n", "retry_policy is required"},
		{"with on a command", "task_name: t\nsteps: [{id: a, command: x, with: {k: v}}]\n", "must not"},
		{"bad step id", "task_name: t\nsteps: [{id: a/b, command: x}]\n", "does not match"},
		{"bad task name", "task_name: a b\nsteps: [{id: a, command: x}]\n", "does not match"},
		{"built-in var", "task_name: t\nvars: {task_id: x}\nsteps: [{id: a, command: x}]\n", "must not"},
		{"script not Lua", "task_name: t\nsteps: [{id: a, script: x.sh}]\n", "does not match"},
		{"memory", "task_name: t\nsteps: [{id: a, lua: x, memory_mb: 0}]\n", "minimum"},
		{"module name", "task_name: t\nsteps: [{id: a, uses: ../x}]\n", "does not match"},
		{"dependency twice", "task_name: t\nsteps: [{id: a, command: x}, {id: b, command: y, depends_on: [a, a]}]\n", "are equal"},
		{"shell on a Lua step", "task_name: t\nsteps: [{id: a, lua: x, shell: bash}]\n", "matches none of anyOf"},
		{"shell as a mapping", "task_name: t\nsteps: [{id: a, command: x, shell: {bash: -c}}]\n", "matches 0 of oneOf"},
		{"parallelism 0", "task_name: t\nparallelism: 0\nsteps: [{id: a, command: x}]\n", "minimum"},
		{"trigger of two kinds", "task_name: t\ntriggers: [{file: 'in/*.csv', webhook: w}]\nsteps: [{id: a, command: x}]\n", "matches 2 of oneOf"},
		{"trigger status", "task_name: t\ntriggers: [{after: x.yaml, status: done}]\nsteps: [{id: a, command: x}]\n", "is not one of"},
	}
	for _, tt := range tests {
		if ok, _ := loads([]byte(tt.src)); ok {
			t.Errorf("%s: the loader accepts it; the case is wrong", tt.name)
		}
		probs := strings.Join(sv.problems([]byte(tt.src)), "\n")
		if !strings.Contains(probs, tt.want) {
			t.Errorf("%s: schema problems\n%s\nwant one with %q", tt.name, probs, tt.want)
		}
	}
}
