package history_test

import (
	"errors"
	"reflect"
	"testing"

	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// TestSummaryMatchesList builds each fixture run's entry record by record,
// as apollo serve does while it follows logs, and wants what List gives.
func TestSummaryMatchesList(t *testing.T) {
	_, opts := listFixture(t)
	runs, err := runsOf(opts).List(history.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	files, err := statedir.Dir{Root: opts.StateDir}.AllLogs("")
	if err != nil {
		t.Fatal(err)
	}
	now := opts.Clock.Now()
	for _, want := range runs {
		var f statedir.LogFile
		for _, lf := range files {
			if lf.Path == want.Log {
				f = lf
			}
		}
		s := history.NewSummary(f)
		_, err := eventlog.Read(f.Path, eventlog.ReadOptions{TaskID: f.TaskID}, func(r *eventlog.Record) error {
			s.Apply(r)
			return nil
		})
		if ce := new(eventlog.CorruptError); errors.As(err, &ce) {
			s.Fail(err)
		}
		got := s.Info(want.Status == "running", want.PID, now)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Summary of %s:\n got %+v\nwant %+v", want.TaskID, got, want)
		}
	}
}
