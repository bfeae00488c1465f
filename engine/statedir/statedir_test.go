package statedir

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestParseLogName(t *testing.T) {
	tests := []struct {
		name     string
		id       string
		start    int64
		archived bool
		ok       bool
	}{
		{name: "task_daily-2026-12-03_1764748800.jsonl", id: "daily-2026-12-03", start: 1764748800, ok: true},
		{name: "task_a_1_100.jsonl", id: "a_1", start: 100, ok: true},
		{name: "task_x_7.jsonl.gz", id: "x", start: 7, archived: true, ok: true},
		{name: "task_x_0012.jsonl", id: "x", start: 12, ok: true},
		{name: "task_x.lock"},
		{name: "task_x_1.jsonl.new"},
		{name: "task_x_1.jsonl.torn-3"},
		{name: "task__1.jsonl"},
		{name: "task_x_.jsonl"},
		{name: "task_x_1a.jsonl"},
		{name: "task_x_99999999999999999999.jsonl"},
		{name: "other_x_1.jsonl"},
	}
	for _, tt := range tests {
		id, start, archived, ok := ParseLogName(tt.name)
		if id != tt.id || start != tt.start || archived != tt.archived || ok != tt.ok {
			t.Errorf("ParseLogName(%q) = %q, %d, %v, %v; want %q, %d, %v, %v",
				tt.name, id, start, archived, ok, tt.id, tt.start, tt.archived, tt.ok)
		}
	}
}

// TestTaskLogs checks that a task's logs are its own (not those of a task
// whose id extends it), oldest first, and that FindLog falls back to the
// archive.
func TestTaskLogs(t *testing.T) {
	d := Dir{Root: t.TempDir()}
	for _, p := range []string{d.Log("a", 20), d.Log("a", 3), d.Log("a_1", 5), d.Log("b", 1),
		filepath.Join(d.Archive(), "task_c_4.jsonl.gz"), filepath.Join(d.Archive(), "task_c_9.jsonl.gz")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs, err := d.TaskLogs("a")
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for _, l := range logs {
		got = append(got, l.Start)
	}
	if !slices.Equal(got, []int64{3, 20}) {
		t.Errorf("TaskLogs(a) starts = %v, want [3 20]", got)
	}
	if p, archived, err := d.FindLog("c"); err != nil || !archived || filepath.Base(p) != "task_c_9.jsonl.gz" {
		t.Errorf("FindLog(c) = %q, %v, %v; want the newest archived log", p, archived, err)
	}
	if p, _, err := d.FindLog("zzz"); err != nil || p != "" {
		t.Errorf("FindLog(zzz) = %q, %v; want nothing", p, err)
	}
	all, err := d.AllLogs(d.Archive())
	if err != nil || len(all) != 6 {
		t.Errorf("AllLogs = %d logs, %v; want 6", len(all), err)
	}
	if got, want := d.KnownTasks(), []string{"a", "c", "a_1", "b"}; !slices.Equal(got, want) {
		t.Errorf("KnownTasks() = %v, want %v (newest first, each once)", got, want)
	}
}
