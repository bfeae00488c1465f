package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// A task's event log in the hub (docs/spec.md §8.8): one subject of the
// log stream per task, one message per record, whose payload is the
// record's exact JSONL line. Every append says which message it expects
// to be the subject's last (Nats-Expected-Last-Subject-Sequence, 0 for a
// task with none): the stream stores it only then, so a coordinator that
// another has replaced is refused by the store itself.

// Headers of a log message: the run it belongs to, the record's seq
// (readable without parsing the line), and the lease revision of the
// coordinator that wrote it (for people; the store's check is the fence).
const (
	HeaderRun   = "Apollo-Run"
	HeaderSeq   = "Apollo-Seq"
	HeaderEpoch = "Apollo-Epoch"
	// HeaderLog is the log's file name in the coordinator's state folder,
	// which a coordinator that rebuilds the log gives its copy.
	HeaderLog = "Apollo-Log"
)

// LogSubject is the subject of a task's log records.
func LogSubject(taskID string) string { return "apollo.log." + Token(taskID) }

// FencedError says another coordinator writes the task's log in the hub:
// this one's append was refused, and it must stop at once, acting on
// nothing more.
type FencedError struct {
	TaskID string
	Seq    int64 // the seq this coordinator tried to append
	// Theirs is the seq of the subject's last record, 0 if unknown.
	Theirs int64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("task %s: the hub refused this coordinator's record seq %d: another coordinator has written the task's log since "+
		"(its last record there is seq %d); this one stops and dispatches nothing more", e.TaskID, e.Seq, e.Theirs)
}

// LogFullError says the hub refused a record because the log stream is at
// its bound (apollo hub --log-max-bytes) or the hub's storage is full:
// nothing was stored, and nothing of any log was dropped. The coordinator
// stops; once finished runs are archived (apollo gc --hub) or the bound is
// raised, the same command resumes the task.
type LogFullError struct {
	TaskID string
	Seq    int64
	Cause  error
}

func (e *LogFullError) Error() string {
	return fmt.Sprintf("task %s: the hub refused record seq %d: its log stream %s is full (%v); nothing was dropped. "+
		"Archive finished runs with apollo gc --hub URLS --older-than AGE, or raise apollo hub --log-max-bytes, "+
		"then run the same command to resume the task", e.TaskID, e.Seq, LogStream, e.Cause)
}

func (e *LogFullError) Unwrap() error { return e.Cause }

// full reports whether err is the hub refusing a message for want of room:
// the stream at its bound (discard new), or the hub's storage used up.
func full(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10077: // JSStreamStoreFailedF: the store's own refusal
		d := strings.ToLower(apiErr.Description)
		return strings.Contains(d, "maximum bytes") || strings.Contains(d, "maximum messages") || strings.Contains(d, "resources")
	case 10047: // JSStorageResourcesExceededErr
		return true
	}
	return false
}

// Log is a coordinator's writer and reader of one task's log in the hub.
// Appends are sequential: each waits for the stream's acknowledgement,
// whose sequence is the next one's expectation.
type Log struct {
	c       *Client
	taskID  string
	subject string
	// last is the stream sequence of the subject's last message, 0 when
	// it has none; lastSeq the record seq it holds.
	last    uint64
	lastSeq int64
	// Run, Epoch and Name go into the headers of each append.
	Run   string
	Epoch uint64
	Name  string
	// noBatch is set once the stream refused an atomic batch for want of
	// the setting: appends go one by one.
	noBatch bool
	// replicas is the log stream's replica count when the log was opened
	// (0 if the hub did not say).
	replicas int
}

// soloBatchR1 is the most records AppendBatch appends one by one on a log
// stream of one replica rather than as an atomic batch: there a batch of
// two took 2.7 ms against 0.36 ms for each acknowledged publish
// (docs/performance.md), where on three replicas the batch is the faster.
const soloBatchR1 = 6

// OpenLog looks up the end of the task's log in the hub.
func (c *Client) OpenLog(ctx context.Context, taskID string) (*Log, error) {
	l := &Log{c: c, taskID: taskID, subject: LogSubject(taskID)}
	m, err := l.lastMsg(ctx)
	if err != nil {
		return nil, err
	}
	if m != nil {
		l.last, l.lastSeq = m.Sequence, headerSeq(m)
	}
	if s, err := c.Stream(ctx, LogStream); err == nil {
		if info := s.CachedInfo(); info != nil {
			l.replicas = info.Config.Replicas
		}
	}
	return l, nil
}

// OneByOne says that the records of one AppendBatch are stored as that
// many writes, one after another (a stream of one replica, where an atomic
// batch is the slower), rather than as one atomic batch, one replicated
// write for them all.
func (l *Log) OneByOne() bool { return l.replicas == 1 }

// Last is the record seq of the log's last record in the hub, 0 if it has
// none.
func (l *Log) Last() int64 { return l.lastSeq }

// lastMsg is the subject's last message (a direct get by subject), nil if
// it has none.
func (l *Log) lastMsg(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	s, err := l.c.Stream(ctx, LogStream)
	if err != nil {
		return nil, err
	}
	var m *jetstream.RawStreamMsg
	err = l.c.Do(ctx, "read the last record of "+l.subject, func(ctx context.Context) error {
		var err error
		m, err = s.GetLastMsgForSubject(ctx, l.subject)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m = nil
			return nil
		}
		return err
	})
	return m, err
}

func headerSeq(m *jetstream.RawStreamMsg) int64 {
	n, _ := strconv.ParseInt(m.Header.Get(HeaderSeq), 10, 64)
	return n
}

// Append stores line, the record seq, as the log's next message, and
// returns once the hub has acknowledged it. A *FencedError means another
// coordinator wrote the log meanwhile: nothing was stored. A retry whose
// first try was stored (its acknowledgement lost) is recognised by its seq
// and bytes and counts as stored.
func (l *Log) Append(ctx context.Context, seq int64, line []byte) error {
	return l.AppendBatch(ctx, seq, [][]byte{line})
}

// AppendBatch stores lines, records first, first+1 ..., as the log's next
// messages, as Append does one: all of them or none, in one atomic batch
// of the stream (one replicated write for them all). On a stream that
// takes no atomic batches, or a hub with too many under way, they are
// appended one by one, in order, as are a few on a stream of one replica
// (soloBatchR1), where that is the faster.
func (l *Log) AppendBatch(ctx context.Context, first int64, lines [][]byte) error {
	if len(lines) > 1 && !l.noBatch && (l.replicas != 1 || len(lines) > soloBatchR1) {
		err := l.appendAtomic(ctx, first, lines)
		var api *jetstream.APIError
		if !errors.As(err, &api) {
			return err
		}
		switch api.ErrorCode {
		case errAtomicPublishDisabled:
			l.noBatch = true // a stream an older apollo made, not yet updated
		case errAtomicPublishTooManyInflight:
		default:
			return err
		}
	}
	for i, line := range lines {
		seq := first + int64(i)
		err := l.c.Do(ctx, "append record "+strconv.FormatInt(seq, 10)+" to "+l.subject, func(ctx context.Context) error {
			ack, err := l.c.JS.PublishMsg(ctx, l.message(seq, line), jetstream.WithExpectLastSequencePerSubject(l.last))
			if err == nil {
				l.last, l.lastSeq = ack.Sequence, seq
				return nil
			}
			return l.refused(ctx, err, seq, line)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Error codes of atomic batches that make AppendBatch append one by one.
const (
	errAtomicPublishDisabled        = 10174 // JSAtomicPublishDisabledErr
	errAtomicPublishTooManyInflight = 10210 // JSAtomicPublishTooManyInflight
)

// appendAtomic stores lines in one atomic batch, the first message
// expecting the subject's last to be l.last. Each try is a new batch: one
// whose commit was lost was either stored whole or not at all. It returns
// a *jetstream.APIError of the batch's refusal as it is.
func (l *Log) appendAtomic(ctx context.Context, first int64, lines [][]byte) error {
	lastSeq := first + int64(len(lines)) - 1
	what := fmt.Sprintf("append records %d to %d to %s", first, lastSeq, l.subject)
	return l.c.Do(ctx, what, func(ctx context.Context) error {
		id := nuid.Next()
		var commit *nats.Msg
		for i, line := range lines {
			m := l.message(first+int64(i), line)
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i+1))
			if i == 0 {
				m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(l.last, 10))
			}
			if i == len(lines)-1 {
				m.Header.Set("Nats-Batch-Commit", "1")
				commit = m
				break
			}
			if err := l.c.NC.PublishMsg(m); err != nil {
				return err
			}
		}
		reply, err := l.c.NC.RequestMsgWithContext(ctx, commit)
		if err != nil {
			return err
		}
		var ack struct {
			Error    *jetstream.APIError `json:"error"`
			Sequence uint64              `json:"seq"`
			Count    int                 `json:"count"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil {
			return fmt.Errorf("%s: the hub's answer is not an acknowledgement: %w", what, err)
		}
		if ack.Error != nil {
			if c := ack.Error.ErrorCode; c == errAtomicPublishDisabled || c == errAtomicPublishTooManyInflight {
				return Final(ack.Error)
			}
			return l.refused(ctx, ack.Error, lastSeq, lines[len(lines)-1])
		}
		if ack.Count != len(lines) {
			return Final(fmt.Errorf("%s: the hub stored a batch of %d records", what, ack.Count))
		}
		l.last, l.lastSeq = ack.Sequence, lastSeq
		return nil
	})
}

// message is the log message of record seq.
func (l *Log) message(seq int64, line []byte) *nats.Msg {
	msg := nats.NewMsg(l.subject)
	msg.Data = line
	msg.Header.Set(HeaderSeq, strconv.FormatInt(seq, 10))
	if l.Run != "" {
		msg.Header.Set(HeaderRun, l.Run)
	}
	if l.Name != "" {
		msg.Header.Set(HeaderLog, l.Name)
	}
	if l.Epoch != 0 {
		msg.Header.Set(HeaderEpoch, strconv.FormatUint(l.Epoch, 10))
	}
	return msg
}

// refused handles the hub's refusal err of an append whose last record is
// seq, line: nil when an earlier try of this very append was stored (its
// acknowledgement lost), a final *FencedError when another coordinator
// wrote the subject, a final *LogFullError at the stream's bound, and err
// to try again otherwise.
func (l *Log) refused(ctx context.Context, err error, seq int64, line []byte) error {
	if full(err) {
		return Final(&LogFullError{TaskID: l.taskID, Seq: seq, Cause: err})
	}
	if !LostRace(err) {
		if permanent(err) {
			return Final(err)
		}
		return err
	}
	// Refused: either an earlier try of this very append was stored, or
	// someone else wrote the subject.
	m, gerr := l.lastMsg(ctx)
	if gerr != nil {
		return gerr
	}
	if m != nil && headerSeq(m) == seq && bytes.Equal(m.Data, line) {
		l.last, l.lastSeq = m.Sequence, seq
		return nil
	}
	if m == nil || m.Sequence <= l.last {
		// The subject's last message is still the one this append expects:
		// the refusal (10164) was of a write in flight, which may be an
		// earlier try of this very append on a hub that lost its quorum, or
		// the read came from a lagging replica. Only a stored message of
		// another writer fences; try again.
		return fmt.Errorf("record %d refused while a write to %s is in flight: %w", seq, l.subject, err)
	}
	return Final(&FencedError{TaskID: l.taskID, Seq: seq, Theirs: headerSeq(m)})
}

// Read calls fn with each record line of the task's log in the hub, in
// order, until the one that was last when Read began, with the file name
// the log had where it was written.
func (l *Log) Read(ctx context.Context, fn func(seq int64, line []byte, name string) error) error {
	end, err := l.lastMsg(ctx)
	if err != nil || end == nil {
		return err
	}
	// An ordered consumer reads the subject in pages: one request for many
	// records, which lie scattered over the stream when tasks run at once.
	var cons jetstream.Consumer
	err = l.c.Do(ctx, "read "+l.subject, func(ctx context.Context) error {
		var err error
		cons, err = l.c.JS.OrderedConsumer(ctx, LogStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{l.subject}})
		return err
	})
	if err != nil {
		return err
	}
	var read uint64 // the stream sequence of the last record handed to fn
	// want is the next page's size: no more than what is left, so that a
	// page ends when its last record comes, not at its deadline.
	want := 500
	for read < end.Sequence {
		err := l.c.Do(ctx, "read "+l.subject, func(ctx context.Context) error {
			batch, err := cons.Fetch(want, jetstream.FetchContext(ctx))
			if err != nil {
				return err
			}
			got := 0
			for m := range batch.Messages() {
				got++
				md, err := m.Metadata()
				if err != nil {
					return err
				}
				if md.Sequence.Stream <= read || md.Sequence.Stream > end.Sequence {
					continue
				}
				seq, _ := strconv.ParseInt(m.Headers().Get(HeaderSeq), 10, 64)
				if err := fn(seq, m.Data(), m.Headers().Get(HeaderLog)); err != nil {
					return Final(err)
				}
				read = md.Sequence.Stream
				want = int(min(500, max(1, md.NumPending)))
				if md.NumPending == 0 {
					break
				}
			}
			if err := batch.Error(); err != nil && !(got > 0 && errors.Is(err, context.DeadlineExceeded)) {
				return err
			}
			if got == 0 {
				return fmt.Errorf("read the log of task %s from the hub: nothing came after stream sequence %d, before its last record %d",
					l.taskID, read, end.Sequence)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	l.last, l.lastSeq = end.Sequence, headerSeq(end)
	return nil
}

// Purge removes the task's log from the hub: a new log of the task (--fresh,
// after apollo gc) starts the subject over. Only the lease's holder calls it.
func (l *Log) Purge(ctx context.Context) error {
	s, err := l.c.Stream(ctx, LogStream)
	if err != nil {
		return err
	}
	err = l.c.Do(ctx, "purge "+l.subject, func(ctx context.Context) error {
		return s.Purge(ctx, jetstream.WithPurgeSubject(l.subject))
	})
	if err == nil {
		l.last, l.lastSeq = 0, 0
	}
	return err
}

// TaskEntry is a task's entry in the hub's task index (the bucket
// apollo_tasks, one key per task): what a view of the whole cluster lists
// without reading each task's log.
type TaskEntry struct {
	Pipeline    string    `json:"pipeline"`
	TaskID      string    `json:"task_id"`
	Status      string    `json:"status"`
	Started     time.Time `json:"started"`
	Updated     time.Time `json:"updated"`
	Coordinator Holder    `json:"coordinator"`
}

// IndexTask writes the task's entry in the task index.
func (c *Client) IndexTask(ctx context.Context, e TaskEntry) error {
	kv, err := c.kv(ctx, TasksBucket)
	if err != nil {
		return err
	}
	val, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return c.Do(ctx, "index task "+e.TaskID, func(ctx context.Context) error {
		_, err := kv.Put(ctx, Token(e.TaskID), val)
		return err
	})
}

// TaskIndexed reads the task's entry in the task index; nil when it has
// none.
func (c *Client) TaskIndexed(ctx context.Context, taskID string) (*TaskEntry, error) {
	kv, err := c.kv(ctx, TasksBucket)
	if err != nil {
		return nil, err
	}
	var e *TaskEntry
	err = c.Do(ctx, "read the index of task "+taskID, func(ctx context.Context) error {
		v, err := kv.Get(ctx, Token(taskID))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		e = &TaskEntry{}
		return Final(json.Unmarshal(v.Value(), e))
	})
	return e, err
}

// ListTasks reads every entry of the task index, in no particular order.
func (c *Client) ListTasks(ctx context.Context) ([]TaskEntry, error) {
	kv, err := c.kv(ctx, TasksBucket)
	if err != nil {
		return nil, err
	}
	var out []TaskEntry
	err = c.Do(ctx, "list the task index", func(ctx context.Context) error {
		out = out[:0]
		w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			return err
		}
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case e := <-w.Updates():
				if e == nil {
					return nil // the initial values are all in
				}
				var te TaskEntry
				if json.Unmarshal(e.Value(), &te) == nil {
					out = append(out, te)
				}
			}
		}
	})
	return out, err
}
