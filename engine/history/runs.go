package history

import (
	"io"
	"time"

	"apollo/engine/statedir"
	"apollo/eventlog"
)

// Runs reads the task runs of one state folder, and archives the old ones.
// The zero value of each field but Dir has a sensible default.
type Runs struct {
	Dir statedir.Dir
	// Now is the clock: durations of running tasks, gc's cutoff.
	Now func() time.Time
	// FS is the file-system seam that gc writes archives through; nil means
	// the real one.
	FS eventlog.FS
	// Stdout receives what Logs prints, Stderr its notes.
	Stdout, Stderr io.Writer
}

func (h Runs) now() time.Time {
	if h.Now == nil {
		return time.Now()
	}
	return h.Now()
}

func (h Runs) fs() eventlog.FS {
	if h.FS == nil {
		return eventlog.OS{}
	}
	return h.FS
}

func (h Runs) stdout() io.Writer {
	if h.Stdout == nil {
		return io.Discard
	}
	return h.Stdout
}

func (h Runs) stderr() io.Writer {
	if h.Stderr == nil {
		return io.Discard
	}
	return h.Stderr
}
