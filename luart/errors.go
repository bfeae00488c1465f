package luart

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
)

// ErrTimeout is the cause to give a step's deadline:
// context.WithTimeoutCause(ctx, d, luart.ErrTimeout). A state stopped by it returns an error
// that errors.Is(err, ErrTimeout). A plain deadline (context.DeadlineExceeded) counts too.
var ErrTimeout = errors.New("timeout")

// ErrMemory is the cause of a state stopped for memory: by the heap watchdog, or by a builtin
// (string.rep, table.concat, string.format, string.gsub) asked for a result over its cap.
var ErrMemory = errors.New("memory limit exceeded")

// ErrClosed is returned by the methods of a State after Close.
var ErrClosed = errors.New("lua state is closed")

// ScriptError is a Lua error raised by a script (error(), a failed assert, a runtime error, a
// syntax error, an error raised by a Go helper).
type ScriptError struct {
	// Msg is the message, with "chunk:line: " in front when the position is known
	// ("scripts/load.lua:12: boom").
	Msg string
	// Traceback is the Lua stack at the error ("stack traceback:\n\t..."), when known.
	Traceback string
	// Value is the error value in Go form (see ToGo) when it is not a string, for structured
	// errors such as error({code = "EACCES", path = p}); nil otherwise.
	Value any
}

func (e *ScriptError) Error() string { return e.Msg }

// StopError reports a state stopped from outside the script: its context ended (a timeout, a
// cancellation) or the memory limit was hit. Cause is context.Cause of the state's context,
// so errors.Is(err, ErrTimeout), errors.Is(err, ErrMemory) and errors.Is(err, context.Canceled)
// classify it.
type StopError struct {
	// Where is the script position the state was stopped at ("scripts/x.lua:3: "), or "".
	Where string
	// Cause is why the state was stopped.
	Cause error
	// Traceback is the Lua stack where the state was stopped, when known.
	Traceback string
}

func (e *StopError) Error() string { return e.Where + e.Cause.Error() }

func (e *StopError) Unwrap() error { return e.Cause }

// Is makes a plain context deadline count as ErrTimeout.
func (e *StopError) Is(target error) bool {
	return target == ErrTimeout && errors.Is(e.Cause, context.DeadlineExceeded)
}

// positionRE finds the "chunk:line: " gopher-lua puts in front of a message. Chunk names may
// hold colons themselves ("pipeline.yaml:load"), hence the lazy match up to ":<digits>: ".
var positionRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(.*?:\d+: )`) })

// position returns the leading "chunk:line: " of msg, or "".
func position(msg string) string {
	if m := positionRE().FindStringSubmatch(msg); m != nil && !strings.Contains(m[1], "\n") {
		return m[1]
	}
	return ""
}
