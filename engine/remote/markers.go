package remote

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Markers are a task's idempotency markers in the hub's idem bucket: the
// gate that keeps idem.once at most once per task when attempts of a step
// may run on two workers at once (a partitioned worker finishing while its
// attempt's successor runs). Moving a marker to pending is a
// compare-and-set: from no key with Create, from cleared with Update on the
// cleared revision.
//
// Each pool's workers have keys of their own (with apollo hub --nkeys, a
// worker may read and write its pools' only), so the gate holds between
// attempts of the steps of one pool; steps of two pools that share a marker
// name see each other's markers as the coordinator's log held them at
// dispatch.
type Markers struct {
	c    *Client
	kv   jetstream.KeyValue
	pool string
	task string
}

// Markers opens the idem bucket for a task's markers in pool ("": every
// pool's, for All and Reset).
func (c *Client) Markers(ctx context.Context, pool, taskID string) (*Markers, error) {
	kv, err := c.kv(ctx, IdemBucket)
	if err != nil {
		return nil, err
	}
	return &Markers{c: c, kv: kv, pool: pool, task: taskID}, nil
}

// ErrMarkerTaken says another attempt moved the marker first.
var ErrMarkerTaken = errors.New("another attempt holds the marker")

// Get returns the marker and its revision; ok is false when the bucket has
// none of that name.
func (m *Markers) Get(ctx context.Context, name string) (mk Marker, rev uint64, ok bool, err error) {
	err = m.c.Do(ctx, "read marker "+name, func(ctx context.Context) error {
		e, err := m.kv.Get(ctx, markerKey(m.pool, m.task, name))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			ok = false
			return nil
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(e.Value(), &mk); err != nil {
			return Final(fmt.Errorf("marker %q in the hub: %w", name, err))
		}
		rev, ok = e.Revision(), true
		return nil
	})
	return mk, rev, ok, err
}

// Set records mk. To pending it moves only from absent or cleared, and
// returns ErrMarkerTaken when the marker is pending or done in the bucket;
// to done or cleared it overwrites.
func (m *Markers) Set(ctx context.Context, mk Marker) error {
	if mk.State == "pending" {
		mk.Write = nuid.Next()
	}
	val, err := json.Marshal(mk)
	if err != nil {
		return err
	}
	key := markerKey(m.pool, m.task, mk.Name)
	return m.c.Do(ctx, "record marker "+mk.Name, func(ctx context.Context) error {
		if mk.State != "pending" {
			_, err := m.kv.Put(ctx, key, val)
			return err
		}
		_, err := m.kv.Create(ctx, key, val)
		if err == nil || !LostRace(err) {
			return err
		}
		e, err := m.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return errors.New("marker vanished; again")
		}
		if err != nil {
			return err
		}
		var cur Marker
		_ = json.Unmarshal(e.Value(), &cur)
		if string(e.Value()) == string(val) {
			// This call's own write, stored by a try whose answer was
			// lost: its Write is in no other value. (The read may be a
			// replica's that lags; a value it holds that is not this
			// call's is settled by the compare-and-set below, or read
			// again.)
			return nil
		}
		if cur.State != "cleared" {
			return Final(fmt.Errorf("%w (%s by step %s attempt %d)", ErrMarkerTaken, cur.State, cur.Step, cur.Attempt))
		}
		if _, err := m.kv.Update(ctx, key, val, e.Revision()); LostRace(err) {
			return errors.New("marker changed; again")
		} else if err != nil {
			return err
		}
		return nil
	})
}

// All returns the task's markers in the bucket, each with its pool.
func (m *Markers) All(ctx context.Context) ([]Marker, error) {
	var out []Marker
	err := m.c.Do(ctx, "list markers", func(ctx context.Context) error {
		out = nil
		lister, err := m.kv.ListKeysFiltered(ctx, "*."+Token(m.task)+".*")
		if err != nil {
			return err
		}
		var keys []string
		for k := range lister.Keys() {
			keys = append(keys, k)
		}
		for _, k := range keys {
			e, err := m.kv.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var mk Marker
			if json.Unmarshal(e.Value(), &mk) == nil {
				mk.Pool, _, _ = strings.Cut(k, ".")
				out = append(out, mk)
			}
		}
		return nil
	})
	return out, err
}

// Reset makes the bucket's marker name in mk.Pool what the log says: state,
// or no key when state is "" (the log has none, or a recovery script
// cleared it).
func (m *Markers) Reset(ctx context.Context, mk Marker) error {
	key := markerKey(mk.Pool, m.task, mk.Name)
	if mk.State == "" {
		return m.c.Do(ctx, "remove marker "+mk.Name, func(ctx context.Context) error {
			err := m.kv.Purge(ctx, key)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				return nil
			}
			return err
		})
	}
	val, _ := json.Marshal(mk)
	return m.c.Do(ctx, "record marker "+mk.Name, func(ctx context.Context) error {
		_, err := m.kv.Put(ctx, key, val)
		return err
	})
}
