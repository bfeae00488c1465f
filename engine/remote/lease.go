package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Holder is who holds a task's lease: a coordinator (docs/spec.md §8.5).
type Holder struct {
	Host     string    `json:"host"`
	PID      int       `json:"pid"`
	StateDir string    `json:"state_dir"` // absolute
	Log      string    `json:"log,omitempty"`
	Since    time.Time `json:"since"`
}

// HeldError says another coordinator holds the task's lease.
type HeldError struct {
	TaskID  string
	Holder  Holder
	Renewed time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("task %s is already being run by apollo process %d on host %s (state folder %s, coordinating since %s, lease renewed %s); "+
		"wait for it to end, or stop it",
		e.TaskID, e.Holder.PID, e.Holder.Host, e.Holder.StateDir, e.Holder.Since.Format(time.RFC3339),
		e.Renewed.Format(time.RFC3339))
}

// LostError says a coordinator's lease was taken over by another: it must
// stop at once, dispatching nothing more.
type LostError struct {
	TaskID string
	By     Holder
}

func (e *LostError) Error() string {
	return fmt.Sprintf("task %s: the coordinator's lease on the hub was taken over by apollo process %d on host %s while this one could not renew it; "+
		"this one stops", e.TaskID, e.By.PID, e.By.Host)
}

// Lease is a coordinator's hold on a task across machines: a key in the
// lease bucket, renewed by compare-and-set on its revision, which is the
// coordinator's epoch.
type Lease struct {
	c   *Client
	kv  jetstream.KeyValue
	key string
	me  Holder
	ttl time.Duration
	// rev is the lease's revision: set by the goroutine that renews it,
	// read by those that dispatch.
	rev atomic.Uint64
	tid string
}

// Epoch is the lease's revision.
func (l *Lease) Epoch() uint64 { return l.rev.Load() }

// Holder is who holds the lease: this coordinator.
func (l *Lease) Holder() Holder { return l.me }

// TTL is how long the lease lasts without a renewal.
func (l *Lease) TTL() time.Duration { return l.ttl }

func (c *Client) kv(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	// Looked up once: a worker opens the idem bucket for every attempt,
	// and each lookup is a round trip to the hub before the body's start.
	c.mu.Lock()
	kv, ok := c.buckets[bucket]
	c.mu.Unlock()
	if ok {
		return kv, nil
	}
	err := c.Do(ctx, "open bucket "+bucket, func(ctx context.Context) error {
		var err error
		kv, err = c.JS.KeyValue(ctx, bucket)
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return Final(fmt.Errorf("the hub has no bucket %s: start the hub with apollo hub", bucket))
		}
		return err
	})
	if err == nil {
		c.mu.Lock()
		if c.buckets == nil {
			c.buckets = map[string]jetstream.KeyValue{}
		}
		c.buckets[bucket] = kv
		c.mu.Unlock()
	}
	return kv, err
}

// AcquireLease takes the task's lease for me. The lease is free when no one
// holds it — its key lapses on the hub ttl after its holder's last
// renewal, by the hub's clock — or when its holder is this host and state
// folder (whose task lock this process holds, so the holder is dead).
// Otherwise it returns a *HeldError.
func (c *Client) AcquireLease(ctx context.Context, taskID string, me Holder, ttl time.Duration) (*Lease, error) {
	kv, err := c.kv(ctx, LeaseBucket)
	if err != nil {
		return nil, err
	}
	l := &Lease{c: c, kv: kv, key: LeaseKey(taskID), me: me, ttl: ttl, tid: taskID}
	val, _ := json.Marshal(me)
	err = c.Do(ctx, "take the task's lease", func(ctx context.Context) error {
		// The key lives ttl past its last write: the hub's clock, not
		// this host's, says when a silent holder's lease has lapsed.
		rev, err := kv.Create(ctx, l.key, val, jetstream.KeyTTL(ttl))
		if err == nil {
			l.rev.Store(rev)
			return nil
		}
		if !LostRace(err) {
			return err
		}
		e, err := l.c.leaseEntry(ctx, l.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return errors.New("lease vanished; again")
		}
		if err != nil {
			return err
		}
		var h Holder
		_ = json.Unmarshal(e.Data, &h)
		if h.Host != me.Host || h.StateDir != me.StateDir {
			return Final(&HeldError{TaskID: taskID, Holder: h, Renewed: e.Time})
		}
		// Its holder is this host and state folder, whose task lock this
		// process holds: it is dead, taken over at once.
		rev, err = l.write(ctx, val, e.Sequence)
		if LostRace(err) {
			return errors.New("lease changed while taking it over; again")
		}
		if err != nil {
			return err
		}
		l.rev.Store(rev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// leaseEntry reads key of the lease bucket as the bucket stream's leader
// has it: jetstream.ErrKeyNotFound when it is missing, deleted or lapsed.
// A compare-and-set that lost is judged on the write that won, so this is
// no KV get, which is a direct get that a replica may answer before it has
// applied that write (and a coordinator, or a serve leading schedules,
// would take the winner's lease for its own).
func (c *Client) leaseEntry(ctx context.Context, key string) (*jetstream.RawStreamMsg, error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{"$KV." + LeaseBucket + "." + key})
	if err != nil {
		return nil, err
	}
	reply, err := c.NC.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET.KV_"+LeaseBucket, req)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		Msg   *struct {
			Subject  string    `json:"subject"`
			Sequence uint64    `json:"seq"`
			Header   []byte    `json:"hdrs"`
			Data     []byte    `json:"data"`
			Time     time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(reply.Data, &resp); err != nil {
		return nil, fmt.Errorf("read the lease: %w", err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrKeyNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Msg == nil:
		return nil, errors.New("read the lease: the hub's answer holds no message")
	}
	m := &jetstream.RawStreamMsg{Subject: resp.Msg.Subject, Sequence: resp.Msg.Sequence, Data: resp.Msg.Data, Time: resp.Msg.Time}
	if len(resp.Msg.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Msg.Header); err != nil {
			return nil, fmt.Errorf("read the lease: %w", err)
		}
		// A delete, a purge or the marker of a key that lapsed.
		if m.Header.Get("KV-Operation") != "" || m.Header.Get(jetstream.MarkerReasonHeader) != "" {
			return nil, jetstream.ErrKeyNotFound
		}
	}
	return m, nil
}

// write stores val as the lease's new revision, if rev is its current one,
// keeping the key's time to live: a raw publish to the bucket's subject
// with both conditions, since a KV Update drops the TTL (a lease renewed
// that way would never lapse).
func (l *Lease) write(ctx context.Context, val []byte, rev uint64) (uint64, error) {
	ack, err := l.c.JS.Publish(ctx, "$KV."+LeaseBucket+"."+l.key, val,
		jetstream.WithMsgTTL(l.ttl), jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Renew renews the lease. A *LostError means another coordinator took it.
func (l *Lease) Renew(ctx context.Context) error {
	val, _ := json.Marshal(l.me)
	return l.c.Do(ctx, "renew the task's lease", func(ctx context.Context) error {
		rev, err := l.write(ctx, val, l.rev.Load())
		if err == nil {
			l.rev.Store(rev)
			return nil
		}
		if !LostRace(err) {
			return err
		}
		// The revision moved: unless the retry of a renewal that was
		// stored, someone else holds it now.
		e, gerr := l.c.leaseEntry(ctx, l.key)
		if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return gerr
		}
		var h Holder
		if e != nil {
			if bytes.Equal(e.Data, val) {
				l.rev.Store(e.Sequence)
				return nil
			}
			_ = json.Unmarshal(e.Data, &h)
		}
		return Final(&LostError{TaskID: l.tid, By: h})
	})
}

// Release gives the lease up, if this coordinator still holds it.
func (l *Lease) Release(ctx context.Context) error {
	return l.c.Do(ctx, "release the task's lease", func(ctx context.Context) error {
		err := l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev.Load()))
		if err != nil && (LostRace(err) || errors.Is(err, jetstream.ErrKeyNotFound)) {
			return nil
		}
		return err
	})
}

// LostRace reports whether err is the hub's refusal of a compare-and-set:
// the key's revision moved, another writer won. A stream replicated on one
// node says so with error 10071 ("wrong last sequence"); a replicated one
// says it with 10164 while the winner's write is still in flight, which
// jetstream.ErrKeyExists does not match.
func LostRace(err error) bool {
	var api *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		(errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant))
}
