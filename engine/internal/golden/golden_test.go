package golden

import "testing"

// TestNormalizeJSON: volatile values become placeholders unless zero or
// empty, folders become <dir>, and everything else stays as it was.
func TestNormalizeJSON(t *testing.T) {
	in := `{"task_id": "t", "timestamp": "2026-01-02T03:04:05Z", "pid": 4242, "duration_ms": 0, "host": "",
  "input_digest": "sha256:ab", "path": "/tmp/x/state/logs/a.jsonl", "count": 3}`
	want := `{"task_id": "t", "timestamp": "<time>", "pid": "<pid>", "duration_ms": 0, "host": "",
  "input_digest": "<digest>", "path": "<dir>/state/logs/a.jsonl", "count": 3}`
	if got := string(normalizeJSON([]byte(in), []string{"/tmp/x"})); got != want {
		t.Errorf("normalizeJSON =\n%s\nwant\n%s", got, want)
	}
}
