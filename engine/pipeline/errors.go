package pipeline

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem in a pipeline file.
type Error struct {
	File string // path as given by the user
	Line int    // 1-based; 0 if unknown
	Step string // step id, "" for top-level problems
	Msg  string // lower-case, no trailing period, may contain a "(did you mean "x"?)" hint

	err error // underlying cause, for errors.Is (a missing file, say)
}

// Error formats the problem as `file:line: step "id": msg`, leaving out the
// line when it is unknown and the step for top-level problems.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	if b.Len() > 0 {
		b.WriteString(": ")
	}
	if e.Step != "" {
		fmt.Fprintf(&b, "step %q: ", e.Step)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying cause, if any: the *fs.PathError of a file
// that could not be read, so that errors.Is(err, fs.ErrNotExist) works.
func (e *Error) Unwrap() error { return e.err }

// problems collects every Error found in one file.
type problems struct {
	file string
	list []*Error
	// others are problems of other files (the sub-pipelines that run:
	// steps name), listed after this file's, as their loads sorted them.
	others []*Error
}

func (p *problems) add(line int, step, format string, args ...any) {
	p.list = append(p.list, &Error{File: p.file, Line: line, Step: step, Msg: fmt.Sprintf(format, args...)})
}

// err returns the problems sorted by line and joined, or nil.
func (p *problems) err() error {
	if len(p.list) == 0 {
		return nil
	}
	slices.SortStableFunc(p.list, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	errs := make([]error, 0, len(p.list)+len(p.others))
	for _, e := range p.list {
		errs = append(errs, e)
	}
	for _, e := range p.others {
		errs = append(errs, e)
	}
	return errors.Join(errs...)
}
