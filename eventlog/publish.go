package eventlog

import (
	"fmt"
	"time"
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
// writer's OnAppend) includes it — except AppendUnsynced's, which waits
// for nothing: its record stays queued until the next append that waits
// leads a publication (a chain's STEP_END rides with the next step's
// DISPATCH, one replicated write instead of two), Sync, SyncSoon or Close
// publish the queue, or lingerPublish passes.

// lingerPublish is the longest a record appended with AppendUnsynced waits
// in the queue when nothing else publishes it: long enough for the append
// that acts on it to join its publication, short enough that the log's
// copies lag the run by no more.
const lingerPublish = 2 * time.Millisecond

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
	rec := w.stamped(r)
	q := &queued{r: rec}
	w.pending = append(w.pending, q)
	for !q.done {
		if w.publishing {
			w.cond.Wait()
			continue
		}
		w.leadIdleLocked()
	}
	r.Seq, r.TaskID, r.Timestamp = rec.Seq, rec.TaskID, rec.Timestamp
	return q.end, q.err
}

// stamped is a copy of r carrying the writer's task id and, if r has none,
// a timestamp of now; its seq is given when it is published.
func (w *Writer) stamped(r *Record) *Record {
	rec := *r
	rec.TaskID = w.opts.TaskID
	if rec.Timestamp == "" {
		rec.Timestamp = FormatTime(w.opts.Now())
	}
	return &rec
}

// enqueueLater queues r (a copy) for a later publication and returns at
// once: the next append that waits takes it along, or, if none comes
// within lingerPublish, a publication of its own. A failed publication is
// the writer's sticky error, which the next append, Sync or Close returns.
func (w *Writer) enqueueLater(r *Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if w.f == nil {
		return fmt.Errorf("event log %s: append after close", w.path)
	}
	w.pending = append(w.pending, &queued{r: w.stamped(r)})
	if !w.lingering && !w.publishing {
		w.lingering = true
		w.background.Add(1)
		w.linger = time.AfterFunc(w.lingerFor, func() {
			defer w.background.Done()
			w.mu.Lock()
			defer w.mu.Unlock()
			w.lingering = false
			w.leadIdleLocked()
		})
	}
	return nil
}

// PublishSoon starts the publication of every record AppendUnsynced
// queued, without waiting for it: for a record the run does not act on
// next (a remote step's start, while its body runs), whose publication
// should not wait for the linger and then delay the append that acts on
// the one after. It does nothing without Publish.
func (w *Writer) PublishSoon() {
	if w.opts.Publish == nil {
		return
	}
	w.background.Add(1)
	go func() {
		defer w.background.Done()
		w.mu.Lock()
		defer w.mu.Unlock()
		w.leadIdleLocked()
	}()
}

// publishQueuedLocked returns once every record queued so far is published
// and written, leading the publication itself when no append does; w.mu is
// held.
func (w *Writer) publishQueuedLocked() {
	for len(w.pending) > 0 || w.publishing {
		if w.publishing {
			w.cond.Wait()
			continue
		}
		w.leadIdleLocked()
	}
}

// leadIdleLocked leads the publication of the queue when there is one and
// no append leads it already (one that does takes the queue along); w.mu
// is held.
func (w *Writer) leadIdleLocked() {
	if !w.publishing && len(w.pending) > 0 {
		w.publishing = true
		w.leadLocked()
	}
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
