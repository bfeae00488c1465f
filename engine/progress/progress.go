package progress

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"apollo/engine/clock"
	"apollo/engine/textfmt"
)

// The progress modes of apollo run's output.
const (
	Auto  = "auto"  // a live board on a terminal, plain lines otherwise
	Plain = "plain" // one line per step event
	Quiet = "quiet" // nothing but the final summary's failures
	Board = "board" // the live board, even when not a terminal
)

// Reporter shows a run to a person. Methods are called from many goroutines.
type Reporter interface {
	// begin opens the run; resume, when not "", is what a resume found
	// (resumeNews).
	Begin(taskID, logPath string, total, kept int, resume string)
	Event(id, what string) // a one-off line: cleanup, skip, crash loop
	Started(id string, retry int)
	Ended(id, status string, retry int, dur time.Duration, errMsg string, retryIn time.Duration)
	Finish(summary string)
}

// isTerminal reports whether w is a terminal: a file (or a writer over
// one, with its Fd) that is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && f.Fd() <= uintptr(math.MaxInt32) && isTerminalFd(int(f.Fd()))
}

// New returns the Reporter of a progress mode, writing to w.
func New(mode string, w io.Writer, color bool, clk clock.Clock) Reporter {
	switch mode {
	case Quiet:
		return quietReporter{}
	case Board:
		return newBoard(w, color, clk)
	case Auto:
		if isTerminal(w) {
			return newBoard(w, color, clk)
		}
	}
	return &lineReporter{w: w, now: clk.Now}
}

type quietReporter struct{}

func (quietReporter) Begin(string, string, int, int, string)                          {}
func (quietReporter) Event(string, string)                                            {}
func (quietReporter) Started(string, int)                                             {}
func (quietReporter) Ended(string, string, int, time.Duration, string, time.Duration) {}
func (quietReporter) Finish(string)                                                   {}

// lineReporter writes one plain line per event: for logs, pipes and CI.
type lineReporter struct {
	mu  sync.Mutex
	w   io.Writer
	now func() time.Time
}

func (r *lineReporter) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "%s "+format+"\n", append([]any{r.now().Format("15:04:05")}, args...)...)
}

func (r *lineReporter) Begin(taskID, logPath string, total, kept int, resume string) {
	r.printf("task %s: %d steps, %d already done; log %s", taskID, total, kept, logPath)
	if resume != "" {
		r.printf("resuming: %s", resume)
	}
}

func (r *lineReporter) Event(id, what string) { r.printf("%-20s %s", id, what) }

func (r *lineReporter) Started(id string, retry int) {
	r.printf("%-20s START   attempt %d", id, retry)
}

func (r *lineReporter) Ended(id, status string, retry int, dur time.Duration, errMsg string, retryIn time.Duration) {
	line := fmt.Sprintf("%-20s %-7s attempt %d, %s", id, status, retry, textfmt.Duration(dur))
	if status == "RETRY" {
		line += fmt.Sprintf(", next attempt in %s", textfmt.Duration(retryIn))
	}
	if errMsg != "" {
		line += ": " + textfmt.OneLine(errMsg, 200)
	}
	r.printf("%s", line)
}

func (r *lineReporter) Finish(summary string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprint(r.w, summary)
}

// board is the live view on a terminal: a header with done/total and
// failures, then one line per running step with its elapsed time. Finished
// steps scroll above it as plain lines.
type board struct {
	mu      sync.Mutex
	w       io.Writer
	color   bool
	clock   clock.Clock
	taskID  string
	total   int
	done    int
	failed  int
	running map[string]time.Time
	drawn   int // lines of the board now on screen
	stop    chan struct{}
	stopped chan struct{}
}

func newBoard(w io.Writer, color bool, clk clock.Clock) *board {
	return &board{w: w, color: color, clock: clk, running: map[string]time.Time{},
		stop: make(chan struct{}), stopped: make(chan struct{})}
}

func (b *board) Begin(taskID, logPath string, total, kept int, resume string) {
	b.mu.Lock()
	b.taskID, b.total, b.done = taskID, total, kept
	fmt.Fprintf(b.w, "task %s: %d steps, %d already done; log %s\n", taskID, total, kept, logPath)
	if resume != "" {
		fmt.Fprintf(b.w, "resuming: %s\n", resume)
	}
	b.redrawLocked()
	b.mu.Unlock()
	t := b.clock.NewTicker(200 * time.Millisecond)
	go func() {
		defer close(b.stopped)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C():
				b.mu.Lock()
				b.redrawLocked()
				b.mu.Unlock()
			}
		}
	}()
}

func (b *board) paint(code, s string) string {
	if !b.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

// clearLocked erases the board so a plain line can be printed above it.
func (b *board) clearLocked() {
	for i := 0; i < b.drawn; i++ {
		fmt.Fprint(b.w, "\x1b[1A\x1b[2K")
	}
	b.drawn = 0
}

func (b *board) redrawLocked() {
	b.clearLocked()
	var sb strings.Builder
	header := fmt.Sprintf("[%d/%d done", b.done, b.total)
	if b.failed > 0 {
		header += ", " + b.paint("31", fmt.Sprintf("%d failed", b.failed))
	}
	header += fmt.Sprintf(", %d running]", len(b.running))
	sb.WriteString(header + "\n")
	ids := make([]string, 0, len(b.running))
	for id := range b.running {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return b.running[ids[i]].Before(b.running[ids[j]]) })
	const maxShown = 12
	for i, id := range ids {
		if i == maxShown {
			sb.WriteString(fmt.Sprintf("  … and %d more\n", len(ids)-maxShown))
			break
		}
		sb.WriteString(fmt.Sprintf("  %s %-24s %s\n", b.paint("33", "▶"), id, textfmt.Duration(b.clock.Now().Sub(b.running[id]))))
	}
	out := sb.String()
	fmt.Fprint(b.w, out)
	b.drawn = strings.Count(out, "\n")
}

func (b *board) line(s string) {
	b.clearLocked()
	fmt.Fprintln(b.w, s)
	b.redrawLocked()
}

func (b *board) Event(id, what string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.line(fmt.Sprintf("  · %-24s %s", id, what))
}

func (b *board) Started(id string, retry int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.running[id] = b.clock.Now()
	b.redrawLocked()
}

func (b *board) Ended(id, status string, retry int, dur time.Duration, errMsg string, retryIn time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.running, id)
	mark := b.paint("32", "✓")
	switch status {
	case "SUCCESS":
		b.done++
	case "RETRY":
		mark = b.paint("33", "↻")
	case "SKIPPED":
		mark = "–"
		b.done++
	default:
		mark = b.paint("31", "✗")
		b.failed++
		b.done++
	}
	s := fmt.Sprintf("  %s %-24s %s (attempt %d)", mark, id, textfmt.Duration(dur), retry)
	if status == "RETRY" {
		s += fmt.Sprintf(", retry in %s", textfmt.Duration(retryIn))
	}
	if errMsg != "" {
		s += ": " + textfmt.OneLine(errMsg, 120)
	}
	b.line(s)
}

func (b *board) Finish(summary string) {
	close(b.stop)
	<-b.stopped
	b.mu.Lock()
	defer b.mu.Unlock()
	b.clearLocked()
	fmt.Fprint(b.w, summary)
}
