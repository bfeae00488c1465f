package hubview_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/engine/hubtest"
	"apollo/engine/hubview"
	"apollo/engine/remote"
	"apollo/eventlog"
)

// line is a record of task id with seq, as a coordinator writes it.
func line(t *testing.T, id string, seq int64, typ string) []byte {
	t.Helper()
	b, err := eventlog.Encode(&eventlog.Record{Seq: seq, TaskID: id, EventType: typ, Status: eventlog.Running,
		Timestamp: eventlog.FormatTime(time.Date(2026, 12, 5, 10, 0, int(seq), 0, time.UTC))})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// eventually waits until cond holds (bounded: 20 s).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}

func read(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// The copy of the hub's logs (docs/spec.md §8.8): each task's log, as the
// hub holds it, in a file of the log's name; then what is appended; a new
// log of a task replaces its copy; the copy of a task whose log the hub
// dropped (apollo gc --hub) goes; a log that does not begin at seq 1, or
// skips one, is not copied past what reads; the holder of a task's lease is
// known.
func TestMirrorFollowsTheHubsLogs(t *testing.T) {
	cl := hubtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: cl.URLs(), Name: "test", CallTimeout: time.Second, GiveUp: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ensure(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	appendTo := func(l *remote.Log, name string, seq int64, id, typ string) []byte {
		t.Helper()
		b := line(t, id, seq, typ)
		l.Name = name
		if err := l.Append(ctx, seq, b); err != nil {
			t.Fatal(err)
		}
		return b
	}
	x, err := c.OpenLog(ctx, "x.1")
	if err != nil {
		t.Fatal(err)
	}
	want := string(appendTo(x, "task_x.1_100.jsonl", 1, "x.1", eventlog.TaskStart)) +
		string(appendTo(x, "task_x.1_100.jsonl", 2, "x.1", eventlog.Warning))

	dir := t.TempDir()
	var mu sync.Mutex
	var said []string
	m := hubview.New(c, dir, func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		said = append(said, f)
	})
	m.Every = 100 * time.Millisecond
	mctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); m.Run(mctx) }()
	defer func() { stop(); <-done }()
	select {
	case <-m.Ready():
	case <-ctx.Done():
		t.Fatal("the mirror never caught up")
	}
	xPath := filepath.Join(dir, "logs", "task_x.1_100.jsonl")
	if got := read(xPath); got != want {
		t.Fatalf("the copy holds %q, want %q", got, want)
	}

	// Live: what is appended comes in.
	want += string(appendTo(x, "task_x.1_100.jsonl", 3, "x.1", eventlog.TaskSummary))
	eventually(t, "record 3 copied", func() bool { return read(xPath) == want })

	// A lease: its holder is known.
	if _, err := c.AcquireLease(ctx, "x.1", remote.Holder{Host: "h", PID: 4242}, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the holder known", func() bool { pid, held := m.Holder("x.1"); return held && pid == 4242 })

	// A new log of the task (--fresh) replaces the copy.
	if err := x.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	fresh := string(appendTo(x, "task_x.1_200.jsonl", 1, "x.1", eventlog.TaskStart))
	newPath := filepath.Join(dir, "logs", "task_x.1_200.jsonl")
	eventually(t, "the new log copied, the old gone", func() bool {
		_, err := os.Stat(xPath)
		return read(newPath) == fresh && os.IsNotExist(err)
	})

	// A gap: the copy stops before it, and says so once.
	y, err := c.OpenLog(ctx, "y")
	if err != nil {
		t.Fatal(err)
	}
	yWant := string(appendTo(y, "task_y_300.jsonl", 1, "y", eventlog.TaskStart))
	y2 := line(t, "y", 3, eventlog.Warning)
	if err := y.Append(ctx, 3, y2); err != nil { // seq 2 missing
		t.Fatal(err)
	}
	if err := y.Append(ctx, 4, line(t, "y", 4, eventlog.Warning)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the gap said", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return strings.Contains(strings.Join(said, "\n"), "jumps from seq")
	})
	if got := read(filepath.Join(dir, "logs", "task_y_300.jsonl")); got != yWant {
		t.Fatalf("the copy of a log with a gap holds %q, want %q", got, yWant)
	}

	// A name from the hub never leads out of the copy's folder.
	z, err := c.OpenLog(ctx, "z")
	if err != nil {
		t.Fatal(err)
	}
	appendTo(z, "../../escape.jsonl", 1, "z", eventlog.TaskStart)
	eventually(t, "z copied under a name of its own", func() bool {
		ms, _ := filepath.Glob(filepath.Join(dir, "logs", "task_z_*.jsonl"))
		return len(ms) == 1
	})
	if _, err := os.Stat(filepath.Join(dir, "..", "escape.jsonl")); err == nil {
		t.Fatal("a log name from the hub wrote outside the copy")
	}

	// The hub drops the task's log and its index entry: the copy goes.
	if err := x.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.UnindexTask(ctx, "x.1"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the copy of a dropped log removed", func() bool {
		_, err := os.Stat(newPath)
		return os.IsNotExist(err)
	})
}
