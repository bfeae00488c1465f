package nemesis

import (
	"bytes"
	"strings"
	"testing"

	"apollo/eventlog"
)

// logOf encodes records as a log's lines, numbering them from 1.
func logOf(t *testing.T, recs ...*eventlog.Record) [][]byte {
	t.Helper()
	var lines [][]byte
	for i, r := range recs {
		r.Seq = int64(i + 1)
		r.TaskID = "t"
		if r.Status == "" {
			r.Status = eventlog.Running
		}
		b, err := eventlog.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, bytes.TrimSuffix(b, []byte("\n")))
	}
	return lines
}

func rec(typ, step string, n int) *eventlog.Record {
	return &eventlog.Record{EventType: typ, StepID: step, RetryCount: n}
}

func end(step string, n int) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.StepEnd, StepID: step, RetryCount: n, Status: eventlog.Success}
}

func summary() *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.TaskSummary, Status: eventlog.Success}
}

// kinds lists the kinds of vs, in order.
func kinds(vs []Violation) string {
	var k []string
	for _, v := range vs {
		k = append(k, v.Kind)
	}
	return strings.Join(k, ",")
}

// TestCheck feeds the checker runs that keep the invariants and runs that
// break each one, and expects exactly the breaches named.
func TestCheck(t *testing.T) {
	start := &eventlog.Record{EventType: eventlog.TaskStart}
	cleanDirty := &eventlog.Record{EventType: eventlog.Cleanup, StepID: "a", RetryCount: 0, Dirty: true, Status: eventlog.Pending}
	good := func() [][]byte {
		return logOf(t, start, rec(eventlog.Dispatch, "a", 0), rec(eventlog.StepStart, "a", 0),
			rec(eventlog.Lost, "a", 0), cleanDirty, rec(eventlog.Dispatch, "a", 1), end("a", 1),
			rec(eventlog.Dispatch, "b", 0), end("b", 0), summary())
	}
	cases := []struct {
		name string
		run  Run
		want string
	}{
		{"a lost attempt ran again: allowed", Run{Steps: []string{"a", "b"}, Logs: []Log{{"A", good()[:4]}, {"B", good()}},
			Effects: []Effect{{"a", 0, "w1"}, {"a", 1, "w2"}, {"b", 0, "w1"}}}, ""},
		{"the hub's log is the reference", Run{Steps: []string{"a", "b"}, Hub: good(), Logs: []Log{{"A", good()[:6]}},
			Effects: []Effect{{"a", 1, "w2"}, {"b", 0, "w1"}}}, ""},
		{"unfinished", Run{Steps: []string{"a", "b"}, Logs: []Log{{"A", good()[:7]}},
			Effects: []Effect{{"a", 1, "w2"}}}, "log,done-once"},
		{"done twice, two ends, a fenced end", Run{Steps: []string{"a"}, Logs: []Log{{"A", logOf(t, start,
			rec(eventlog.Dispatch, "a", 0), rec(eventlog.Dispatch, "a", 1), end("a", 1), end("a", 0), end("a", 1), summary())}},
			Effects: []Effect{{"a", 0, "w"}, {"a", 1, "w"}}}, "fenced-end,two-ends,done-once"},
		{"an end after its LOST", Run{Steps: []string{"a"}, Logs: []Log{{"A", logOf(t, start,
			rec(eventlog.Dispatch, "a", 0), rec(eventlog.Lost, "a", 0), end("a", 0), summary())}},
			Effects: []Effect{{"a", 0, "w"}}}, "fenced-end"},
		{"effect missing, extra effects", Run{Steps: []string{"a", "b"}, Logs: []Log{{"A", good()}},
			Effects: []Effect{{"a", 1, "w"}, {"a", 1, "w2"}, {"b", 3, "w"}}},
			"effect-gone,extra-effect,extra-effect"},
		{"an attempt ended by a coordinator's request: its effect is no one's", Run{Steps: []string{"a"}, Logs: []Log{{"A", logOf(t, start,
			rec(eventlog.Dispatch, "a", 0), &eventlog.Record{EventType: eventlog.StepEnd, StepID: "a", Status: eventlog.Running,
				Interrupted: true, ErrorMessage: "interrupted: the coordinator was asked to stop"},
			rec(eventlog.Dispatch, "a", 1), end("a", 1), summary())}},
			Effects: []Effect{{"a", 0, "w"}, {"a", 1, "w"}}}, "interrupted-end,extra-effect"},
		{"a log that is not a prefix", Run{Steps: []string{"a", "b"}, Logs: []Log{{"A", good()},
			{"B", append(good()[:3], logOf(t, start)...)}},
			Effects: []Effect{{"a", 1, "w2"}, {"b", 0, "w1"}}}, "prefix"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs := Check(c.run)
			if got := kinds(vs); got != c.want {
				t.Errorf("violations %q, want %q: %v", got, c.want, vs)
			}
		})
	}
}

// TestParse checks that a line cut short by a killed writer is no record
// and no effect.
func TestParse(t *testing.T) {
	if got := ParseLines([]byte("a\nb\nc")); len(got) != 2 {
		t.Errorf("ParseLines: %q", got)
	}
	got := ParseEffects([]byte("s1 0 w1\ns2 1 w2\ns3 x\ns4 "))
	if len(got) != 2 || got[1] != (Effect{"s2", 1, "w2"}) {
		t.Errorf("ParseEffects: %v", got)
	}
}
