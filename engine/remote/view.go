package remote

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The view of the whole cluster (docs/spec.md §8.8): what apollo serve
// --hub reads of every task's log, and who holds each task, without being
// any task's coordinator.

// LogMsg is one record of a task's log as the hub's log stream holds it.
type LogMsg struct {
	// Token is the task's part of the subject (Token of its id).
	Token string
	Seq   int64  // the record's seq
	Name  string // the log's file name where it was written, "" if unsaid
	Line  []byte // the record's exact line
	// Stream is the message's sequence in the stream; Pending how many
	// messages the stream held after it when it was delivered.
	Stream, Pending uint64
}

// logPrefix is the subjects' part before a task's token.
const logPrefix = "apollo.log."

// LogStreamLast is the stream sequence of the last record of any task's
// log in the hub, 0 when there is none.
func (c *Client) LogStreamLast(ctx context.Context) (uint64, error) {
	s, err := c.Stream(ctx, LogStream)
	if err != nil {
		return 0, err
	}
	var last uint64
	err = c.Do(ctx, "read the state of "+LogStream, func(ctx context.Context) error {
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs > 0 {
			last = info.State.LastSeq
		}
		return nil
	})
	return last, err
}

// FollowLogs hands fn every record of every task's log in the hub, in the
// order the hub stored them, from stream sequence from on (1 or 0: from
// the first), and then each new one as it is stored, until ctx is done
// (it then returns nil). An ordered consumer reads them; a broken one is
// made again where the last left off.
func (c *Client) FollowLogs(ctx context.Context, from uint64, fn func(LogMsg)) error {
	next := max(from, 1)
	for ctx.Err() == nil {
		var cons jetstream.Consumer
		err := c.Do(ctx, "follow "+LogStream, func(ctx context.Context) error {
			var err error
			cons, err = c.JS.OrderedConsumer(ctx, LogStream, jetstream.OrderedConsumerConfig{
				FilterSubjects: []string{logPrefix + ">"}, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: next})
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		it, err := cons.Messages()
		if err != nil {
			if !sleep(ctx, time.Second) {
				return nil
			}
			continue
		}
		stop := context.AfterFunc(ctx, it.Stop)
		for {
			m, err := it.Next()
			if err != nil {
				break
			}
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if md.Sequence.Stream < next {
				continue
			}
			next = md.Sequence.Stream + 1
			seq, _ := strconv.ParseInt(m.Headers().Get(HeaderSeq), 10, 64)
			fn(LogMsg{Token: strings.TrimPrefix(m.Subject(), logPrefix), Seq: seq, Name: m.Headers().Get(HeaderLog),
				Line: m.Data(), Stream: md.Sequence.Stream, Pending: md.NumPending})
		}
		stop()
		it.Stop()
		if !sleep(ctx, 200*time.Millisecond) {
			return nil
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// HasLog reports whether the hub holds a log for the task of token.
func (c *Client) HasLog(ctx context.Context, token string) (bool, error) {
	s, err := c.Stream(ctx, LogStream)
	if err != nil {
		return false, err
	}
	has := false
	err = c.Do(ctx, "read the last record of "+logPrefix+token, func(ctx context.Context) error {
		_, err := s.GetLastMsgForSubject(ctx, logPrefix+token)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			has = false
			return nil
		}
		has = err == nil
		return err
	})
	return has, err
}

// TaskHolders reads who holds each task's lease, by the task's token.
func (c *Client) TaskHolders(ctx context.Context) (map[string]Holder, error) {
	kv, err := c.kv(ctx, LeaseBucket)
	if err != nil {
		return nil, err
	}
	out := map[string]Holder{}
	err = c.Do(ctx, "list the tasks' leases", func(ctx context.Context) error {
		clear(out)
		w, err := kv.WatchFiltered(ctx, []string{"task.>"}, jetstream.IgnoreDeletes())
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
					return nil
				}
				var h Holder
				if json.Unmarshal(e.Value(), &h) == nil {
					out[strings.TrimPrefix(e.Key(), "task.")] = h
				}
			}
		}
	})
	return out, err
}

// UnindexTask removes the task's entry from the task index (apollo gc
// --hub, once its log is archived and purged). A task with none is left as
// it is.
func (c *Client) UnindexTask(ctx context.Context, taskID string) error {
	kv, err := c.kv(ctx, TasksBucket)
	if err != nil {
		return err
	}
	return c.Do(ctx, "remove task "+taskID+" from the index", func(ctx context.Context) error {
		err := kv.Purge(ctx, Token(taskID))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil
		}
		return err
	})
}

// PurgeRead removes from the hub the task's records up to the last that
// Read handed over (apollo gc --hub, once they are archived): a record
// stored after that read is kept.
func (l *Log) PurgeRead(ctx context.Context) error {
	if l.last == 0 {
		return nil
	}
	s, err := l.c.Stream(ctx, LogStream)
	if err != nil {
		return err
	}
	upTo := l.last
	return l.c.Do(ctx, "purge "+l.subject, func(ctx context.Context) error {
		return s.Purge(ctx, jetstream.WithPurgeSubject(l.subject), jetstream.WithPurgeSequence(upTo+1))
	})
}
