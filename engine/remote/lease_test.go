package remote_test

import (
	"sync"
	"testing"
	"time"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// TestLeaseEpochWhileRenewing: a coordinator renews its lease on one
// goroutine while its dispatches read the epoch on others (each attempt's
// message carries it). The epoch they read never goes back, and once the
// renewals are done it is the revision the last one stored, which the
// lease's key holds. Under -race this is the check that the epoch is read
// and written safely (the nemesis found a coordinator that did not).
func TestLeaseEpochWhileRenewing(t *testing.T) {
	h := hubtest.Start(t, 1)
	c := connect(t, h.URLs())
	lease, err := c.AcquireLease(t.Context(), "t.lease", remote.Holder{Host: "h", PID: 1, StateDir: "/s"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	first := lease.Epoch()
	if first == 0 {
		t.Fatal("a lease just taken has epoch 0")
	}
	const renewals = 20
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			last := first
			for {
				select {
				case <-done:
					return
				default:
				}
				e := lease.Epoch()
				if e < last {
					t.Errorf("the epoch went back from %d to %d", last, e)
					return
				}
				last = e
			}
		})
	}
	for range renewals {
		if err := lease.Renew(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	final := lease.Epoch()
	if final <= first {
		t.Fatalf("after %d renewals the epoch is %d, was %d", renewals, final, first)
	}
	kv, err := c.JS.KeyValue(t.Context(), remote.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(t.Context(), remote.LeaseKey("t.lease"))
	if err != nil {
		t.Fatal(err)
	}
	if entry.Revision() != final {
		t.Fatalf("the lease's key is at revision %d, the coordinator's epoch says %d", entry.Revision(), final)
	}
}
