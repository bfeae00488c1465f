package cron

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"apollo/engine/clock"
	"apollo/engine/pipeline"
)

func triggerPipes() (up, down Pipe) {
	up = Pipe{Rel: "up.yaml", Path: "/p/up.yaml", TaskName: "up"}
	down = Pipe{Rel: "down.yaml", Path: "/p/down.yaml", TaskName: "down",
		Triggers: []pipeline.Trigger{{Kind: pipeline.TriggerAfter, After: "up.yaml", AfterPath: "/p/up.yaml", Status: pipeline.AfterSuccess}}}
	return up, down
}

func openPipes(t *testing.T, dir string, clk clock.Clock, w *world, pipes ...Pipe) *Scheduler {
	t.Helper()
	s := open(t, dir, clk, w, pipes[0])
	if err := s.SetPipes(pipes); err != nil {
		t.Fatal(err)
	}
	return s
}

func countLines(s, sub string) int { return strings.Count(s, sub) }

// TestAfterTriggerDecidedOnce: an upstream run that succeeds queues one
// run of the downstream pipeline with the upstream's task id; serve cut off
// after the decision starts it at the next start, once; cut off between the
// decision and the upstream's exit entry, it does not decide again.
func TestAfterTriggerDecidedOnce(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(start)
	w := newWorld()
	up, down := triggerPipes()
	s := openPipes(t, dir, clk, w, up, down)
	if _, err := s.StartNow(Job{Pipe: up, TaskID: "up-1", Trigger: TriggerManual}); err != nil {
		t.Fatal(err)
	}
	w.finish(t, s, "up-1", 0)
	s.Close() // a crash: the queued run is decided, not started

	// Cut the log after the queued entry too: as if serve died between the
	// decision and the exit entry.
	data, _ := os.ReadFile(LogName(dir))
	lines := bytes.SplitAfter(data, []byte("\n"))
	if !strings.Contains(string(lines[len(lines)-2]), `"event":"exited"`) {
		t.Fatalf("last entry is not the exit:\n%s", data)
	}
	os.WriteFile(LogName(dir), bytes.Join(lines[:len(lines)-2], nil), 0o644)

	s = openPipes(t, dir, clk, w, up, down)
	s.Tick() // up-1 is complete: its exit is recorded, the decision stands
	s.Tick()
	got := events(t, dir)
	if n := countLines(got, "queued down-"); n != 1 {
		t.Errorf("%d queued runs of down, want 1:\n%s", n, got)
	}
	if n := countLines(got, "started down-"); n != 1 {
		t.Fatalf("%d started runs of down, want 1:\n%s", n, got)
	}
	job := w.started[len(w.started)-1]
	if job.Vars["trigger.task_id"] != "up-1" || job.Vars["trigger.status"] != "success" || job.Trigger != TriggerAfter {
		t.Errorf("down started with %s %v", job.Trigger, job.Vars)
	}
	w.finish(t, s, job.TaskID, 0)
	s.Close()

	s = openPipes(t, dir, clk, w, up, down)
	defer s.Close()
	s.Tick()
	if got := events(t, dir); countLines(got, "started down-") != 1 || countLines(got, "queued down-") != 1 {
		t.Errorf("a restart started down again:\n%s", got)
	}
}

// TestAfterTriggerStatus: a failed upstream run does not start a trigger
// waiting for success.
func TestAfterTriggerStatus(t *testing.T) {
	dir := t.TempDir()
	w := newWorld()
	up, down := triggerPipes()
	s := openPipes(t, dir, clock.NewFake(start), w, up, down)
	defer s.Close()
	s.StartNow(Job{Pipe: up, TaskID: "up-1", Trigger: TriggerManual})
	w.finish(t, s, "up-1", 1)
	s.Tick()
	if got := events(t, dir); strings.Contains(got, "down-") {
		t.Errorf("a failed upstream started down:\n%s", got)
	}
}

func sign(secret, body string) http.Header {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return http.Header{HeaderSignature: {"sha256=" + hex.EncodeToString(m.Sum(nil))}, HeaderDelivery: {"d-1"}}
}

// TestHook: the answers of a delivery: unknown hook, bad signature, a
// signature by another secret, a good one, its replay, a payload field
// too large for a var.
func TestHook(t *testing.T) {
	dir := t.TempDir()
	w := newWorld()
	t.Setenv("APOLLO_TEST_HOOK_SECRET", "right")
	path, _ := pipeline.ParseJSONPath("$.ref")
	p := Pipe{Rel: "hook.yaml", Path: "/p/hook.yaml", TaskName: "hook", Triggers: []pipeline.Trigger{{Kind: pipeline.TriggerWebhook,
		Webhook: "deploy", Secret: "S", SecretFrom: pipeline.Secret{Name: "S", Env: "APOLLO_TEST_HOOK_SECRET"},
		Vars: map[string]pipeline.JSONPath{"ref": path}}}}
	s := openPipes(t, dir, clock.NewFake(start), w, p)
	defer s.Close()
	body := `{"ref": "main"}`
	cases := []struct {
		name   string
		hook   string
		h      http.Header
		body   string
		status int
	}{
		{"unknown hook", "nosuch", sign("right", body), body, 404},
		{"no signature", "deploy", http.Header{HeaderDelivery: {"d-1"}}, body, 401},
		{"another secret", "deploy", sign("wrong", body), body, 401},
		{"a body changed after signing", "deploy", sign("right", body), `{"ref": "evil"}`, 401},
		{"good", "deploy", sign("right", body), body, 202},
		{"replay", "deploy", sign("right", body), body, 200},
	}
	for _, c := range cases {
		if res := s.Hook(t.Context(), c.hook, c.h, []byte(c.body)); res.Status != c.status {
			t.Errorf("%s: status %d %v, want %d", c.name, res.Status, res.Body, c.status)
		}
	}
	big := `{"ref": "` + strings.Repeat("x", maxTriggerVar+1) + `"}`
	h := sign("right", big)
	h.Set(HeaderDelivery, "d-2")
	if res := s.Hook(t.Context(), "deploy", h, []byte(big)); res.Status != 400 {
		t.Errorf("a field over the bound: status %d, want 400", res.Status)
	}
	s.Tick()
	if got := w.startedIDs(); countLines(got, "/webhook") != 1 {
		t.Errorf("started %q, want one webhook run", got)
	}
	if v := w.started[0].Vars; v["ref"] != "main" || v["trigger.delivery"] != "d-1" {
		t.Errorf("vars %v", v)
	}
}

// TestFileTrigger: with the scheduler running, each new file matching the
// glob starts one run with its path; a file that does not match starts
// none; a restart starts nothing for files decided before.
func TestFileTrigger(t *testing.T) {
	dir, in := t.TempDir(), t.TempDir()
	w := newWorld()
	p := Pipe{Rel: "drop.yaml", Path: "/p/drop.yaml", TaskName: "drop",
		Triggers: []pipeline.Trigger{{Kind: pipeline.TriggerFile, File: "*.csv", Glob: in + "/*.csv"}}}
	run := func(want int, files ...string) {
		t.Helper()
		s := openPipes(t, dir, clock.Real{}, w, p)
		defer s.Close()
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		for _, f := range files {
			// Written whole, then renamed into the glob: with no settle
			// time, a file seen empty and then written is two changes.
			tmp := filepath.Join(in, "."+f+".part")
			if err := os.WriteFile(tmp, []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, filepath.Join(in, f)); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := events(t, dir)
			if n := strings.Count(got, "queued drop-"); n >= want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("want %d decisions:\n%s", want, got)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	run(2, "a.csv", "b.csv", "c.txt")
	w.mu.Lock()
	for _, j := range w.started {
		if !strings.HasSuffix(j.Vars["trigger.path"], ".csv") || j.Trigger != TriggerFile {
			t.Errorf("started %s with %v", j.TaskID, j.Vars)
		}
	}
	w.mu.Unlock()
	run(3, "d.csv") // a restart: a.csv and b.csv start nothing, d.csv one run
	if got := events(t, dir); strings.Count(got, "queued drop-") != 3 {
		t.Errorf("want 3 decisions:\n%s", got)
	}
}

// TestFileTriggerFolderLater: a folder that is not there when serve starts
// has no watch; it is read every second, and its files start runs once it
// appears.
func TestFileTriggerFolderLater(t *testing.T) {
	dir, in := t.TempDir(), filepath.Join(t.TempDir(), "later")
	w := newWorld()
	p := Pipe{Rel: "drop.yaml", Path: "/p/drop.yaml", TaskName: "drop",
		Triggers: []pipeline.Trigger{{Kind: pipeline.TriggerFile, File: "later/*", Glob: in + "/*"}}}
	s := openPipes(t, dir, clock.Real{}, w, p)
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	os.MkdirAll(in, 0o755)
	os.WriteFile(filepath.Join(in, "x"), []byte("x"), 0o644)
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(events(t, dir), "queued drop-"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no run for a file of a folder made after the start:\n%s", events(t, dir))
		}
	}
}
