package eventlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// TestPublishBeforeWrite: with Publish, every record's line is handed over
// before it enters the file — the first record of a new log, appended
// ones, and records another process appended — and the file holds exactly
// the bytes handed over, seq for seq. A refusal writes nothing, then or
// after.
func TestPublishBeforeWrite(t *testing.T) {
	path := newLogPath(t)
	var published bytes.Buffer
	var seqs []int64
	refuse := false
	publish := func(first int64, lines [][]byte) error {
		if refuse {
			return errors.New("refused by the copy")
		}
		for i, line := range lines {
			seq := first + int64(i)
			if fi, err := os.Stat(path); err == nil && seq != 3 && fi.Size() != int64(published.Len()) { // 3: the other process's, in the file already
				t.Errorf("record seq %d: the file (%d bytes) is ahead of what was published (%d bytes)", seq, fi.Size(), published.Len())
			}
			seqs = append(seqs, seq)
			published.Write(line)
		}
		return nil
	}
	w, err := Open(path, WriterOptions{TaskID: testTask, Now: fixedNow, Create: true, First: taskStart(), Publish: publish}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, w, &Record{EventType: StepStart, StepID: "a", Status: Running})
	// Another process appends (apollo script): handed over at the next append.
	other, err := Open(path, WriterOptions{TaskID: testTask, Now: fixedNow}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustAppend(t, other, &Record{EventType: Warning, Status: Running, Message: "from another process"})
	mustClose(t, other)
	mustAppend(t, w, &Record{EventType: StepEnd, StepID: "a", Status: Success})
	file, _ := os.ReadFile(path)
	if !bytes.Equal(file, published.Bytes()) {
		t.Errorf("the file differs from what was published:\nfile:\n%s\npublished:\n%s", file, published.Bytes())
	}
	if len(seqs) != 4 || seqs[0] != 1 || seqs[3] != 4 {
		t.Errorf("published seqs %v, want 1..4", seqs)
	}

	refuse = true
	err = w.Append(&Record{EventType: StepStart, StepID: "b", Status: Running})
	var pe *PublishError
	if !errors.As(err, &pe) || pe.Seq != 5 {
		t.Fatalf("append refused by Publish: %v, want a PublishError for seq 5", err)
	}
	refuse = false
	if err := w.Append(&Record{EventType: StepStart, StepID: "c", Status: Running}); !errors.As(err, &pe) {
		t.Errorf("append after a refusal: %v, want the sticky PublishError", err)
	}
	w.Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(after, file) {
		t.Errorf("records were written after the refusal:\n%s", after[len(file):])
	}
}

// TestPublishGroups: parallel appends are handed over together, fewer calls
// than records, while each append still returns only once its record is
// published and in the file; the file holds what was handed over, seq after
// seq.
func TestPublishGroups(t *testing.T) {
	path := newLogPath(t)
	var (
		mu        sync.Mutex
		published bytes.Buffer
		next      int64 = 1
		calls     int
	)
	release := make(chan struct{})
	publish := func(first int64, lines [][]byte) error {
		if first > 1 {
			<-release // hold the hand-over while more appends queue up
		}
		mu.Lock()
		defer mu.Unlock()
		if first != next {
			t.Errorf("hand-over starts at seq %d, want %d", first, next)
		}
		next += int64(len(lines))
		calls++
		for _, l := range lines {
			published.Write(l)
		}
		return nil
	}
	w, err := Open(path, WriterOptions{TaskID: testTask, Now: fixedNow, Create: true, First: taskStart(), Publish: publish, PublishDurable: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const appends = 40
	var wg sync.WaitGroup
	for i := range appends {
		wg.Go(func() {
			r := &Record{EventType: StepStart, StepID: fmt.Sprintf("s%d", i), Status: Running}
			if err := w.AppendDurable(r); err != nil {
				t.Errorf("append: %v", err)
				return
			}
			mu.Lock()
			in := bytes.Contains(published.Bytes(), []byte(`"step_id":"`+r.StepID+`"`))
			mu.Unlock()
			if r.Seq < 2 || !in {
				t.Errorf("append of %s returned with seq %d, published %v", r.StepID, r.Seq, in)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // let them queue behind the held hand-over
	close(release)
	wg.Wait()
	if calls >= appends {
		t.Errorf("%d appends took %d hand-overs, want fewer", appends, calls)
	}

	if err := w.AppendUnsynced(&Record{EventType: StepEnd, StepID: "s0", Status: Success}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	file, _ := os.ReadFile(path)
	if !bytes.Equal(file, published.Bytes()) {
		t.Errorf("the file differs from what was published:\nfile:\n%s\npublished:\n%s", file, published.Bytes())
	}
	if n := bytes.Count(file, []byte("\n")); n != appends+2 || next != appends+3 {
		t.Errorf("the log holds %d records and %d were handed over, want %d", n, next-1, appends+2)
	}
	recs, _, err := ReadAll(path, ReadOptions{TaskID: testTask})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			t.Fatalf("record %d has seq %d", i+1, r.Seq)
		}
	}
}

// TestPublishGroupRefused: a refused hand-over fails every append of its
// group and every one after, and nothing of them reaches the file.
func TestPublishGroupRefused(t *testing.T) {
	path := newLogPath(t)
	refuse := false
	publish := func(first int64, lines [][]byte) error {
		if refuse {
			return errors.New("refused by the copy")
		}
		return nil
	}
	w, err := Open(path, WriterOptions{TaskID: testTask, Now: fixedNow, Create: true, First: taskStart(), Publish: publish, PublishDurable: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	refuse = true
	var pe *PublishError
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c"} {
		wg.Go(func() {
			if err := w.AppendUnsynced(&Record{EventType: StepStart, StepID: id, Status: Running}); !errors.As(err, new(*PublishError)) {
				t.Errorf("append of %s in a refused hand-over: %v, want a PublishError", id, err)
			}
		})
	}
	wg.Wait()
	if err := w.Sync(); !errors.As(err, &pe) {
		t.Errorf("Sync after a refused hand-over: %v, want the PublishError", err)
	}
	w.Close()
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Errorf("records were written after the refusal:\n%s", after[len(before):])
	}
}
