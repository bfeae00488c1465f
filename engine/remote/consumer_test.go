package remote_test

import (
	"testing"
	"time"

	"apollo/engine/hubtest"

	"github.com/nats-io/nats.go/jetstream"
)

// TestPoolConsumerSettings: the pool's consumer redelivers only after the
// liveness deadline, for ever, with no BackOff (which would override the
// deadline) and explicit acknowledgements: what the holder-lost rule reads.
func TestPoolConsumerSettings(t *testing.T) {
	c := connect(t, hubtest.Start(t, 1).URLs())
	if err := c.Ensure(t.Context(), 1, false); err != nil {
		t.Fatal(err)
	}
	cons, err := c.PoolConsumer(t.Context(), "gpu", 7*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg := info.Config
	if cfg.BackOff != nil || cfg.AckWait != 7*time.Second || cfg.MaxDeliver != -1 || cfg.AckPolicy != jetstream.AckExplicitPolicy {
		t.Errorf("pool consumer: BackOff %v, AckWait %v, MaxDeliver %d, AckPolicy %v; want none, 7s, -1, explicit",
			cfg.BackOff, cfg.AckWait, cfg.MaxDeliver, cfg.AckPolicy)
	}
}
