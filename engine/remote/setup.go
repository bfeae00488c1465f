package remote

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DedupWindow is how long the hub remembers a message id: longer than a
// coordinator takes to restart, so a re-dispatched attempt is stored once.
const DedupWindow = time.Hour

// Retention of events and output: how long a coordinator may stay away and
// still ingest what its workers reported.
const Retention = 7 * 24 * time.Hour

// stored republishes each message stored on subject to
// StoredSubject(subject): a feed's bell that rings once the message can
// be read, where a ring from the publication itself comes before a
// replicated stream has stored it. With whole, the ring carries the
// message (a task's events, which a feed of one pool takes from it without
// a read); without, only its headers (output, which may be large).
func stored(subject string, whole bool) *jetstream.RePublish {
	return &jetstream.RePublish{Source: subject, Destination: StoredSubject(subject), HeadersOnly: !whole}
}

// StoredSubject is where the hub republishes the headers of a message
// stored on subject (apollo.ev.… and apollo.out.…).
func StoredSubject(subject string) string {
	return "apollo.stored." + strings.TrimPrefix(subject, "apollo.")
}

// streamConfigs are the streams of the layout in doc.go, with replicas r,
// the log stream bounded to logMaxBytes (0: no bound of its own).
func streamConfigs(r int, logMaxBytes int64) []jetstream.StreamConfig {
	return []jetstream.StreamConfig{
		{Name: StepsStream, Subjects: []string{"apollo.step.>"}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Replicas: r, Duplicates: DedupWindow,
			Description: "apollo: one message per dispatched attempt"},
		{Name: EventsStream, Subjects: []string{"apollo.ev.>"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: r, Duplicates: DedupWindow, MaxAge: Retention,
			RePublish:   stored("apollo.ev.>", true),
			Description: "apollo: what workers report (started, end, lost, marker), in order per task"},
		{Name: OutputStream, Subjects: []string{"apollo.out.>"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: r, MaxAge: Retention,
			RePublish:   stored("apollo.out.>", false),
			Description: "apollo: remote attempts' output"},
		// The tasks' logs: never dropped by age or count (a gap in seq is
		// the only sign of a dropped record), never a record deleted;
		// retries are fenced by the expected last sequence, not deduped.
		// No direct gets: a replica that lags would answer the read of a
		// log's last record with an earlier one, and a coordinator would
		// rebuild a prefix of the log or take itself for fenced; the
		// stream's leader answers every read.
		// At its bound the stream refuses new records (DiscardNew) rather
		// than drop old ones: apollo gc --hub archives and purges. Records
		// appended at once go in one atomic batch (one replicated write).
		{Name: LogStream, Subjects: []string{"apollo.log.>"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: r, Duplicates: 2 * time.Minute,
			DenyDelete: true, MaxBytes: logMaxBytes, Discard: jetstream.DiscardNew, AllowAtomicPublish: true,
			Description: "apollo: each task's event log, one subject per task, the records' exact lines"},
		// Kept until apollo serve's schedules are dropped; appends are
		// fenced by the expected last sequence of their subject, not by ids.
		// No direct gets: a replica that lags would answer a new leader's
		// read of the log; the stream's leader answers every read.
		{Name: SchedStream, Subjects: []string{"apollo.sched.>"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Replicas: r, Duplicates: 2 * time.Minute,
			Description: "apollo: the schedule logs of apollo serve processes that share their schedules"},
	}
}

// LeaseMarkerTTL is how long the lease bucket keeps the marker of a lease
// that lapsed.
const LeaseMarkerTTL = 5 * time.Second

func bucketConfigs(r int) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		// LimitMarkerTTL lets a lease key expire by the hub's clock
		// (KeyTTL); with history 1 it raises no key's TTL.
		{Bucket: LeaseBucket, History: 1, Storage: jetstream.FileStorage, Replicas: r, LimitMarkerTTL: LeaseMarkerTTL,
			Description: "apollo: one coordinator per task, one leading apollo serve per schedule group"},
		{Bucket: IdemBucket, History: 1, Storage: jetstream.FileStorage, Replicas: r,
			Description: "apollo: idem.once gates of remote attempts"},
		{Bucket: TasksBucket, History: 1, Storage: jetstream.FileStorage, Replicas: r,
			Description: "apollo: one key per task whose log is in the hub: its pipeline, status, coordinator"},
	}
}

// Ensure creates the streams and buckets apollo uses, with replicas
// copies each. With update, existing ones are brought to that config (apollo
// hub does, once its cluster is complete); without, existing ones are left
// as they are (a coordinator on a hub someone else set up).
func (c *Client) Ensure(ctx context.Context, replicas int, update bool) error {
	return c.ensure(ctx, replicas, update, false)
}

// EnsureForWorker is Ensure for a worker: only the streams and the bucket a
// worker uses, each looked up before it is created, so that a worker whose
// credentials allow neither creating streams nor touching the coordinators'
// lease bucket (apollo hub --nkeys) starts on a hub that has them.
func (c *Client) EnsureForWorker(ctx context.Context, replicas int) error {
	return c.ensure(ctx, replicas, false, true)
}

func (c *Client) ensure(ctx context.Context, replicas int, update, worker bool) error {
	replicas = max(1, min(replicas, 3))
	for _, cfg := range streamConfigs(replicas, c.cfg.LogMaxBytes) {
		if worker && (cfg.Name == LogStream || cfg.Name == SchedStream) {
			continue // a worker never reads or writes a task's log or a schedule log
		}
		err := c.Do(ctx, "create stream "+cfg.Name, func(ctx context.Context) error {
			s, err := c.createStream(ctx, cfg, update)
			if err == nil && s != nil {
				c.keepStream(cfg.Name, s) // Stream need not look it up again
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	for _, cfg := range bucketConfigs(replicas) {
		if worker && cfg.Bucket != IdemBucket {
			continue
		}
		err := c.Do(ctx, "create bucket "+cfg.Bucket, func(ctx context.Context) error {
			if update {
				_, err := c.JS.CreateOrUpdateKeyValue(ctx, cfg)
				return err
			}
			kv, err := c.JS.KeyValue(ctx, cfg.Bucket)
			if err == nil && cfg.LimitMarkerTTL != 0 {
				// A bucket an older apollo made: its keys cannot carry a
				// time to live until it is told so.
				st, err := kv.Status(ctx)
				if err != nil {
					return err
				}
				if kst, ok := st.(*jetstream.KeyValueBucketStatus); ok && kst.LimitMarkerTTL() == 0 {
					_, err = c.JS.UpdateKeyValue(ctx, cfg)
				}
				return err
			}
			if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
				return err
			}
			_, err = c.JS.CreateKeyValue(ctx, cfg)
			if errors.Is(err, jetstream.ErrBucketExists) {
				return nil
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// createStream creates the stream cfg, or updates it to cfg when update is
// set; without update, a stream that exists is left as it is. It returns
// the stream's handle, or nil when another client created it meanwhile.
func (c *Client) createStream(ctx context.Context, cfg jetstream.StreamConfig, update bool) (jetstream.Stream, error) {
	if update {
		return c.JS.CreateOrUpdateStream(ctx, cfg)
	}
	s, err := c.JS.Stream(ctx, cfg.Name)
	if err == nil {
		// An older apollo made it with direct gets, which a lagging
		// replica answers (reads of the last record must see it), or
		// without atomic batches.
		old := s.CachedInfo().Config
		stale := !cfg.AllowDirect && old.AllowDirect || cfg.AllowAtomicPublish && !old.AllowAtomicPublish
		if stale {
			old.AllowDirect = cfg.AllowDirect && old.AllowDirect
			old.AllowAtomicPublish = old.AllowAtomicPublish || cfg.AllowAtomicPublish
			return c.JS.UpdateStream(ctx, old)
		}
	}
	if err == nil || !errors.Is(err, jetstream.ErrStreamNotFound) {
		return s, err
	}
	s, err = c.JS.CreateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, nil
	}
	return s, err
}

// ClusterSize is how many hub nodes the client knows of: the one it is
// connected to and those it was told about.
func (c *Client) ClusterSize() int {
	return max(1, len(c.NC.Servers()))
}

// PoolConsumer creates (or updates) the durable consumer of a pool, shared
// by the pool's workers, with liveness as its ack deadline, and returns it.
// No BackOff: it would override AckWait. Redelivery is not a retry in
// apollo: the worker that gets one reports the attempt lost.
func (c *Client) PoolConsumer(ctx context.Context, pool string, liveness time.Duration) (jetstream.Consumer, error) {
	return c.consumer(ctx, PoolConsumer(pool), PoolFilter(pool), "the workers of pool "+pool, liveness)
}

// ContainerConsumer is PoolConsumer of the pool's container queue, which
// the pool's workers that run containers share.
func (c *Client) ContainerConsumer(ctx context.Context, pool string, liveness time.Duration) (jetstream.Consumer, error) {
	return c.consumer(ctx, ContainerPoolConsumer(pool), ContainerPoolFilter(pool),
		"the workers of pool "+pool+" that run containers", liveness)
}

func (c *Client) consumer(ctx context.Context, name, filter, whose string, liveness time.Duration) (jetstream.Consumer, error) {
	var cons jetstream.Consumer
	cfg := jetstream.ConsumerConfig{
		Durable: name, FilterSubject: filter,
		AckPolicy: jetstream.AckExplicitPolicy, AckWait: liveness, MaxDeliver: -1,
		MaxAckPending: 100000, DeliverPolicy: jetstream.DeliverAllPolicy,
		Description: "apollo: " + whose,
	}
	err := c.Do(ctx, "create the consumer of "+whose, func(ctx context.Context) error {
		var err error
		cons, err = c.JS.CreateOrUpdateConsumer(ctx, StepsStream, cfg)
		return err
	})
	return cons, err
}
