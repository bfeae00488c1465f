package cron

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/engine/clock"
	"apollo/engine/hubtest"
	"apollo/engine/pipeline"
	"apollo/engine/remote"
)

// fleet is several apollo serve sharing the schedules of one pipelines
// folder through a hub: one world of tasks, each serve its own state
// folder, and a record of which serve started what.
type fleet struct {
	t     *testing.T
	urls  string
	group string
	clk   *clock.Fake
	w     *world
	p     Pipe
	ttl   time.Duration

	mu    sync.Mutex
	fires []string // "serve task/trigger"
}

// newFleet makes a fleet on a hub of nodes whose serves' leases last ttl.
func newFleet(t *testing.T, nodes int, p Pipe, ttl time.Duration) *fleet {
	t.Helper()
	if nodes > 1 && testing.Short() {
		t.Skip("a 3-node hub takes 4 to 9 s to elect its first leader; skipped with -short")
	}
	cl := hubtest.Start(t, nodes)
	return &fleet{t: t, urls: cl.URLs(), group: "g" + strconv.Itoa(nodes), clk: clock.NewFake(start), w: newWorld(), p: p, ttl: ttl}
}

// serve starts a serve named name; it does not run its loops: the test
// calls takeLead and Tick.
func (f *fleet) serve(name string) *Scheduler {
	t := f.t
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: f.urls, Name: name, CallTimeout: time.Second, GiveUp: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	sh, err := c.NewSchedules(ctx, f.group, remote.Holder{Host: name, PID: os.Getpid(), StateDir: "/" + name, Since: time.Now()}, f.ttl)
	if err != nil {
		t.Fatal(err)
	}
	launch := func(job Job, stateDir, output string) (*Process, error) {
		f.mu.Lock()
		f.fires = append(f.fires, name+" "+job.TaskID+"/"+job.Trigger)
		f.mu.Unlock()
		return f.w.launch(job, stateDir, output)
	}
	w := f.w
	s, err := New(Options{StateDir: t.TempDir(), Clock: f.clk, Launch: launch, Shared: sh, Me: name,
		Complete: func(_, id string) bool { w.mu.Lock(); defer w.mu.Unlock(); return w.complete[id] },
		Holder:   func(_, id string) (int, bool) { w.mu.Lock(); defer w.mu.Unlock(); return 7, w.held[id] }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPipes([]Pipe{f.p}); err != nil {
		t.Fatal(err)
	}
	return s
}

// fired returns the starts so far, space-separated, and forgets them.
func (f *fleet) fired() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := strings.Join(f.fires, ", ")
	f.fires = nil
	return out
}

// tickAll ticks every serve, as each one's loop would at that time.
func tickAll(ss ...*Scheduler) {
	for _, s := range ss {
		s.Tick()
	}
}

// waitLead calls takeLead on s until it leads (the lease of a dead leader
// lapses by the hub's clock); it fails after ten lease lives.
func (f *fleet) waitLead(s *Scheduler) {
	f.t.Helper()
	deadline := time.Now().Add(10 * f.ttl)
	for {
		s.takeLead(f.t.Context())
		if ok, _ := s.Leader(); ok {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("no lead within %s", 10*f.ttl)
		}
		time.Sleep(f.ttl / 5)
	}
}

// sharedEvents lists the hub's schedule log as "event task trigger" lines,
// with who led for lead entries.
func sharedEvents(t *testing.T, s *Scheduler) string {
	t.Helper()
	recs, err := s.opts.Shared.Records(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, r := range recs {
		e, err := decode(r)
		if err != nil {
			t.Fatal(err)
		}
		line := e.Event
		for _, v := range []string{e.TaskID, e.Trigger} {
			if v != "" {
				line += " " + v
			}
		}
		if e.Event == EventLead {
			line += " " + e.By
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

// TestSharedOneFiresEachTime: two serves share a daily schedule through
// the hub; one leads and starts each day's run, the other starts nothing
// and says who leads; a run from its page is refused there.
func TestSharedOneFiresEachTime(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%dnodes", nodes), func(t *testing.T) {
			f := newFleet(t, nodes, pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip), 20*time.Second)
			a, b := f.serve("alpha"), f.serve("beta")
			a.takeLead(t.Context())
			b.takeLead(t.Context())
			if ok, _ := a.Leader(); !ok {
				t.Fatal("alpha does not lead")
			}
			if ok, who := b.Leader(); ok || !strings.Contains(who, "host alpha") {
				t.Fatalf("beta Leader() = %v, %q; want alpha named", ok, who)
			}
			f.clk.Advance(14*time.Hour - 24*time.Hour + 5*time.Second) // the loop's first day is 02:00:05
			for day := 2; day <= 3; day++ {
				f.clk.Advance(24 * time.Hour)
				tickAll(a, b, a, b)
				a.takeLead(t.Context())
				b.takeLead(t.Context())
				id := fmt.Sprintf("nightly-2026-11-%02d", day)
				if got, want := f.fired(), "alpha "+id+"/schedule"; got != want {
					t.Fatalf("day %d: started %q, want %q", day, got, want)
				}
				f.w.finish(t, a, id, 0)
			}
			if _, err := b.StartNow(Job{Pipe: f.p, TaskID: "by-hand", Trigger: TriggerManual}); err == nil || !strings.Contains(err.Error(), "alpha") {
				t.Errorf("a run from beta's page = %v, want a refusal naming alpha", err)
			}
			want := "lead alpha\ntracked\nstarted nightly-2026-11-02 schedule\nexited nightly-2026-11-02\n" +
				"started nightly-2026-11-03 schedule\nexited nightly-2026-11-03"
			if got := sharedEvents(t, a); got != want {
				t.Errorf("schedule log:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestSharedTakeOver: the leader dies (it stops renewing; its child goes
// on). The other serve takes the lead once the lease lapses by the hub's
// clock, watches the dead leader's run instead of starting its time again,
// and starts the next time itself, once; the old leader, come back, starts
// nothing: its lease's life has passed and the hub refuses its appends.
func TestSharedTakeOver(t *testing.T) {
	t.Parallel() // each waits out a lease, on a hub of its own
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("%dnodes", nodes), func(t *testing.T) {
			t.Parallel()
			f := newFleet(t, nodes, pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip), 2*time.Second)
			a, b := f.serve("alpha"), f.serve("beta")
			f.waitLead(a)
			b.takeLead(t.Context())
			f.clk.Advance(14*time.Hour + 5*time.Second)
			tickAll(a, b)
			if got, want := f.fired(), "alpha nightly-2026-11-02/schedule"; got != want {
				t.Fatalf("started %q, want %q", got, want)
			}
			f.w.mu.Lock()
			f.w.held["nightly-2026-11-02"] = true // alpha dies; its run goes on
			f.w.mu.Unlock()

			f.clk.Advance(10 * time.Second)
			f.waitLead(b)
			tickAll(b, b)
			if got := f.fired(); got != "" {
				t.Fatalf("beta started %q after the take-over, want nothing (alpha's run goes on)", got)
			}
			f.w.mu.Lock()
			f.w.held["nightly-2026-11-02"] = false
			f.w.complete["nightly-2026-11-02"] = true
			f.w.mu.Unlock()
			tickAll(b)

			// alpha comes back after its lease's life, still believing it
			// leads: at the next time it starts nothing.
			f.clk.Advance(24 * time.Hour)
			tickAll(a, b, a)
			if got, want := f.fired(), "beta nightly-2026-11-03/schedule"; got != want {
				t.Fatalf("next day started %q, want %q", got, want)
			}
			if ok, _ := a.Leader(); ok {
				t.Error("alpha still says it leads")
			}
			want := "lead alpha\ntracked\nstarted nightly-2026-11-02 schedule\nlead beta\nexited nightly-2026-11-02\n" +
				"started nightly-2026-11-03 schedule"
			if got := sharedEvents(t, b); got != want {
				t.Errorf("schedule log:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestSharedTakeOverLate: the leader dies before a time comes; the next
// serve takes the lead after it, within the grace: it starts that time on
// time, once. Taken over later than the grace, the catch-up rules apply as
// after a restart.
func TestSharedTakeOverLate(t *testing.T) {
	t.Parallel() // each waits out a lease, on a hub of its own
	for _, late := range []time.Duration{30 * time.Second, 3 * time.Hour} {
		t.Run(late.String(), func(t *testing.T) {
			t.Parallel()
			if late > time.Minute && testing.Short() {
				t.Skip("-short: each take-over waits out a lease on a hub of its own, a second or more; run without -short")
			}
			f := newFleet(t, 1, pipe(t, "0 2 * * *", pipeline.CatchupNone, 10, pipeline.OverlapSkip), time.Second)
			f.group += strings.ReplaceAll(late.String(), ".", "")
			a, b := f.serve("alpha"), f.serve("beta")
			f.waitLead(a)
			b.takeLead(t.Context())
			f.clk.Advance(14*time.Hour + late) // alpha died before 02:00
			f.waitLead(b)
			tickAll(b, b)
			want, log := "beta nightly-2026-11-02/schedule", "started nightly-2026-11-02 schedule"
			if late > time.Minute {
				want, log = "", "missed"
			}
			if got := f.fired(); got != want {
				t.Errorf("started %q, want %q", got, want)
			}
			if got := sharedEvents(t, b); got != "lead alpha\ntracked\nlead beta\n"+log {
				t.Errorf("schedule log:\n%s\nwant:\n%s", got, "lead alpha\ntracked\nlead beta\n"+log)
			}
		})
	}
}

// TestSharedResign: a leader that stops (SIGINT) gives the lead up: the
// other serve takes it at once, without waiting out the lease.
func TestSharedResign(t *testing.T) {
	f := newFleet(t, 1, pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip), time.Minute)
	a, b := f.serve("alpha"), f.serve("beta")
	a.takeLead(t.Context())
	b.takeLead(t.Context())
	if ok, _ := b.Leader(); ok {
		t.Fatal("beta leads beside alpha")
	}
	a.Close()
	b.takeLead(t.Context())
	if ok, who := b.Leader(); !ok {
		t.Fatalf("beta does not lead once alpha stopped (leader: %q)", who)
	}
	a.takeLead(t.Context())
	if ok, _ := a.Leader(); ok {
		t.Error("alpha took the lead again after it stopped")
	}
}

// TestSharedDeposedRefusedByHub: a leader whose key the hub let go early
// (its own deadline has not passed: a fast hub clock) still believes it
// leads when another serve takes the lead and writes the log. At the next
// time both try: the hub refuses the old leader's started entry, so it
// starts nothing and stops leading; the new leader starts the time once.
func TestSharedDeposedRefusedByHub(t *testing.T) {
	f := newFleet(t, 1, pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip), time.Minute)
	a, b := f.serve("alpha"), f.serve("beta")
	a.takeLead(t.Context())
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: f.urls, Name: "hub clock", CallTimeout: time.Second, GiveUp: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kv, err := c.JS.KeyValue(ctx, remote.LeaseBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, remote.SchedLeaseKey(f.group)); err != nil {
		t.Fatal(err)
	}
	b.takeLead(t.Context())
	if ok, _ := b.Leader(); !ok {
		t.Fatal("beta did not take the lead the hub let go")
	}
	f.clk.Advance(14*time.Hour + 5*time.Second)
	tickAll(a, b)
	if got, want := f.fired(), "beta nightly-2026-11-02/schedule"; got != want {
		t.Errorf("started %q, want %q", got, want)
	}
	if ok, _ := a.Leader(); ok {
		t.Error("alpha still says it leads after the hub refused its append")
	}
	want := "lead alpha\ntracked\nlead beta\nstarted nightly-2026-11-02 schedule"
	if got := sharedEvents(t, b); got != want {
		t.Errorf("schedule log:\n%s\nwant:\n%s", got, want)
	}
}
