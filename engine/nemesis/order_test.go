package nemesis

import (
	"strings"
	"testing"

	"apollo/eventlog"
)

// graphStart is a TASK_START naming steps; each spec is "id:dep,dep" with
// a "?" after the id for an optional step.
func graphStart(specs ...string) *eventlog.Record {
	info := &eventlog.StartInfo{}
	for _, s := range specs {
		id, deps, _ := strings.Cut(s, ":")
		si := eventlog.StepInfo{ID: strings.TrimSuffix(id, "?"), Optional: strings.HasSuffix(id, "?"), DependsOn: []string{}}
		if deps != "" {
			si.DependsOn = strings.Split(deps, ",")
		}
		info.Steps = append(info.Steps, si)
	}
	return &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running, Start: info}
}

func start(step string, n int) *eventlog.Record { return rec(eventlog.StepStart, step, n) }

func ended(step string, n int, status string) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.StepEnd, StepID: step, RetryCount: n, Status: status}
}

func intervene(action string, steps ...string) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.Warning, Status: eventlog.Running,
		Intervention: &eventlog.Intervention{Action: action, Steps: steps}}
}

// numbered gives recs their seq, 1 to n.
func numbered(recs ...*eventlog.Record) []*eventlog.Record {
	for i, r := range recs {
		r.Seq = int64(i + 1)
	}
	return recs
}

// TestStartOrder feeds StartOrder logs whose steps wait for their
// dependencies, in every way a dependency may be satisfied, and logs in
// which a step starts too early, and expects exactly the breaches named.
func TestStartOrder(t *testing.T) {
	diamond := func() *eventlog.Record { return graphStart("a", "b:a", "c:a", "d:b,c") }
	cached := func() *eventlog.Record {
		return &eventlog.Record{EventType: eventlog.StepEnd, StepID: "b", Status: eventlog.Success, CachedFrom: "t-1"}
	}
	cases := []struct {
		name string
		recs []*eventlog.Record
		refs map[string][]string
		want []string // a substring of each violation, in order
	}{
		{"a diamond in order", numbered(diamond(), start("a", 0), ended("a", 0, eventlog.Success),
			start("c", 0), start("b", 0), ended("b", 0, eventlog.Success), ended("c", 0, eventlog.Success),
			start("d", 0), ended("d", 0, eventlog.Success)), nil, nil},
		{"d starts while b runs", numbered(diamond(), start("a", 0), ended("a", 0, eventlog.Success),
			start("b", 0), start("c", 0), ended("c", 0, eventlog.Success), start("d", 0), ended("b", 0, eventlog.Success)),
			nil, []string{"step d started (STEP_START of attempt 0, seq 7) before its dependency b was satisfied: it is RUNNING (STEP_START of attempt 0 at seq 4)"}},
		{"a step starts before its dependency has a record", numbered(diamond(), start("b", 0)),
			nil, []string{"step b started (STEP_START of attempt 0, seq 2) before its dependency a was satisfied: it has no record yet"}},
		{"a cached dependency, a skipped one, an optional failure", numbered(graphStart("a?", "b", "c", "d:a,b,c"),
			start("a", 0), ended("a", 0, eventlog.Failed), cached(),
			ended("c", 0, eventlog.Skipped), start("d", 0)), nil, nil},
		{"a required failure, a retry to come", numbered(graphStart("a", "b", "d:a,b"),
			start("a", 0), ended("a", 0, eventlog.Failed), start("b", 0), ended("b", 0, eventlog.Running), start("d", 0)),
			nil, []string{"dependency a was satisfied: it is FAILED and not optional", "dependency b was satisfied: it is RUNNING (STEP_END RUNNING"}},
		{"a cached step taken before its dependency ended", numbered(graphStart("a", "b:a"), start("a", 0), cached()),
			nil, []string{"step b started (cached STEP_END SUCCESS, seq 3) before its dependency a"}},
		{"satisfied in an earlier invocation, dirty dependent recovered", numbered(diamond(),
			start("a", 0), ended("a", 0, eventlog.Success), start("b", 0), start("c", 0),
			diamond(), &eventlog.Record{EventType: eventlog.Cleanup, StepID: "b", Status: eventlog.Pending, Dirty: true},
			start("b", 1), ended("b", 1, eventlog.Success), &eventlog.Record{EventType: eventlog.Cleanup, StepID: "c", Status: eventlog.Pending, Dirty: true},
			start("c", 1), ended("c", 1, eventlog.Success), start("d", 0)), nil, nil},
		{"a dependency in its cleanup before a rerun", numbered(graphStart("a?", "b:a"),
			start("a", 0), ended("a", 0, eventlog.Failed), &eventlog.Record{EventType: eventlog.Cleanup, StepID: "a", Status: eventlog.Pending},
			start("b", 0)), nil, []string{"it is PENDING (CLEANUP PENDING of attempt 0 at seq 4)"}},
		{"--resume-from b: d waits for b's rerun", numbered(diamond(), start("a", 0), ended("a", 0, eventlog.Success),
			start("b", 0), ended("b", 0, eventlog.Success), start("c", 0), ended("c", 0, eventlog.Success),
			start("d", 0), ended("d", 0, eventlog.Success), diamond(), intervene(eventlog.ActionResumeFrom, "b", "d"),
			start("b", 1), ended("b", 1, eventlog.Success), start("d", 1), ended("d", 1, eventlog.Success)), nil, nil},
		{"--resume-from b: d starts before b's rerun ends", numbered(diamond(), start("a", 0), ended("a", 0, eventlog.Success),
			start("b", 0), ended("b", 0, eventlog.Success), start("c", 0), ended("c", 0, eventlog.Success),
			start("d", 0), ended("d", 0, eventlog.Success), diamond(), intervene(eventlog.ActionResumeFrom, "b", "d"),
			start("d", 1)), nil, []string{"step d started (STEP_START of attempt 1, seq 12) before its dependency b was satisfied: it is PENDING (reopened by the resume_from WARNING at seq 11)"}},
		{"a reset dependency, then a skipped one", numbered(graphStart("a", "b:a"), start("a", 0), ended("a", 0, eventlog.Success),
			intervene(eventlog.ActionReset, "a"), start("b", 0), intervene(eventlog.ActionSkip, "a"), start("b", 1)),
			nil, []string{"step b started (STEP_START of attempt 0, seq 5) before its dependency a was satisfied: it is PENDING (reopened by the reset WARNING at seq 4)"}},
		{"a remote attempt starts at its DISPATCH", numbered(graphStart("a", "b:a"),
			rec(eventlog.Dispatch, "a", 0), rec(eventlog.Lost, "a", 0), rec(eventlog.Dispatch, "a", 1), start("a", 1),
			ended("a", 1, eventlog.Success), rec(eventlog.Dispatch, "b", 0), start("b", 0)), nil, nil},
		{"a DISPATCH before the dependency ended, reported once", numbered(graphStart("a", "b:a"),
			rec(eventlog.Dispatch, "a", 0), rec(eventlog.Dispatch, "b", 0), start("b", 0), ended("a", 0, eventlog.Success)),
			nil, []string{"step b started (DISPATCH of attempt 0, seq 3) before its dependency a was satisfied: it is RUNNING (DISPATCH of attempt 0 at seq 2)"}},
		{"a dependency lost", numbered(graphStart("a", "b:a"),
			rec(eventlog.Dispatch, "a", 0), ended("a", 0, eventlog.Success), rec(eventlog.Lost, "a", 1), rec(eventlog.Lost, "a", 0), start("b", 0)),
			nil, []string{"it is RUNNING (LOST of attempt 0 at seq 5)"}},
		{"an output reference is a dependency", numbered(graphStart("a", "m:a", "b:m"),
			start("a", 0), ended("a", 0, eventlog.Success), start("m", 0), ended("m", 0, eventlog.Success),
			intervene(eventlog.ActionReset, "a"),
			start("b", 0)), map[string][]string{"b": {"a"}}, []string{"step b started (STEP_START of attempt 0, seq 7) before its dependency a was satisfied"}},
		{"foreach instances after their template's expansion, its dependent after them", numbered(graphStart("items", "fe:items", "z:fe"),
			start("items", 0), ended("items", 0, eventlog.Success), start("fe", 0), ended("fe", 0, eventlog.Success),
			start("fe[a]", 0), start("fe[b]", 0), ended("fe[b]", 0, eventlog.Success), ended("fe[a]", 0, eventlog.Success),
			start("z", 0)), nil, nil},
		{"a foreach instance before its template's expansion", numbered(graphStart("items", "fe:items", "z:fe"),
			start("items", 0), ended("items", 0, eventlog.Success), start("fe", 0), start("fe[a]", 0)),
			nil, []string{"step fe[a] started (STEP_START of attempt 0, seq 5) before its dependency fe was satisfied"}},
		{"a dependent of a template before an instance ends, and before one starts", numbered(graphStart("items", "fe:items", "z:fe"),
			start("items", 0), ended("items", 0, eventlog.Success), start("fe", 0), ended("fe", 0, eventlog.Success),
			start("fe[a]", 0), start("z", 0), start("fe[b]", 0)),
			nil, []string{"step z started (STEP_START of attempt 0, seq 7) before fe[a], an instance of its dependency fe, was satisfied: it is RUNNING",
				"step z started (seq 7) before fe[b], an instance of its dependency fe (first recorded at seq 8"}},
		{"a literal foreach: TASK_START lists the instances", numbered(graphStart("e[x]", "e[y]", "z:e[x],e[y]"),
			start("e[x]", 0), ended("e[x]", 0, eventlog.Success), start("z", 0)),
			nil, []string{"step z started (STEP_START of attempt 0, seq 4) before its dependency e[y] was satisfied: it has no record yet"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			vs := StartOrder(c.recs, c.refs)
			if len(vs) != len(c.want) {
				t.Fatalf("%d violation(s), want %d: %v", len(vs), len(c.want), vs)
			}
			for i, v := range vs {
				if v.Kind != KindEarlyStart || !strings.Contains(v.Detail, c.want[i]) {
					t.Errorf("violation %d: %v, want %s: ...%s...", i, v, KindEarlyStart, c.want[i])
				}
			}
		})
	}
}

// TestCheckStartOrder checks that Check reports a step started before its
// dependency succeeded in the reference log.
func TestCheckStartOrder(t *testing.T) {
	g := graphStart("a", "b:a")
	early := logOf(t, g, rec(eventlog.Dispatch, "a", 0), rec(eventlog.Dispatch, "b", 0), end("a", 0), end("b", 0), summary())
	inOrder := logOf(t, graphStart("a", "b:a"), rec(eventlog.Dispatch, "a", 0), end("a", 0), rec(eventlog.Dispatch, "b", 0), end("b", 0), summary())
	effects := []Effect{{"a", 0, "w"}, {"b", 0, "w"}}
	if vs := Check(Run{Steps: []string{"a", "b"}, Logs: []Log{{"A", early}}, Effects: effects}); kinds(vs) != KindEarlyStart {
		t.Errorf("violations %q, want %q: %v", kinds(vs), KindEarlyStart, vs)
	}
	if vs := Check(Run{Steps: []string{"a", "b"}, Logs: []Log{{"A", inOrder}}, Effects: effects}); len(vs) != 0 {
		t.Errorf("violations in a log in order: %v", vs)
	}
}
