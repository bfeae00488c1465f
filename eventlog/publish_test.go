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
	nothingAfter(t, path, file)
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
			if err := w.Append(&Record{EventType: StepStart, StepID: id, Status: Running}); !errors.As(err, new(*PublishError)) {
				t.Errorf("append of %s in a refused hand-over: %v, want a PublishError", id, err)
			}
		})
	}
	wg.Wait()
	if err := w.Sync(); !errors.As(err, &pe) {
		t.Errorf("Sync after a refused hand-over: %v, want the PublishError", err)
	}
	w.Close()
	nothingAfter(t, path, before)
}

// TestPublishUnsyncedRides: a record appended with AppendUnsynced waits for
// no publication; it rides with the next append that waits, in the same
// hand-over and before it (a chain's STEP_END with the next DISPATCH), and
// Sync and Close publish what is queued. A refused hand-over of a queued
// record fails the append that took it along, and nothing reaches the file.
func TestPublishUnsyncedRides(t *testing.T) {
	path := newLogPath(t)
	var mu sync.Mutex
	var calls [][]string // the step ids of each hand-over
	refuse := false
	publish := func(first int64, lines [][]byte) error {
		mu.Lock()
		defer mu.Unlock()
		if refuse {
			return errors.New("refused by the copy")
		}
		var ids []string
		for _, l := range lines {
			r, err := Decode(bytes.TrimSuffix(l, []byte("\n")))
			if err != nil {
				t.Errorf("published line %q: %v", l, err)
				continue
			}
			ids = append(ids, r.EventType+":"+r.StepID)
		}
		calls = append(calls, ids)
		return nil
	}
	handedOver := func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprint(calls)
	}
	w, err := Open(path, WriterOptions{TaskID: testTask, Now: fixedNow, Create: true, First: taskStart(), Publish: publish, PublishDurable: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.lingerFor = time.Hour // nothing publishes the queue by itself here
	calls = nil             // the first record's
	end := &Record{EventType: StepEnd, StepID: "a", Status: Success}
	if err := w.AppendUnsynced(end); err != nil {
		t.Fatal(err)
	}
	if got := handedOver(); got != "[]" {
		t.Errorf("AppendUnsynced handed over %s, want nothing yet", got)
	}
	if file, _ := os.ReadFile(path); bytes.Contains(file, []byte(`"step_id":"a"`)) {
		t.Errorf("the queued record is in the file before it was published:\n%s", file)
	}
	if err := w.AppendDurable(&Record{EventType: Dispatch, StepID: "b", Status: Running}); err != nil {
		t.Fatal(err)
	}
	if got, want := handedOver(), "[[STEP_END:a DISPATCH:b]]"; got != want {
		t.Errorf("hand-overs %s, want %s: the queued end rides with the dispatch", got, want)
	}
	if err := w.AppendUnsynced(&Record{EventType: StepStart, StepID: "b", Status: Running}); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if got, want := handedOver(), "[[STEP_END:a DISPATCH:b] [STEP_START:b]]"; got != want {
		t.Errorf("after Sync: hand-overs %s, want %s", got, want)
	}
	if err := w.AppendUnsynced(&Record{EventType: StepEnd, StepID: "b", Status: Success}); err != nil {
		t.Fatal(err)
	}
	mustClose(t, w)
	if got, want := handedOver(), "[[STEP_END:a DISPATCH:b] [STEP_START:b] [STEP_END:b]]"; got != want {
		t.Errorf("after Close: hand-overs %s, want %s", got, want)
	}
	recs, _, err := ReadAll(path, ReadOptions{TaskID: testTask})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 || recs[1].StepID != "a" || recs[2].EventType != Dispatch || recs[4].Seq != 5 {
		t.Errorf("the file holds %d records, want TASK_START, a's end, b's dispatch, start and end, seq 1..5", len(recs))
	}

	// A refused hand-over of a queued record.
	w, err = Open(path, WriterOptions{TaskID: testTask, Now: fixedNow, Publish: publish, PublishDurable: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.lingerFor = time.Hour
	before, _ := os.ReadFile(path)
	mu.Lock()
	refuse = true
	mu.Unlock()
	if err := w.AppendUnsynced(&Record{EventType: StepEnd, StepID: "c", Status: Success}); err != nil {
		t.Fatalf("AppendUnsynced: %v, want nil: it waits for no hand-over", err)
	}
	var pe *PublishError
	if err := w.AppendDurable(&Record{EventType: Dispatch, StepID: "d", Status: Running}); !errors.As(err, &pe) || pe.Seq != 6 {
		t.Errorf("the append that took a refused queued record along: %v, want a PublishError from seq 6", err)
	}
	if err := w.AppendUnsynced(&Record{EventType: StepEnd, StepID: "d", Status: Success}); !errors.As(err, &pe) {
		t.Errorf("AppendUnsynced after a refusal: %v, want the sticky PublishError", err)
	}
	w.Close()
	nothingAfter(t, path, before)
}

// TestPublishUnsyncedLingers: a record queued by AppendUnsynced that no
// later append takes along is published and written by itself.
func TestPublishUnsyncedLingers(t *testing.T) {
	w, path, published := openHandingOver(t, 0)
	if err := w.AppendUnsynced(&Record{EventType: StepStart, StepID: "a", Status: Running}); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-published:
		if h.first != 2 {
			t.Errorf("hand-over from seq %d, want 2", h.first)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the queued record was never handed over")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		file, _ := os.ReadFile(path)
		if bytes.Contains(file, []byte(`"step_id":"a"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queued record was handed over but never written:\n%s", file)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPublishLingerOption: a writer whose PublishLinger is longer than the
// default keeps a record queued by AppendUnsynced for that long — here
// well past the default's 2 ms — and the next append takes it along in
// its own hand-over.
func TestPublishLingerOption(t *testing.T) {
	w, _, published := openHandingOver(t, time.Hour)
	if err := w.AppendUnsynced(&Record{EventType: StepStart, StepID: "a", Status: Running}); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-published:
		t.Fatalf("a hand-over of %d records 100 ms after AppendUnsynced, want none within the writer's linger", h.n)
	case <-time.After(100 * time.Millisecond):
	}
	if err := w.AppendDurable(&Record{EventType: StepEnd, StepID: "a", Status: Success}); err != nil {
		t.Fatal(err)
	}
	if h := <-published; h.n != 2 {
		t.Errorf("the append handed over %d records, want 2: the queued start rides with it", h.n)
	}
}

// handOver is one call of a writer's Publish: its first record's seq and
// how many records it handed over.
type handOver struct {
	first int64
	n     int
}

// openHandingOver opens a new log whose writer (with PublishLinger linger)
// reports each hand-over on the returned channel, once the first record's
// is taken; the writer closes when the test ends.
func openHandingOver(t *testing.T, linger time.Duration) (*Writer, string, chan handOver) {
	t.Helper()
	path := newLogPath(t)
	published := make(chan handOver, 10)
	publish := func(first int64, lines [][]byte) error {
		published <- handOver{first, len(lines)}
		return nil
	}
	w, err := Open(path, WriterOptions{TaskID: testTask, Now: fixedNow, Create: true, First: taskStart(), Publish: publish,
		PublishDurable: true, PublishLinger: linger}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	<-published // the first record's
	return w, path, published
}

// nothingAfter fails t unless the log at path still holds exactly before:
// nothing of a refused hand-over, or after it, reached the file.
func nothingAfter(t *testing.T, path string, before []byte) {
	t.Helper()
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Errorf("records were written after the refusal:\n%s", after[min(len(before), len(after)):])
	}
}
