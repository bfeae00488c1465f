package eventlog

import (
	"fmt"
)

// A writer with Publish hands records to a copy kept elsewhere (the hub's
// replicated log) before its file, and each hand-over is a round trip to
// that copy. Parallel appends share one (group publication, as fsyncs are
// shared by group commit): an append joins a queue, and the append that
// finds no publication under way leads one — it takes every queued record,
// numbers them, hands them over in one call, writes them to the file in
// order and wakes their callers; records queued meanwhile go in its next
// round. Every append returns once its record is published and in the
// file, so what a caller reads of the run's state after an append (the
// writer's OnAppend) includes it.

// maxPublishBatch bounds the records of one hand-over (the hub's atomic
// batches hold at most 1,000 messages).
const maxPublishBatch = 256

// queued is one record waiting for its publication.
type queued struct {
	r    *Record
	done bool
	end  int64 // the log's size after the record
	err  error
}

// enqueue queues r (a copy, numbered when it is published) and returns once
// it is published and written, with r.Seq set.
func (w *Writer) enqueue(r *Record) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return 0, w.err
	}
	if w.f == nil {
		return 0, fmt.Errorf("event log %s: append after close", w.path)
	}
	rec := *r
	rec.TaskID = w.opts.TaskID
	if rec.Timestamp == "" {
		rec.Timestamp = FormatTime(w.opts.Now())
	}
	q := &queued{r: &rec}
	w.pending = append(w.pending, q)
	for !q.done {
		if !w.publishing {
			w.publishing = true
			w.leadLocked()
			continue
		}
		w.cond.Wait()
	}
	r.Seq, r.TaskID, r.Timestamp = rec.Seq, rec.TaskID, rec.Timestamp
	return q.end, q.err
}

// leadLocked publishes and writes the queue, round after round, until it is
// empty; w.mu is held (and released during each hand-over) and
// w.publishing was set by the caller, which this clears.
func (w *Writer) leadLocked() {
	for len(w.pending) > 0 {
		n := min(len(w.pending), maxPublishBatch)
		batch := w.pending[:n:n]
		w.pending = w.pending[n:]
		w.publishRound(batch)
	}
	w.pending = nil
	w.publishing = false
	w.cond.Broadcast()
}

// publishRound numbers the batch's records after the log's last, hands them
// over in one call and writes them to the file; w.mu is held, and released
// during the hand-over. Each record of the batch is done when it returns.
func (w *Writer) publishRound(batch []*queued) {
	finish := func(err error) {
		for _, q := range batch {
			if !q.done {
				q.done, q.err = true, err
			}
		}
		w.cond.Broadcast()
	}
	if w.err != nil {
		finish(w.err)
		return
	}
	if w.f == nil {
		finish(fmt.Errorf("event log %s: append after close", w.path))
		return
	}
	w.waitForSyncLocked()
	if err := w.lockForWrite(); err != nil {
		finish(err)
		return
	}
	defer w.funlock()
	first := w.seq + 1
	lines := make([][]byte, 0, len(batch))
	recs := make([]*queued, 0, len(batch))
	for _, q := range batch {
		q.r.Seq = first + int64(len(lines))
		line, err := Encode(q.r)
		if err != nil {
			q.done, q.err = true, err // nothing written: the log is intact
			continue
		}
		lines, recs = append(lines, line), append(recs, q)
	}
	if len(lines) == 0 {
		finish(nil)
		return
	}
	// The hand-over runs without w.mu: appends go on queueing meanwhile.
	// The flock stays held, so no other process appends in between.
	w.mu.Unlock()
	err := w.opts.Publish(first, lines)
	w.mu.Lock()
	if err != nil {
		w.failLocked(&PublishError{Path: w.path, Seq: first, Err: err})
		finish(w.err)
		return
	}
	w.waitForSyncLocked()
	for i, q := range recs {
		end, err := w.writeLineLocked(q.r, lines[i])
		q.done, q.end, q.err = true, end, err
		if err != nil {
			break
		}
	}
	finish(w.err)
}
