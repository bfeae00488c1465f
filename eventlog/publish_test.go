package eventlog

import (
	"bytes"
	"errors"
	"os"
	"testing"
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
	publish := func(seq int64, line []byte) error {
		if refuse {
			return errors.New("refused by the copy")
		}
		if fi, err := os.Stat(path); err == nil && seq != 3 && fi.Size() != int64(published.Len()) { // 3: the other process's, in the file already
			t.Errorf("record seq %d: the file (%d bytes) is ahead of what was published (%d bytes)", seq, fi.Size(), published.Len())
		}
		seqs = append(seqs, seq)
		published.Write(line)
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
