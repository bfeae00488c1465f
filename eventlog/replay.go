package eventlog

import (
	"encoding/json"
	"slices"
	"time"
)

// State is what a log says about a task: the result of replaying its
// records in order. Replay is deterministic: the same records give the same
// State, whatever the clock.
type State struct {
	TaskID string `json:"task_id"`
	// Start is the latest invocation's TASK_START, nil for an empty log.
	Start       *StartInfo `json:"start,omitempty"`
	StartedAt   string     `json:"started_at,omitempty"` // first TASK_START's timestamp
	Invocations int        `json:"invocations"`
	// Summary closes the latest invocation; nil if it was cut off.
	Summary *Record `json:"summary,omitempty"`
	// Steps by id, and the order in which they were first named.
	Steps   map[string]*StepState  `json:"steps"`
	Order   []string               `json:"order"`
	Markers map[string]*MarkerInfo `json:"markers,omitempty"`
	// ResumedFrom lists steps that a resume_from intervention has named.
	ResumedFrom []string `json:"resumed_from,omitempty"`
	LastSeq     int64    `json:"last_seq"`
	// LastSrcSeq is the highest src_seq of the log: the hub's events after
	// it are not in the log yet (docs/spec.md §8).
	LastSrcSeq int64 `json:"last_src_seq,omitempty"`
	// LastTimestamp is the timestamp of the last record.
	LastTimestamp string `json:"last_timestamp,omitempty"`
	// Notifications by id: the last NOTIFY_* record of each. One whose
	// record is a NOTIFY_SENDING was cut off before it was known sent.
	Notifications map[string]*Record `json:"notifications,omitempty"`
	// SLAMissed: an SLA_MISSED was recorded.
	SLAMissed bool `json:"sla_missed,omitempty"`
}

// StepState is one step as the log tells it.
type StepState struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// RetryCount is the latest attempt's number; Attempts counts STEP_STARTs.
	RetryCount int `json:"retry_count"`
	Attempts   int `json:"attempts"`
	// Dirty: the latest attempt has a STEP_START and nothing that ended it:
	// a crash cut it off.
	Dirty bool `json:"dirty,omitempty"`
	// Unclean: the latest attempt failed, timed out, was interrupted or was
	// cut off, and its cleanup has not run since.
	Unclean bool `json:"unclean,omitempty"`
	// DirtyRecoveries counts recoveries of cut-off attempts since the step
	// last ended by itself (the crash-loop guard reads it).
	DirtyRecoveries int `json:"dirty_recoveries,omitempty"`
	// Attempt token of the latest attempt's processes.
	PGID         int             `json:"pgid,omitempty"`
	StartedAt    string          `json:"started_at,omitempty"`
	EndedAt      string          `json:"ended_at,omitempty"`
	DurationMS   int64           `json:"duration_ms"`
	LastError    string          `json:"last_error,omitempty"`
	InputDigest  string          `json:"input_digest,omitempty"`
	OutputDigest string          `json:"output_digest,omitempty"`
	Output       json.RawMessage `json:"output,omitempty"`
	NextDelayMS  int64           `json:"next_delay_ms,omitempty"`
	Interrupted  bool            `json:"interrupted,omitempty"`
	TimedOut     bool            `json:"timed_out,omitempty"`
	// LastTimestamp is the timestamp of the step's last record.
	LastTimestamp string `json:"last_timestamp,omitempty"`
	// Remote: the latest attempt was dispatched to a hub (DISPATCH), so
	// its processes are a worker's, not this host's.
	Remote bool `json:"remote,omitempty"`
	// CutOff: the latest attempt was dispatched and then reported LOST
	// (its worker went silent, or its reports could not be checked), and
	// its cleanup has not run since: no worker runs it any more, so a
	// coordinator resuming the log cleans it up instead of waiting for it.
	CutOff bool `json:"cut_off,omitempty"`
	// Abandoned: the latest attempt was cut off by a crash and the step
	// then skipped by an intervention, so no cleanup ran: the next run
	// ends what that attempt left running, and a reset or resume_from
	// makes the step dirty again.
	Abandoned bool `json:"abandoned,omitempty"`
	// CachedFrom names the task run whose result the step's SUCCESS took
	// from the cache; "" when it ran.
	CachedFrom string `json:"cached_from,omitempty"`
	// Note is what the step's last STEP_END said besides its error (its
	// message): "cached from …", "expanded into N instance(s)", ….
	Note string `json:"note,omitempty"`
	// ChildLog is the file name of the log in which the latest attempt of
	// a run: step runs its sub-pipeline (its STEP_START's child_log).
	ChildLog string `json:"child_log,omitempty"`
}

// NewState returns the state of an empty log.
func NewState(taskID string) *State {
	return &State{TaskID: taskID, Steps: map[string]*StepState{}, Markers: map[string]*MarkerInfo{}}
}

// Replay returns the state the records describe.
func Replay(taskID string, recs []*Record) *State {
	s := NewState(taskID)
	for _, r := range recs {
		s.Apply(r)
	}
	return s
}

// Complete reports whether the latest invocation ended with the task done.
func (s *State) Complete() bool {
	return s.Summary != nil && s.Summary.Status == Success
}

// Step returns the state of step id, creating a PENDING one if the log has
// not named it.
func (s *State) Step(id string) *StepState {
	st, ok := s.Steps[id]
	if !ok {
		if s.Steps == nil { // a State read back from JSON
			s.Steps = map[string]*StepState{}
		}
		st = &StepState{ID: id, Status: Pending}
		s.Steps[id] = st
		s.Order = append(s.Order, id)
	}
	return st
}

// name creates, PENDING and in one allocation, the steps of a TASK_START
// that the state does not know yet. A 100,000-step TASK_START would
// otherwise cost as many allocations and the growth of the map.
func (s *State) name(steps []StepInfo) {
	fresh := 0
	for _, si := range steps {
		if _, ok := s.Steps[si.ID]; !ok {
			fresh++
		}
	}
	if fresh == 0 {
		return
	}
	if len(s.Steps) == 0 {
		s.Steps = make(map[string]*StepState, fresh)
	}
	s.Order = slices.Grow(s.Order, fresh)
	block := make([]StepState, fresh)
	for _, si := range steps {
		if _, ok := s.Steps[si.ID]; ok {
			continue // named twice
		}
		st := &block[0]
		block = block[1:]
		st.ID, st.Status = si.ID, Pending
		s.Steps[si.ID] = st
		s.Order = append(s.Order, si.ID)
	}
}

// Apply folds one record into the state. Unknown event types are ignored.
func (s *State) Apply(r *Record) {
	s.LastSeq = r.Seq
	s.LastTimestamp = r.Timestamp
	s.LastSrcSeq = max(s.LastSrcSeq, r.SrcSeq)
	switch r.EventType {
	case TaskStart:
		if r.Start == nil {
			return
		}
		s.Start = r.Start
		if s.Invocations == 0 {
			s.StartedAt = r.Timestamp
		}
		s.Invocations++
		s.Summary = nil
		s.name(r.Start.Steps)
	case StepStart:
		st := s.touch(r)
		// A remote attempt was counted by its DISPATCH.
		dispatched := st.Remote && st.Dirty && st.RetryCount == r.RetryCount && st.StartedAt == ""
		st.Status = Running
		st.RetryCount = r.RetryCount
		if !dispatched {
			st.Attempts++
		}
		st.Remote = dispatched || r.Worker != ""
		st.CutOff, st.Abandoned = false, false
		st.CachedFrom = ""
		st.ChildLog = r.ChildLog
		st.Dirty = true
		st.Unclean = true // until it ends cleanly
		st.PGID = r.PGID
		st.StartedAt = r.Timestamp
		st.EndedAt = ""
		st.DurationMS = 0
		st.InputDigest = r.InputDigest
		st.NextDelayMS = 0
		st.Interrupted, st.TimedOut = false, false
	case Dispatch:
		// Handed to the hub: from here the attempt may run, so it is dirty
		// until something ends it (docs/spec.md §8).
		st := s.touch(r)
		st.Status = Running
		st.RetryCount = r.RetryCount
		st.Attempts++
		st.Remote = true
		st.CutOff = false
		st.CachedFrom = ""
		st.Dirty = true
		st.Unclean = true
		st.PGID = 0
		st.StartedAt = ""
		st.EndedAt = ""
		st.DurationMS = 0
		st.InputDigest = r.InputDigest
		st.NextDelayMS = 0
		st.Interrupted, st.TimedOut = false, false
	case Lost:
		// The attempt's worker went silent: cut off, as by a crash.
		st := s.touch(r)
		if st.RetryCount == r.RetryCount {
			st.Status = Running
			st.Dirty = true
			st.Unclean = true
			st.CutOff = st.Remote
			st.LastError = r.ErrorMessage
		}
	case StepProcess:
		st := s.touch(r)
		if st.Dirty && st.RetryCount == r.RetryCount {
			st.PGID = r.PGID
		}
	case StepEnd:
		st := s.touch(r)
		st.Dirty, st.CutOff = false, false
		st.Status = r.Status
		st.RetryCount = r.RetryCount
		st.EndedAt = r.Timestamp
		st.DurationMS = r.DurationMS
		st.DirtyRecoveries = 0
		st.Interrupted, st.TimedOut = r.Interrupted, r.TimedOut
		st.Note = r.Message
		st.CachedFrom = r.CachedFrom // only a SUCCESS carries one
		switch r.Status {
		case Success:
			st.Unclean = false
			st.LastError = ""
			st.NextDelayMS = 0
			st.OutputDigest = r.OutputDigest
			st.Output = r.Output
			if r.InputDigest != "" {
				st.InputDigest = r.InputDigest
			}
		case Skipped:
			st.Unclean = false
			st.LastError = r.ErrorMessage
			st.NextDelayMS = 0
		default: // FAILED, or RUNNING with a retry to come
			st.Unclean = true
			st.LastError = r.ErrorMessage
			st.NextDelayMS = r.NextDelayMS
		}
	case Cleanup:
		st := s.touch(r)
		if r.Dirty {
			st.DirtyRecoveries++
			st.Dirty, st.CutOff = false, false
		}
		st.Status = r.Status
		if r.Status == Failed {
			st.Unclean = true
			st.LastError = r.ErrorMessage
		} else {
			st.Unclean = false
		}
	case Marker:
		if s.Markers == nil { // a State read back from JSON omits an empty map
			s.Markers = map[string]*MarkerInfo{}
		}
		ApplyMarker(s.Markers, r)
	case Warning:
		ApplyMarker(s.Markers, r) // a clear_marker intervention
		s.applyIntervention(r)
	case TaskSummary:
		s.Summary = r
	case NotifySending, NotifySent, NotifyFailed:
		if r.Notify == nil {
			return
		}
		if s.Notifications == nil {
			s.Notifications = map[string]*Record{}
		}
		s.Notifications[r.Notify.ID] = r
	case SLAMissed:
		s.SLAMissed = true
	}
}

func (s *State) touch(r *Record) *StepState {
	st := s.Step(r.StepID)
	st.LastTimestamp = r.Timestamp
	return st
}

func (s *State) applyIntervention(r *Record) {
	iv := r.Intervention
	if iv == nil {
		return
	}
	switch iv.Action {
	case ActionReset, ActionSkip:
		// A change of a step's state after the summary reopens the task.
		s.Summary = nil
	}
	switch iv.Action {
	case ActionReset, ActionResumeFrom:
		for _, id := range iv.Steps {
			st := s.touch(&Record{StepID: id, Timestamp: r.Timestamp})
			if st.Abandoned { // skipped while cut off: its cleanup is still due
				st.Dirty, st.Unclean, st.Abandoned = true, true, false
			}
			if st.Status != Running || !st.Dirty {
				st.Status = Pending
			}
			st.DirtyRecoveries = 0
			st.NextDelayMS = 0 // run again now, not after a retry delay
		}
		if iv.Action == ActionResumeFrom && len(iv.Steps) > 0 {
			s.ResumedFrom = append(s.ResumedFrom, iv.Steps[0])
		}
	case ActionSkip:
		for _, id := range iv.Steps {
			st := s.touch(&Record{StepID: id, Timestamp: r.Timestamp})
			st.Status = Skipped
			st.Abandoned = st.Abandoned || (st.Dirty && !st.Remote)
			st.Dirty = false
			st.Unclean = false
			st.DirtyRecoveries = 0
		}
	}
}

// RemainingDelay is how long a step whose failed attempt asked for a retry
// must still wait at now; 0 when it may run.
func (st *StepState) RemainingDelay(now time.Time) time.Duration {
	if st.NextDelayMS <= 0 || st.EndedAt == "" {
		return 0
	}
	ended, err := time.Parse(time.RFC3339Nano, st.EndedAt)
	if err != nil {
		return 0
	}
	left := ended.Add(time.Duration(st.NextDelayMS) * time.Millisecond).Sub(now)
	if left < 0 {
		return 0
	}
	return left
}

// ApplyMarker applies what r says of a task's idempotency markers to
// markers, by name: a MARKER record sets one, a clear_marker intervention
// removes one; other records change nothing. It is the one rule for
// markers, of a replay (State) and of a process's live view of them.
func ApplyMarker(markers map[string]*MarkerInfo, r *Record) {
	switch {
	case r.EventType == Marker && r.Marker != nil:
		m := *r.Marker
		markers[m.Name] = &m
	case r.EventType == Warning && r.Intervention != nil && r.Intervention.Action == ActionClearMarker:
		delete(markers, r.Intervention.Marker)
	}
}
