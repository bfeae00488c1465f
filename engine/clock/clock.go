package clock

import "time"

// Clock tells the time and makes timers. Real is the system's; Fake is
// moved by tests.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed, unless the
	// returned Timer is stopped first.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTicker returns a ticker whose channel receives a time every d.
	NewTicker(d time.Duration) Ticker
}

// Timer is a pending AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not happened yet, and reports
	// whether it did so.
	Stop() bool
}

// Ticker delivers ticks until stopped.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// NewTicker is time.NewTicker.
func (Real) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// NowFunc is a clock that reads the time from a function and makes real
// timers: for tests that stamp records with chosen times but do not wait.
type NowFunc func() time.Time

// Now calls f.
func (f NowFunc) Now() time.Time { return f() }

// AfterFunc is time.AfterFunc.
func (NowFunc) AfterFunc(d time.Duration, fn func()) Timer { return time.AfterFunc(d, fn) }

// NewTicker is time.NewTicker.
func (NowFunc) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }
