package golden

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// Update reports whether APOLLO_UPDATE_GOLDEN=1 asks tests to rewrite their
// golden files.
func Update() bool { return os.Getenv("APOLLO_UPDATE_GOLDEN") == "1" }

// volatileKeys are JSON fields whose values change from run to run.
var volatileKeys = map[string]string{
	"timestamp": "<time>", "started_at": "<time>", "last_event": "<time>", "last_timestamp": "<time>", "cutoff": "<time>",
	"pid": "<pid>", "host": "<host>",
	"duration_ms": "<ms>", "wait_ms": "<ms>",
	"bytes": "<bytes>", "archived_bytes": "<bytes>",
	"input_digest": "<digest>", "output_digest": "<digest>", "pipeline_digest": "<digest>", "definition_digest": "<digest>",
}

var jsonField = regexp.MustCompile(`"(\w+)": ("(?:[^"\\]|\\.)*"|-?[0-9.]+)`)

// normalizeJSON replaces the values of volatileKeys (unless zero or empty)
// and each of dirs inside strings, keeping the output's field order.
func normalizeJSON(data []byte, dirs []string) []byte {
	out := jsonField.ReplaceAllFunc(data, func(m []byte) []byte {
		sub := jsonField.FindSubmatch(m)
		repl, ok := volatileKeys[string(sub[1])]
		if !ok || string(sub[2]) == `""` || string(sub[2]) == "0" {
			return m
		}
		return []byte(`"` + string(sub[1]) + `": "` + repl + `"`)
	})
	for _, d := range dirs {
		out = bytes.ReplaceAll(out, []byte(d), []byte("<dir>"))
	}
	return out
}

// JSON checks that data is JSON and compares it, normalised, with
// testdata/json/<name>.json. Each of dirs (and the temporary folder) is
// written <dir>.
func JSON(t *testing.T, name string, data []byte, dirs ...string) {
	t.Helper()
	if !json.Valid(data) {
		t.Fatalf("%s: output is not JSON:\n%s", name, data)
	}
	all := append(append([]string{}, dirs...), os.TempDir())
	Check(t, filepath.Join("testdata", "json", name+".json"), normalizeJSON(data, all))
}

// Check compares got with the file at path.
func Check(t *testing.T, path string, got []byte) {
	t.Helper()
	if Update() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with APOLLO_UPDATE_GOLDEN=1 to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}
