package eventlog

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// stepView is the part of a StepState the replay table checks.
type stepView struct {
	Status                    string
	Dirty, Unclean, Abandoned bool
	DirtyRecoveries           int
	Attempts                  int
	RetryCount                int
	NextDelayMS               int64
	LastError                 string
}

func viewOf(st *StepState) stepView {
	return stepView{Status: st.Status, Dirty: st.Dirty, Unclean: st.Unclean, Abandoned: st.Abandoned, DirtyRecoveries: st.DirtyRecoveries,
		Attempts: st.Attempts, RetryCount: st.RetryCount, NextDelayMS: st.NextDelayMS, LastError: st.LastError}
}

// Record builders for replay tables.
func rStart(steps ...string) *Record {
	info := &StartInfo{Version: Version}
	for _, id := range steps {
		info.Steps = append(info.Steps, StepInfo{ID: id, DependsOn: []string{}})
	}
	return &Record{EventType: TaskStart, Status: Running, Start: info}
}

func rBegin(id string, retry int) *Record {
	return &Record{EventType: StepStart, StepID: id, Status: Running, RetryCount: retry}
}

func rEnd(id, status string, retry int) *Record {
	return &Record{EventType: StepEnd, StepID: id, Status: status, RetryCount: retry}
}

func rRetry(id string, retry int, delayMS int64, msg string) *Record {
	return &Record{EventType: StepEnd, StepID: id, Status: Running, RetryCount: retry, NextDelayMS: delayMS, ErrorMessage: msg}
}

func rFail(id string, retry int, msg string) *Record {
	return &Record{EventType: StepEnd, StepID: id, Status: Failed, RetryCount: retry, ErrorMessage: msg}
}

func rCleanup(id, status string, dirty bool, msg string) *Record {
	return &Record{EventType: Cleanup, StepID: id, Status: status, Dirty: dirty, ErrorMessage: msg}
}

func rMarker(name, state string) *Record {
	return &Record{EventType: Marker, Marker: &MarkerInfo{Name: name, State: state}}
}

func rAction(action string, steps ...string) *Record {
	return &Record{EventType: Warning, Intervention: &Intervention{Action: action, Steps: steps, By: "apollo script"}}
}

func rClearMarker(name string) *Record {
	return &Record{EventType: Warning, Intervention: &Intervention{Action: ActionClearMarker, Marker: name}}
}

func rSummary(status string) *Record {
	return &Record{EventType: TaskSummary, Status: status, Summary: &SummaryInfo{Counts: map[string]int{}}}
}

func TestReplay(t *testing.T) {
	pending := stepView{Status: Pending}
	success := stepView{Status: Success, Attempts: 1}
	tests := []struct {
		name        string
		recs        []*Record
		want        map[string]stepView
		complete    bool
		invocations int
		markers     map[string]string // name → state
		resumedFrom []string
	}{
		{name: "empty log", recs: nil, want: map[string]stepView{}},
		{name: "TASK_START names every step", recs: []*Record{rStart("a", "b")},
			want: map[string]stepView{"a": pending, "b": pending}, invocations: 1},
		{name: "success path", recs: []*Record{rStart("a", "b"), rBegin("a", 0), rEnd("a", Success, 0),
			rBegin("b", 0), rEnd("b", Success, 0), rSummary(Success)},
			want: map[string]stepView{"a": success, "b": success}, complete: true, invocations: 1},
		{name: "dirty: cut off after STEP_START", recs: []*Record{rStart("a", "b"), rBegin("a", 0), rEnd("a", Success, 0), rBegin("b", 0)},
			want:        map[string]stepView{"a": success, "b": {Status: Running, Dirty: true, Unclean: true, Attempts: 1}},
			invocations: 1},
		{name: "retry pending", recs: []*Record{rStart("a"), rBegin("a", 0), rRetry("a", 0, 5000, "exit status 1")},
			want:        map[string]stepView{"a": {Status: Running, Unclean: true, Attempts: 1, NextDelayMS: 5000, LastError: "exit status 1"}},
			invocations: 1},
		{name: "retried then succeeded", recs: []*Record{rStart("a"), rBegin("a", 0), rRetry("a", 0, 5000, "boom"),
			rBegin("a", 1), rEnd("a", Success, 1)},
			want: map[string]stepView{"a": {Status: Success, Attempts: 2, RetryCount: 1}}, invocations: 1},
		{name: "failed for good", recs: []*Record{rStart("a"), rBegin("a", 0), rFail("a", 0, "boom"), rSummary(Failed)},
			want:        map[string]stepView{"a": {Status: Failed, Unclean: true, Attempts: 1, LastError: "boom"}},
			invocations: 1},
		{name: "skipped", recs: []*Record{rStart("a"), rEnd("a", Skipped, 0)},
			want: map[string]stepView{"a": {Status: Skipped}}, invocations: 1},
		{name: "dirty cleanup counts recoveries", recs: []*Record{rStart("a"), rBegin("a", 0),
			rStart("a"), rCleanup("a", Pending, true, ""), rBegin("a", 0),
			rStart("a"), rCleanup("a", Pending, true, "")},
			want:        map[string]stepView{"a": {Status: Pending, DirtyRecoveries: 2, Attempts: 2}},
			invocations: 3},
		{name: "a STEP_END resets the recoveries", recs: []*Record{rStart("a"), rBegin("a", 0),
			rStart("a"), rCleanup("a", Pending, true, ""), rBegin("a", 0), rEnd("a", Success, 0)},
			want: map[string]stepView{"a": {Status: Success, Attempts: 2}}, invocations: 2},
		{name: "cleanup after a failed attempt", recs: []*Record{rStart("a"), rBegin("a", 0), rFail("a", 0, "boom"),
			rStart("a"), rCleanup("a", Pending, false, "")},
			want:        map[string]stepView{"a": {Status: Pending, Attempts: 1, LastError: "boom"}},
			invocations: 2},
		{name: "failed cleanup", recs: []*Record{rStart("a"), rBegin("a", 0),
			rStart("a"), rCleanup("a", Failed, true, "rm: permission denied")},
			want:        map[string]stepView{"a": {Status: Failed, Unclean: true, DirtyRecoveries: 1, Attempts: 1, LastError: "rm: permission denied"}},
			invocations: 2},
		{name: "reset", recs: []*Record{rStart("a", "b"), rBegin("a", 0), rEnd("a", Success, 0), rBegin("b", 0),
			rFail("b", 0, "boom"), rSummary(Failed), rAction(ActionReset, "a", "b")},
			want: map[string]stepView{"a": {Status: Pending, Attempts: 1},
				"b": {Status: Pending, Unclean: true, Attempts: 1, LastError: "boom"}},
			invocations: 1},
		{name: "reset keeps a dirty step dirty", recs: []*Record{rStart("a"), rBegin("a", 0), rAction(ActionReset, "a")},
			want:        map[string]stepView{"a": {Status: Running, Dirty: true, Unclean: true, Attempts: 1}},
			invocations: 1},
		{name: "skip", recs: []*Record{rStart("a", "b"), rBegin("a", 0), rFail("a", 0, "boom"), rBegin("b", 0),
			rAction(ActionSkip, "a", "b")},
			want: map[string]stepView{"a": {Status: Skipped, Attempts: 1, LastError: "boom"},
				"b": {Status: Skipped, Abandoned: true, Attempts: 1}},
			invocations: 1},
		{name: "skip of a cut-off step abandons it", recs: []*Record{rStart("a"), rBegin("a", 0), rAction(ActionSkip, "a")},
			want:        map[string]stepView{"a": {Status: Skipped, Abandoned: true, Attempts: 1}},
			invocations: 1},
		{name: "reset of an abandoned step makes it dirty again", recs: []*Record{rStart("a"), rBegin("a", 0),
			rAction(ActionSkip, "a"), rAction(ActionReset, "a")},
			want:        map[string]stepView{"a": {Status: Pending, Dirty: true, Unclean: true, Attempts: 1}},
			invocations: 1},
		{name: "a new attempt ends the abandonment", recs: []*Record{rStart("a"), rBegin("a", 0),
			rAction(ActionSkip, "a"), rAction(ActionReset, "a"), rBegin("a", 1)},
			want:        map[string]stepView{"a": {Status: Running, Dirty: true, Unclean: true, Attempts: 2, RetryCount: 1}},
			invocations: 1},
		{name: "resume_from", recs: []*Record{rStart("a", "b", "c"), rBegin("a", 0), rEnd("a", Success, 0),
			rBegin("b", 0), rEnd("b", Success, 0), rBegin("c", 0), rEnd("c", Success, 0), rSummary(Success),
			rStart("a", "b", "c"), rAction(ActionResumeFrom, "b", "c")},
			want:        map[string]stepView{"a": success, "b": {Status: Pending, Attempts: 1}, "c": {Status: Pending, Attempts: 1}},
			invocations: 2, resumedFrom: []string{"b"}},
		{name: "markers", recs: []*Record{rStart("a"), rMarker("m1", MarkerPending), rMarker("m2", MarkerPending),
			rMarker("m1", MarkerDone)},
			want: map[string]stepView{"a": pending}, invocations: 1,
			markers: map[string]string{"m1": MarkerDone, "m2": MarkerPending}},
		{name: "clear_marker", recs: []*Record{rStart("a"), rMarker("m1", MarkerDone), rMarker("m2", MarkerDone),
			rClearMarker("m1"), rClearMarker("never-set")},
			want: map[string]stepView{"a": pending}, invocations: 1, markers: map[string]string{"m2": MarkerDone}},
		{name: "informational records change nothing", recs: []*Record{rStart("a"), rBegin("a", 0), rEnd("a", Success, 0),
			{EventType: Warning, Message: "torn tail repaired", Intervention: &Intervention{Action: ActionTornTail}},
			{EventType: Warning, Message: "no intervention"},
			{EventType: Marker}, {EventType: TaskStart}, {EventType: "FUTURE_EVENT", StepID: "a", Status: Failed},
			rSummary(Success)},
			want: map[string]stepView{"a": success}, complete: true, invocations: 1},
		{name: "a new invocation reopens a complete task", recs: []*Record{rStart("a"), rBegin("a", 0), rEnd("a", Success, 0),
			rSummary(Success), rStart("a")},
			want: map[string]stepView{"a": success}, invocations: 2},
		{name: "complete again after the new invocation's summary", recs: []*Record{rStart("a"), rBegin("a", 0),
			rEnd("a", Success, 0), rSummary(Success), rStart("a"), rSummary(Success)},
			want: map[string]stepView{"a": success}, complete: true, invocations: 2},
		{name: "a reset after the summary reopens the task", recs: []*Record{rStart("a"), rBegin("a", 0),
			rEnd("a", Success, 0), rSummary(Success), rAction(ActionReset, "a")},
			want: map[string]stepView{"a": {Status: Pending, Attempts: 1}}, invocations: 1},
		{name: "a torn_tail warning after the summary keeps it complete", recs: []*Record{rStart("a"), rBegin("a", 0),
			rEnd("a", Success, 0), rSummary(Success), rAction(ActionTornTail)},
			want: map[string]stepView{"a": success}, complete: true, invocations: 1},
		{name: "a failed summary is not complete", recs: []*Record{rStart("a"), rBegin("a", 0), rEnd("a", Success, 0),
			rSummary(Failed)},
			want: map[string]stepView{"a": success}, invocations: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := Replay(testTask, logRecords(testTask, tt.recs))
			got := map[string]stepView{}
			for id, st := range s.Steps {
				got[id] = viewOf(st)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("steps = %+v\nwant    %+v", got, tt.want)
			}
			if got, want := s.Complete(), tt.complete; got != want {
				t.Errorf("Complete() = %v, want %v", got, want)
			}
			if got, want := s.Invocations, tt.invocations; got != want {
				t.Errorf("Invocations = %d, want %d", got, want)
			}
			gotMarkers := map[string]string{}
			for name, m := range s.Markers {
				gotMarkers[name] = m.State
			}
			if tt.markers == nil {
				tt.markers = map[string]string{}
			}
			if !reflect.DeepEqual(gotMarkers, tt.markers) {
				t.Errorf("markers = %v, want %v", gotMarkers, tt.markers)
			}
			if !reflect.DeepEqual(s.ResumedFrom, tt.resumedFrom) {
				t.Errorf("ResumedFrom = %v, want %v", s.ResumedFrom, tt.resumedFrom)
			}
			if n := len(tt.recs); n > 0 {
				if got, want := s.LastSeq, int64(n); got != want {
					t.Errorf("LastSeq = %d, want %d", got, want)
				}
			}
		})
	}
}

func TestReplayOrder(t *testing.T) {
	tests := []struct {
		name string
		from *State
		recs []*Record
		want []string
	}{
		{"starts and a step between", nil, []*Record{rStart("b", "a"), rBegin("z", 0), rStart("c", "a")}, []string{"b", "a", "z", "c"}},
		{"a step named twice", nil, []*Record{rStart("b", "a", "b", "c", "a")}, []string{"b", "a", "c"}},
		{"known before the first start", nil, []*Record{rBegin("a", 0), rEnd("a", Success, 0), rStart("b", "a", "c")}, []string{"a", "b", "c"}},
		{"a state read back from JSON", &State{TaskID: testTask}, []*Record{rStart("b", "a")}, []string{"b", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := tt.from
			if s == nil {
				s = NewState(testTask)
			}
			for _, r := range logRecords(testTask, tt.recs) {
				s.Apply(r)
			}
			if got := s.Order; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Order = %v, want %v", got, tt.want)
			}
			if len(s.Steps) != len(tt.want) {
				t.Errorf("Steps has %d steps, want %d", len(s.Steps), len(tt.want))
			}
			seen := map[*StepState]bool{}
			for _, id := range tt.want {
				st := s.Steps[id]
				if st == nil || st.ID != id || seen[st] {
					t.Fatalf("Steps[%q] = %+v, want its own state", id, st)
				}
				seen[st] = true
				if (id == "b" || id == "c") && st.Status != Pending { // named by a start only
					t.Errorf("Steps[%q].Status = %s, want PENDING", id, st.Status)
				}
			}
			s.Step("b").Status = Running // the states of a start do not share memory
			if got := s.Steps["a"].Status; got == Running {
				t.Errorf("changing step b changed step a")
			}
		})
	}
}

func TestRemainingDelay(t *testing.T) {
	recs := logRecords(testTask, []*Record{rStart("a"), rBegin("a", 0), rRetry("a", 0, 5000, "boom")})
	ended := t0.Add(time.Hour)
	recs[2].Timestamp = FormatTime(ended)
	st := Replay(testTask, recs).Steps["a"]
	tests := []struct {
		now  time.Time
		want time.Duration
	}{
		{ended, 5 * time.Second},
		{ended.Add(2 * time.Second), 3 * time.Second},
		{ended.Add(4999 * time.Millisecond), time.Millisecond},
		{ended.Add(5 * time.Second), 0},
		{ended.Add(time.Hour), 0},
		{ended.Add(-time.Second), 6 * time.Second}, // the clock went back
	}
	for _, tt := range tests {
		if got := st.RemainingDelay(tt.now); got != tt.want {
			t.Errorf("RemainingDelay(end%+v) = %v, want %v", tt.now.Sub(ended), got, tt.want)
		}
	}
	// Once the retry starts, or for a step that never asked, there is no delay.
	recs = append(recs, rBegin("a", 1), rEnd("a", Success, 1))
	st = Replay(testTask, logRecords(testTask, recs)).Steps["a"]
	if got := st.RemainingDelay(ended); got != 0 {
		t.Errorf("RemainingDelay after the retry succeeded = %v, want 0", got)
	}
	if got := (&StepState{NextDelayMS: 100, EndedAt: "garbage"}).RemainingDelay(ended); got != 0 {
		t.Errorf("RemainingDelay with an unreadable time = %v, want 0", got)
	}
}

// randomHistory generates a valid record sequence: it starts with a
// TASK_START, and every record is of a kind the engine or apollo script
// writes, in a random but plausible order.
func randomHistory(rng *rand.Rand, n int) []*Record {
	steps := make([]string, 1+rng.IntN(6))
	for i := range steps {
		steps[i] = fmt.Sprint("s", i)
	}
	pick := func() string { return steps[rng.IntN(len(steps))] }
	statuses := []string{Success, Failed, Running, Skipped}
	recs := []*Record{rStart(steps...)}
	retries := map[string]int{}
	for len(recs) < n {
		var r *Record
		switch k := rng.IntN(100); {
		case k < 30:
			id := pick()
			r = rBegin(id, retries[id])
			r.PGID = rng.IntN(1 << 20)
			r.InputDigest = digest(id)
		case k < 55:
			id := pick()
			switch status := statuses[rng.IntN(len(statuses))]; status {
			case Running:
				r = rRetry(id, retries[id], int64(rng.IntN(10000)), "exit status 1")
				retries[id]++
			case Failed:
				r = rFail(id, retries[id], "boom")
			default:
				r = rEnd(id, status, retries[id])
				if status == Success {
					r.OutputDigest = digest("out")
					r.Output = json.RawMessage(`{"n":` + strconv.Itoa(rng.IntN(100)) + `}`)
				}
			}
			r.DurationMS = int64(rng.IntN(5000))
			r.TimedOut, r.Interrupted = rng.IntN(10) == 0, rng.IntN(10) == 0
		case k < 65:
			status := Pending
			if rng.IntN(4) == 0 {
				status = Failed
			}
			r = rCleanup(pick(), status, rng.IntN(2) == 0, "")
		case k < 75:
			r = rMarker(fmt.Sprint("m", rng.IntN(4)), []string{MarkerPending, MarkerDone, MarkerCleared}[rng.IntN(3)])
		case k < 85:
			switch a := []string{ActionReset, ActionSkip, ActionResumeFrom, ActionClearMarker, ActionTornTail, ActionAcceptChanges}[rng.IntN(6)]; a {
			case ActionClearMarker:
				r = rClearMarker(fmt.Sprint("m", rng.IntN(4)))
			default:
				r = rAction(a, pick(), pick())
			}
		case k < 92:
			r = rSummary([]string{Success, Failed}[rng.IntN(2)])
		default:
			r = rStart(steps...)
		}
		recs = append(recs, r)
	}
	return logRecords(testTask, recs)
}

// testSeed is the seed of randomized tests, APOLLO_SEED to replay one.
func testSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("APOLLO_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("APOLLO_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("APOLLO_SEED=%d", seed)
	return seed
}

// TestReplayProperties: replay is deterministic; folding record by record
// gives the same state; a log written by the Writer and read back replays to
// the same state as the records in memory; and a state saved as JSON at any
// point and carried on (a snapshot) ends where the whole replay does.
func TestReplayProperties(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	histories := 300
	if testing.Short() {
		histories = 50
	}
	for h := range histories {
		recs := randomHistory(rng, 1+rng.IntN(120))
		first, second := Replay(testTask, recs), Replay(testTask, recs)
		if !reflect.DeepEqual(first, second) {
			t.Fatalf("seed %d history %d: two replays differ:\n%+v\n%+v", seed, h, first, second)
		}
		folded := NewState(testTask)
		for _, r := range recs {
			folded.Apply(r)
		}
		if !reflect.DeepEqual(folded, first) {
			t.Fatalf("seed %d history %d: Apply one by one differs from Replay", seed, h)
		}

		if h%10 == 0 { // through the real writer and reader
			path := newLogPath(t)
			w := openLog(t, path, WriterOptions{Durability: Batch})
			fresh := make([]*Record, len(recs))
			for i, r := range recs {
				c := *r
				c.Seq, c.TaskID = 0, ""
				fresh[i] = &c
			}
			mustAppend(t, w, fresh...)
			mustClose(t, w)
			if got := Replay(testTask, readClean(t, path)); !reflect.DeepEqual(got, first) {
				t.Fatalf("seed %d history %d: the log read back replays to\n%+v\nwant %+v", seed, h, got, first)
			}
		}

		k := rng.IntN(len(recs) + 1)
		saved, err := json.Marshal(Replay(testTask, recs[:k]))
		if err != nil {
			t.Fatal(err)
		}
		var resumed State
		if err := json.Unmarshal(saved, &resumed); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs[k:] {
			resumed.Apply(r)
		}
		if got, want := jsonState(t, &resumed), jsonState(t, first); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d history %d: state saved at record %d and carried on =\n%+v\nwant %+v", seed, h, k, got, want)
		}
	}
}

// jsonState is s as a snapshot holds it: marshalled and read back.
func jsonState(t *testing.T, s *State) *State {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var out State
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}
