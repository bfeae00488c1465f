package engine

import (
	"errors"
	"fmt"

	"apollo/engine/pipeline"
	"apollo/luart"
)

// luaGatherer is the Lua executor's Gather (executor.Lua): what a step's
// Lua loads, read as its attempts will read it.
type luaGatherer interface {
	Gather(p *pipeline.Pipeline, s *pipeline.Step) (luart.Sources, error)
}

// pinLuaFiles reads the Lua files each step of steps loads — its script,
// its uses module, and the modules these require by name — once, before
// the run starts (docs/spec.md §6.7). Every attempt of the run runs these
// texts, in the runner or in a worker, so an edit during the run cannot
// give one run two versions; and their content is part of the step's
// definition and input digests, so editing the script of a step that
// succeeded is seen like editing an inline body.
func (e *Engine) pinLuaFiles(p *pipeline.Pipeline, steps []*renderedStep) error {
	lx, ok := e.opts.Executors["lua"].(luaGatherer)
	if !ok {
		return nil
	}
	type read struct {
		sources luart.Sources
		digest  string
		err     error
	}
	seen := map[[5]string]read{} // steps with the same bodies load the same files
	var errs []error
	for _, rs := range steps {
		s := rs.step
		key := [5]string{s.Lua, s.Script, s.Uses, s.CleanupLua, s.CleanupScript}
		if key == ([5]string{}) {
			continue
		}
		got, done := seen[key]
		if !done {
			got.sources, got.err = lx.Gather(p, s)
			got.digest = got.sources.Digest()
			seen[key] = got
		}
		if got.err != nil {
			errs = append(errs, fmt.Errorf("step %q: read the Lua files it loads: %w", s.ID, got.err))
			continue
		}
		if got.digest != "" {
			rs.sources, rs.filesDigest = got.sources, got.digest
			rs.defDigest = definitionDigest(rs)
		}
	}
	return errors.Join(errs...)
}
