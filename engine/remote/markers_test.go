package remote_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// TestMarkerPendingOnce: an idem.once gate moves to pending once. A Set that
// finds the marker already pending — even pending by the same step and
// attempt, whose value is the same bytes but for the Set call's own Write —
// is refused with ErrMarkerTaken, never taken for its own retried write:
// a replica that lags answers a read with such an earlier value. From
// cleared it moves again, once.
func TestMarkerPendingOnce(t *testing.T) {
	c := connect(t, hubtest.Start(t, 1).URLs())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if err := c.Ensure(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	m, err := c.Markers(ctx, remote.DefaultPool, "t")
	if err != nil {
		t.Fatal(err)
	}
	pending := remote.Marker{Name: "charge", State: "pending", Step: "pay", Attempt: 0}
	if err := m.Set(ctx, pending); err != nil {
		t.Fatalf("first pending: %v", err)
	}
	if err := m.Set(ctx, pending); !errors.Is(err, remote.ErrMarkerTaken) {
		t.Fatalf("pending again by the same attempt: %v, want ErrMarkerTaken", err)
	}
	if err := m.Set(ctx, remote.Marker{Name: "charge", State: "cleared", Step: "pay", Attempt: 0}); err != nil {
		t.Fatalf("cleared: %v", err)
	}
	next := remote.Marker{Name: "charge", State: "pending", Step: "pay", Attempt: 1}
	if err := m.Set(ctx, next); err != nil {
		t.Fatalf("pending from cleared: %v", err)
	}
	if err := m.Set(ctx, next); !errors.Is(err, remote.ErrMarkerTaken) {
		t.Fatalf("pending again from pending: %v, want ErrMarkerTaken", err)
	}
	got, _, ok, err := m.Get(ctx, "charge")
	if err != nil || !ok || got.State != "pending" || got.Attempt != 1 {
		t.Fatalf("the bucket holds %+v (found %v, %v), want pending by attempt 1", got, ok, err)
	}
}
