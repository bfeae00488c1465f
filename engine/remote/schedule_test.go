package remote_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// schedHub starts a hub of n nodes for the schedule tests; the 3-node one
// (whose first election takes 4 to 9 s) only without -short.
func schedHub(t *testing.T, n int) *hubtest.Cluster {
	t.Helper()
	if n > 1 && testing.Short() {
		t.Skip("a 3-node hub takes 4 to 9 s to elect its first leader; skipped with -short")
	}
	return hubtest.Start(t, n)
}

func connect(t *testing.T, urls string) *remote.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: urls, Name: "test", CallTimeout: time.Second, GiveUp: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func serveOn(t *testing.T, c *remote.Client, group, host string, ttl time.Duration) *remote.Schedules {
	t.Helper()
	s, err := c.NewSchedules(t.Context(), group, remote.Holder{Host: host, PID: os.Getpid(), StateDir: "/s/" + host, Since: time.Now()}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestScheduleLeaseTTL: one serve leads a group, another is told who; the
// leader's renewals keep the key's TTL, so it leads on past the TTL while it
// renews; once it stops, the hub expires the key by its own clock and the
// other takes the lead; the old leader's renewal then says it was deposed,
// and its append is refused. On 1 and 3 nodes (a lost race is 10071 on
// one, mostly 10164 on three).
func TestScheduleLeaseTTL(t *testing.T) {
	t.Parallel() // it waits out leases, on hubs of its own
	for _, n := range []int{1, 3} {
		t.Run(strconv.Itoa(n)+"nodes", func(t *testing.T) {
			t.Parallel()
			cl := schedHub(t, n)
			ctx := t.Context()
			ttl := time.Duration(n) * time.Second // a slower cluster gets more time to renew
			a := serveOn(t, connect(t, cl.URLs()), "g", "alpha", ttl)
			b := serveOn(t, connect(t, cl.URLs()), "g", "beta", ttl)
			if ok, _, err := a.Lead(ctx); !ok || err != nil {
				t.Fatalf("alpha Lead = %v, %v; want it to lead", ok, err)
			}
			if _, err := a.Records(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.Append(ctx, []byte("one")); err != nil {
				t.Fatal(err)
			}
			// Renew across more than the TTL: a renewal that dropped the
			// TTL would still pass this, but the expiry below would not come.
			for range 4 {
				if ok, holder, err := b.Lead(ctx); ok || err != nil || !strings.Contains(holder, "host alpha") {
					t.Fatalf("beta Lead = %v, %q, %v; want alpha named as the leader", ok, holder, err)
				}
				if ok, _, err := a.Lead(ctx); !ok || err != nil {
					t.Fatalf("alpha renewal = %v, %v", ok, err)
				}
				time.Sleep(ttl / 3)
			}
			// alpha stops renewing: the hub expires its key.
			deadline := time.Now().Add(4 * ttl)
			for {
				ok, _, err := b.Lead(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("beta did not take the lead within %s of alpha's last renewal: the key kept no TTL", 4*ttl)
				}
				time.Sleep(100 * time.Millisecond)
			}
			recs, err := b.Records(ctx)
			if err != nil || len(recs) != 1 || string(recs[0]) != "one" {
				t.Fatalf("beta read %q, %v; want [one]", recs, err)
			}
			if err := b.Append(ctx, []byte("two")); err != nil {
				t.Fatal(err)
			}
			if a.Leading() {
				t.Error("alpha says it leads past its lease's life")
			}
			err = a.Append(ctx, []byte("stale"))
			if _, ok := errors.AsType[*remote.DeposedError](err); !ok {
				t.Fatalf("alpha's append after its lease's life = %v, want a *DeposedError", err)
			}
			ok, holder, err := a.Lead(ctx)
			if ok || err != nil || !strings.Contains(holder, "host beta") {
				t.Fatalf("alpha Lead after the take-over = %v, %q, %v; want beta named", ok, holder, err)
			}
			if recs, _ := b.Records(ctx); len(recs) != 2 {
				t.Errorf("the log holds %q, want [one two]", recs)
			}
		})
	}
}

// TestScheduleAppendFenced: a leader that still believes it leads (its
// local deadline has not passed: the hub expired its key early, as a clock
// that runs fast would) is refused by the hub itself once another serve has
// taken the lead and written the log, and stops leading.
func TestScheduleAppendFenced(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(strconv.Itoa(n)+"nodes", func(t *testing.T) {
			cl := schedHub(t, n)
			ctx := t.Context()
			const ttl = time.Minute
			ca := connect(t, cl.URLs())
			a := serveOn(t, ca, "fence", "alpha", ttl)
			b := serveOn(t, connect(t, cl.URLs()), "fence", "beta", ttl)
			if ok, _, err := a.Lead(ctx); !ok || err != nil {
				t.Fatalf("alpha Lead = %v, %v", ok, err)
			}
			if _, err := a.Records(ctx); err != nil {
				t.Fatal(err)
			}
			if err := a.Append(ctx, []byte("a1")); err != nil {
				t.Fatal(err)
			}
			kv, err := ca.JS.KeyValue(ctx, remote.LeaseBucket)
			if err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(ctx, remote.SchedLeaseKey("fence")); err != nil { // the hub let the key go
				t.Fatal(err)
			}
			if ok, _, err := b.Lead(ctx); !ok || err != nil {
				t.Fatalf("beta Lead = %v, %v", ok, err)
			}
			if _, err := b.Records(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.Append(ctx, []byte("b1")); err != nil {
				t.Fatal(err)
			}
			err = a.Append(ctx, []byte("a2"))
			if de, ok := errors.AsType[*remote.DeposedError](err); !ok || !strings.Contains(de.Why, "hub refused") {
				t.Fatalf("alpha's append = %v, want the hub's refusal", err)
			}
			if a.Leading() {
				t.Error("alpha still says it leads after the hub refused it")
			}
			recs, _ := b.Records(ctx)
			if got := string(bytesJoin(recs)); got != "a1 b1" {
				t.Errorf("the log holds %q, want %q", got, "a1 b1")
			}
		})
	}
}

func bytesJoin(recs [][]byte) []byte {
	var parts []string
	for _, r := range recs {
		parts = append(parts, string(r))
	}
	return []byte(strings.Join(parts, " "))
}

// TestScheduleLeaseOldBucket: on a hub whose lease bucket an older apollo
// made without key TTLs, taking the lead fails at once with what to do;
// apollo hub's set-up (Ensure with update) brings the bucket up to date,
// and the lead can then be taken.
func TestScheduleLeaseOldBucket(t *testing.T) {
	cl := schedHub(t, 1)
	ctx := t.Context()
	c := connect(t, cl.URLs())
	if err := c.JS.DeleteKeyValue(ctx, remote.LeaseBucket); err != nil {
		t.Fatal(err)
	}
	if _, err := c.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: remote.LeaseBucket, History: 1}); err != nil {
		t.Fatal(err)
	}
	s := serveOn(t, c, "old", "alpha", time.Minute)
	ok, _, err := s.Lead(ctx)
	if ok || err == nil || !strings.Contains(err.Error(), "restart its apollo hub nodes") {
		t.Fatalf("Lead on an old bucket = %v, %v; want an error saying to restart the hub", ok, err)
	}
	if err := c.Ensure(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	s = serveOn(t, c, "old", "alpha", time.Minute)
	if ok, _, err := s.Lead(ctx); !ok || err != nil {
		t.Fatalf("Lead after the hub's set-up = %v, %v", ok, err)
	}
}
