package clock

import (
	"slices"
	"sync"
	"time"
)

// Fake is a clock that only moves when Advance is called. It is safe for
// concurrent use. Timers fire, and tickers tick, from Advance. One made by
// NewAuto moves on by itself instead, whenever a timer is set, so that
// delays pass at once.
type Fake struct {
	mu      sync.Mutex
	auto    bool
	now     time.Time
	timers  []*fakeTimer
	tickers []*fakeTicker
	// waiters are told when a timer or ticker is made, for BlockUntil.
	waiters []chan struct{}
}

// NewFake returns a fake clock reading start.
func NewFake(start time.Time) *Fake { return &Fake{now: start} }

// NewAuto returns a fake clock reading start that jumps to each timer's
// time as the timer is set, and fires it: code that waits for a delay goes
// on at once, and sees the time it waited for.
func NewAuto(start time.Time) *Fake { return &Fake{now: start, auto: true} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// AfterFunc schedules f for when the fake time has moved on by d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), fn: fn}
	if f.auto {
		f.now = t.at
		go fn()
		return t
	}
	f.timers = append(f.timers, t)
	f.wakeLocked()
	return t
}

// NewTicker returns a ticker that ticks as Advance passes each period.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive ticker period")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTicker{f: f, every: d, next: f.now.Add(d), c: make(chan time.Time, 1)}
	f.tickers = append(f.tickers, t)
	f.wakeLocked()
	return t
}

// Pending reports how many timers wait to fire.
func (f *Fake) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitForTimers blocks until at least n timers wait to fire: a test calls
// it to know that the code under test has armed its timer before it moves
// time.
func (f *Fake) WaitForTimers(n int) {
	for {
		f.mu.Lock()
		if len(f.timers) >= n {
			f.mu.Unlock()
			return
		}
		ch := make(chan struct{})
		f.waiters = append(f.waiters, ch)
		f.mu.Unlock()
		<-ch
	}
}

func (f *Fake) wakeLocked() {
	for _, ch := range f.waiters {
		close(ch)
	}
	f.waiters = nil
}

// Advance moves the fake time on by d, firing the timers and ticking the
// tickers it passes, in time order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	end := f.now.Add(d)
	for {
		slices.SortFunc(f.timers, func(a, b *fakeTimer) int { return a.at.Compare(b.at) })
		if len(f.timers) == 0 || f.timers[0].at.After(end) {
			break
		}
		t := f.timers[0]
		f.timers = f.timers[1:]
		if t.at.After(f.now) {
			f.now = t.at
		}
		f.mu.Unlock()
		go t.fn()
		f.mu.Lock()
	}
	f.now = end
	for _, t := range f.tickers {
		for !t.next.After(end) {
			select {
			case t.c <- t.next:
			default: // a slow reader misses ticks, as with time.Ticker
			}
			t.next = t.next.Add(t.every)
		}
	}
	f.mu.Unlock()
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	fn func()
}

func (t *fakeTimer) Stop() bool {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	i := slices.Index(t.f.timers, t)
	if i < 0 {
		return false
	}
	t.f.timers = slices.Delete(t.f.timers, i, i+1)
	return true
}

type fakeTicker struct {
	f     *Fake
	every time.Duration
	next  time.Time
	c     chan time.Time
}

func (t *fakeTicker) C() <-chan time.Time { return t.c }

func (t *fakeTicker) Stop() {
	t.f.mu.Lock()
	defer t.f.mu.Unlock()
	if i := slices.Index(t.f.tickers, t); i >= 0 {
		t.f.tickers = slices.Delete(t.f.tickers, i, i+1)
	}
}
