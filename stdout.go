package main

import (
	"errors"
	"io"
	"sync"
	"syscall"
)

// outlet is apollo's stdout or stderr, which may be a pipe whose reader
// goes away (`apollo run p.yaml | head`). With SIGPIPE caught (see run),
// a write to such a pipe fails with EPIPE instead of killing apollo; from
// then on the outlet writes nothing and reports success, so that a run goes
// on to its end, its log the record (docs/spec.md §7.1). gone is closed
// then, for the commands that only print (logs -f) to stop.
type outlet struct {
	w    io.Writer
	mu   sync.Mutex
	shut bool
	gone chan struct{}
}

func newOutlet(w io.Writer) *outlet { return &outlet{w: w, gone: make(chan struct{})} }

func (o *outlet) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.shut {
		return len(p), nil
	}
	n, err := o.w.Write(p)
	if errors.Is(err, syscall.EPIPE) {
		o.shut = true
		close(o.gone)
		return len(p), nil
	}
	return n, err
}

// Fd is the file descriptor under the outlet, so that a terminal is still
// seen as one; ^0 when it is not a file.
func (o *outlet) Fd() uintptr {
	if f, ok := o.w.(interface{ Fd() uintptr }); ok {
		return f.Fd()
	}
	return ^uintptr(0)
}

// readerGone returns a channel closed once w, when it is an outlet, has
// lost its reader; nil (never ready) otherwise.
func readerGone(w io.Writer) <-chan struct{} {
	if o, ok := w.(*outlet); ok {
		return o.gone
	}
	return nil
}
