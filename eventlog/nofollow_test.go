package eventlog

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestOpenRefusesLinkedLog: a symbolic link at a log's path is never
// followed, whatever it points to — a good log, someone's file, nothing —
// and whether the log is opened, created or created with its first record.
func TestOpenRefusesLinkedLog(t *testing.T) {
	good, _ := sampleLog(t)
	tests := []struct {
		name    string
		content []byte // of the target; nil: none (a dangling link)
		opts    WriterOptions
	}{
		{"to a good log", good, WriterOptions{}},
		{"to an empty file", []byte{}, WriterOptions{}},
		{"to someone's file, create", []byte("precious\n"), WriterOptions{Create: true}},
		{"dangling", nil, WriterOptions{}},
		{"dangling, first record", nil, WriterOptions{First: taskStart()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "precious")
			untouched := func() {
				if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("Open made the link's target (%v)", err)
				}
			}
			if tt.content != nil {
				target, untouched = plantTarget(t, tt.content)
			}
			path := newLogPath(t)
			mustSymlink(t, target, path)
			opts := tt.opts
			opts.TaskID = testTask
			w, err := Open(path, opts, nil)
			if err == nil {
				w.Append(stepStart("x"))
				w.Close()
				t.Fatal("Open through a symbolic link succeeded, want a refusal")
			}
			var ue *UnsafeFileError
			if !errors.As(err, &ue) || ue.Path != path {
				t.Errorf("Open = %v, want an *UnsafeFileError", err)
			}
			untouched()
			if fi, err := os.Lstat(path); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("the link at the log's path was replaced (%v)", err)
			}
		})
	}
}

// TestOpenRefusesPipe: a named pipe at a log's path neither blocks the
// writer nor a reader.
func TestOpenRefusesPipe(t *testing.T) {
	path := newLogPath(t)
	if err := unix.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() {
		w, err := Open(path, WriterOptions{TaskID: testTask}, nil)
		if err == nil {
			w.Close()
		}
		done <- err
	}()
	go func() {
		_, err := Read(path, ReadOptions{}, func(*Record) error { return nil })
		done <- err
	}()
	for range 2 {
		select {
		case err := <-done:
			var ue *UnsafeFileError
			if !errors.As(err, &ue) {
				t.Errorf("Open or Read of a named pipe = %v, want an *UnsafeFileError", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Open or Read of a named pipe blocked")
		}
	}
}

// TestRepairReplacesLinkedSideFile: a link planted where a torn tail's side
// file goes is replaced by the side file, its target untouched.
func TestRepairReplacesLinkedSideFile(t *testing.T) {
	good, _ := sampleLog(t)
	torn := []byte(`{"seq":99,"tim`)
	path := writeLog(t, append(bytes.Clone(good), torn...))
	target, untouched := plantTarget(t, []byte("precious\n"))
	side := fmt.Sprintf("%s.torn-%d", path, len(good))
	mustSymlink(t, target, side)
	w := openLog(t, path, WriterOptions{})
	mustClose(t, w)
	untouched()
	fi, err := os.Lstat(side)
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("side file %s: %v, %v; want a regular file", side, fi, err)
	}
	if got := readFile(t, side); !bytes.Equal(got, torn) {
		t.Errorf("side file holds %q, want the cut bytes %q", got, torn)
	}
}

// TestSnapshotLinks: a link planted at a snapshot's path is not read (the
// snapshot is ignored, as any that does not match) and is replaced by the
// next snapshot, its target untouched; a named pipe there blocks nothing.
func TestSnapshotLinks(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "task_t1_1.jsonl")
	recs := logRecords(testTask, sampleRecords())
	ends := writeHistory(t, logPath, recs)
	snap, err := NewSnapshot(logPath, ends[len(ends)-1], int64(len(recs)), Version, Replay(testTask, recs))
	if err != nil {
		t.Fatal(err)
	}
	// The target is a good snapshot: following the link would use it.
	good := filepath.Join(t.TempDir(), "good.snapshot.json")
	mustWriteSnapshot(t, good, snap)
	target, untouched := plantTarget(t, readFile(t, good))
	snapPath := filepath.Join(dir, "state", "t1.snapshot.json")
	if err := os.Mkdir(filepath.Dir(snapPath), 0o755); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, target, snapPath)

	var ue *UnsafeFileError
	if _, err := LoadSnapshot(snapPath, logPath, testTask); !errors.As(err, &ue) {
		t.Errorf("LoadSnapshot through a link = %v, want an *UnsafeFileError", err)
	}
	mustWriteSnapshot(t, snapPath, snap)
	untouched()
	if fi, err := os.Lstat(snapPath); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("snapshot after WriteSnapshot over a link: %v, %v; want a regular file", fi, err)
	}
	if got, err := LoadSnapshot(snapPath, logPath, testTask); err != nil || got.Seq != int64(len(recs)) {
		t.Errorf("LoadSnapshot = %v, %v; want the snapshot just written", got, err)
	}

	mustRemove(t, snapPath)
	if err := unix.Mkfifo(snapPath, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := LoadSnapshot(snapPath, logPath, testTask)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.As(err, &ue) {
			t.Errorf("LoadSnapshot of a named pipe = %v, want an *UnsafeFileError", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LoadSnapshot of a named pipe blocked")
	}
}
