package engine

import (
	"context"

	"apollo/engine/executor"
)

// A carrier carries the body of a step's attempts. The lifecycle around it
// — cleanup of what the previous attempt left, a durable beginning, the
// body, one STEP_END, the retry decision — is written once (attempt.go); a
// carrier holds only what differs between kinds of step, each in its own
// file:
//
//	local.go           the local executors: a shell or Lua body on this machine
//	subpipe.go         a child pipeline (run:), run as a task of its own
//	foreach.go         the expansion of a foreach over an upstream output
//	remote_attempt.go  a dispatch through the hub to a worker (--hub)
//	container.go       a command in a container of its image (image:)
//	cachestep.go       a cache hit, around any of the others (cache:)
type carrier interface {
	// begin makes the attempt begin: it numbers it and records its
	// beginning, durable before any body of it can run (a STEP_START, or a
	// DISPATCH), or it settles the attempt without a body (at.done). The
	// error is the log's: the run must stop.
	begin(ctx context.Context, at *attemptRun) error
	// carry runs the attempt's body, or waits for it, to its end, and
	// reports its result for its STEP_END; a carrier that recorded the end
	// itself sets at.done, one that lost the attempt at.lost. The error is
	// the log's: the run must stop.
	carry(ctx context.Context, at *attemptRun) (executor.Result, error)
}

// A leftovers carrier's attempts can leave more than processes running (a
// container): endLeftovers ends what n's previous attempt left, before its
// processes are ended and its cleanup runs, and names it ("" for nothing).
type leftovers interface {
	endLeftovers(n *node) string
}

// An ender is a carrier that acts once an attempt's end is recorded.
type ender interface {
	ended(at *attemptRun, d nodeDone)
}

// carrierFor is what carries n's attempts in this run.
func (r *taskRun) carrierFor(n *node) carrier {
	s := n.rs.step
	var c carrier
	switch {
	case s.Foreach != nil:
		c = expansion{r}
	case s.Run != "":
		c = childPipeline{r}
	case r.hub != nil:
		c = hubDispatch{r}
	case s.Container != nil:
		c = containerRun{r}
	default:
		c = localExecutor{r}
	}
	if r.cacheable(n) {
		c = cached{r: r, inner: c}
	}
	return c
}
