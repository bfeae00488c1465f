package engine

import (
	"context"
	"errors"
	"fmt"
	"os"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/eventlog"
)

// localExecutor carries a shell or Lua body on this machine: the executors
// behind engine/executor's seam, a shell started ahead (warmUp) when there
// is one, the step's timeout.
type localExecutor struct{ r *taskRun }

func (c localExecutor) begin(_ context.Context, at *attemptRun) error {
	return c.r.appendStart(at, nil)
}

func (c localExecutor) carry(ctx context.Context, at *attemptRun) (executor.Result, error) {
	r := c.r
	s := at.n.rs.step
	ex, err := r.executorFor(s)
	if err != nil {
		return r.notStarted(at, err)
	}
	actx, cancel := executor.WithTimeout(ctx, s.Timeout)
	var res executor.Result
	if at.ahead != nil {
		res = at.ahead.Run(actx)
	} else {
		res = ex.Run(actx, at.a)
	}
	cancel()
	return r.bodyEnded(res)
}

// bodyEnded takes the result of a body an executor ran. The error is the
// log's: a body that could not start because its STEP_START could not be
// made durable stops the run.
func (r *taskRun) bodyEnded(res executor.Result) (executor.Result, error) {
	r.e.crash("body:after")
	if res.NotStarted {
		var we *eventlog.WriteError
		if errors.As(res.Err, &we) || r.w.Err() != nil {
			return res, res.Err
		}
	}
	return res, nil
}

// executorFor picks the executor of a step's body.
func (r *taskRun) executorFor(s *pipeline.Step) (executor.Executor, error) {
	if s.Command == "" {
		return r.luaExecutor(s)
	}
	return r.e.opts.Executors["shell"], nil
}

// luaExecutor runs Lua in this process, or in a child apollo process for
// isolation: process.
func (r *taskRun) luaExecutor(s *pipeline.Step) (executor.Executor, error) {
	if s.Isolation == "process" {
		bin, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("isolation: process: find the apollo binary: %w", err)
		}
		return &executor.Isolated{Binary: bin}, nil
	}
	ex, ok := r.e.opts.Executors["lua"]
	if !ok {
		return nil, errors.New("no executor for Lua steps in this build")
	}
	return ex, nil
}
