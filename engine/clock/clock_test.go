package clock

import (
	"sync/atomic"
	"testing"
	"time"
)

var epoch = time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)

// TestFakeTimers checks that timers fire in time order as Advance passes
// them, that a stopped one never fires, and that Now moves with Advance.
func TestFakeTimers(t *testing.T) {
	f := NewFake(epoch)
	fired := make(chan string, 3)
	f.AfterFunc(2*time.Second, func() { fired <- "b" })
	f.AfterFunc(time.Second, func() { fired <- "a" })
	stopped := f.AfterFunc(time.Second, func() { fired <- "stopped" })
	if !stopped.Stop() {
		t.Fatal("Stop of a pending timer = false")
	}
	f.WaitForTimers(2)
	f.Advance(1500 * time.Millisecond)
	if got := <-fired; got != "a" {
		t.Errorf("first timer fired = %q, want a", got)
	}
	if got := f.Now(); !got.Equal(epoch.Add(1500 * time.Millisecond)) {
		t.Errorf("Now = %v, want epoch+1.5s", got)
	}
	f.Advance(time.Second)
	if got := <-fired; got != "b" {
		t.Errorf("second timer fired = %q, want b", got)
	}
	if f.Pending() != 0 {
		t.Errorf("Pending = %d after both fired", f.Pending())
	}
	select {
	case got := <-fired:
		t.Errorf("a stopped timer fired: %q", got)
	default:
	}
}

// TestFakeTicker checks one tick per period passed, dropped when unread.
func TestFakeTicker(t *testing.T) {
	f := NewFake(epoch)
	tk := f.NewTicker(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-tk.C():
		t.Fatal("ticked before its period")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-tk.C(); !got.Equal(epoch.Add(time.Second)) {
		t.Errorf("tick at %v, want epoch+1s", got)
	}
	tk.Stop()
	f.Advance(time.Hour)
	select {
	case <-tk.C():
		t.Error("a stopped ticker ticked")
	default:
	}
}

// TestAuto checks that an auto clock fires a timer at once, at its time.
func TestAuto(t *testing.T) {
	f := NewAuto(epoch)
	var at atomic.Value
	done := make(chan struct{})
	f.AfterFunc(time.Hour, func() { at.Store(f.Now()); close(done) })
	<-done
	if got := at.Load().(time.Time); !got.Equal(epoch.Add(time.Hour)) {
		t.Errorf("the timer saw %v, want epoch+1h", got)
	}
}
