package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"apollo/engine"
	"apollo/engine/pipeline"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// maxDates bounds a backfill: 27 years of days.
const maxDates = 10_000

// parseDates reads --dates: dates (YYYY-MM-DD) and ranges FROM..TO joined
// by commas, returned in order, oldest first, each once.
func parseDates(s string) ([]string, error) {
	bad := func(format string, args ...any) error {
		return &usage.Error{Msg: "run: --dates " + fmt.Sprintf("%q: ", s) + fmt.Sprintf(format, args...) +
			" (write --dates 2026-11-01..2026-11-30, or dates and ranges joined by commas)"}
	}
	day := func(d string) (time.Time, error) {
		t, err := time.Parse("2006-01-02", strings.TrimSpace(d))
		if err != nil {
			return t, bad("%q is not a date YYYY-MM-DD", strings.TrimSpace(d))
		}
		return t, nil
	}
	seen := map[string]bool{}
	var all []time.Time
	for part := range strings.SplitSeq(s, ",") {
		from, to, isRange := strings.Cut(part, "..")
		a, err := day(from)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = day(to); err != nil {
				return nil, err
			}
			if b.Before(a) {
				return nil, bad("%s comes after %s; write the earlier date first", strings.TrimSpace(from), strings.TrimSpace(to))
			}
		}
		for t := a; !t.After(b); t = t.AddDate(0, 0, 1) {
			if !seen[t.Format(time.DateOnly)] {
				seen[t.Format(time.DateOnly)] = true
				all = append(all, t)
			}
			if len(all) > maxDates {
				return nil, bad("more than %d dates", maxDates)
			}
		}
	}
	if len(all) == 0 {
		return nil, bad("no dates")
	}
	out := make([]string, len(all))
	for i, t := range all {
		out[i] = t.Format(time.DateOnly)
	}
	slices.Sort(out) // YYYY-MM-DD sorts as text
	return out, nil
}

// runDates is apollo run --dates: a backfill. The task of each date (its
// default task id, <task_name>-<date>, task_date set) runs or resumes in
// turn, oldest first; one already complete does nothing. A date that fails
// does not stop the others; a signal, a pipeline error or a damaged disk
// does.
func runDates(ctx context.Context, e *engine.Engine, in invocation, o *runOptions, ro engine.RunOptions) error {
	switch {
	case o.taskID != "":
		return &usage.Error{Msg: "run: --dates and --task-id do not go together: each date is its own task, <task_name>-<date>"}
	case o.json:
		return &usage.Error{Msg: "run: --dates and --json do not go together: plan one date at a time with --var task_date=DATE"}
	}
	if _, ok := ro.Vars["task_date"]; ok {
		return &usage.Error{Msg: "run: --dates sets task_date for each date; leave out --var task_date"}
	}
	dates, err := parseDates(o.dates)
	if err != nil {
		return err
	}
	say := func(format string, args ...any) {
		if o.progress != engine.ProgressQuiet {
			fmt.Fprintf(in.stdout, format, args...)
		}
	}
	var failed []string
	for i, d := range dates {
		if ctx.Err() != nil {
			break
		}
		say("--- %s (date %d of %d) ---\n", d, i+1, len(dates))
		vars := map[string]string{"task_date": d}
		for k, v := range ro.Vars {
			vars[k] = v
		}
		one := ro
		one.Vars = vars
		err := e.Run(ctx, in.args[0], one)
		var (
			pe      *pipeline.Error
			ue      *usage.Error
			stopped *engine.InterruptedError
		)
		switch {
		case err == nil:
		case errors.As(err, &pe), errors.As(err, &ue), errors.As(err, &stopped):
			return err
		case isTaskOutcome(err):
			fmt.Fprintf(in.stderr, "apollo: %s: %v\n", d, err)
			failed = append(failed, d)
		default:
			return fmt.Errorf("backfill stopped at %s: %w", d, err)
		}
	}
	if ctx.Err() != nil {
		return &engine.InterruptedError{TaskID: "backfill"}
	}
	say("backfill of %d date(s): %d succeeded or were already complete, %d failed\n",
		len(dates), len(dates)-len(failed), len(failed))
	if len(failed) > 0 {
		return fmt.Errorf("backfill: %d of %d date(s) failed: %s; run the same command again to resume them",
			len(failed), len(dates), strings.Join(failed, ", "))
	}
	return nil
}

// isTaskOutcome reports whether err concerns one date's task only: it
// failed, its succeeded steps changed, or another process runs it.
func isTaskOutcome(err error) bool {
	var (
		failed  *engine.TaskFailedError
		changed *engine.ChangedError
		locked  *eventlog.LockedError
	)
	return errors.As(err, &failed) || errors.As(err, &changed) || errors.As(err, &locked)
}
