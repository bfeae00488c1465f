package stdlib

import (
	"encoding/json"
	"io"
)

// Marker is an idempotency marker as the event log records it.
type Marker struct {
	Name string
	// State is "pending", "done" or "cleared".
	State string
	// Result is fn's (or create's) JSON-encoded result, for "done".
	Result json.RawMessage
}

// Env is what the standard library needs from the step that runs it. The
// engine implements it over the task's event log; tests use a fake.
type Env interface {
	// TaskID, StepID, RetryCount and InputDigest identify the attempt.
	TaskID() string
	StepID() string
	RetryCount() int
	InputDigest() string
	// Workspace is the absolute folder steps run in; StateDir the absolute
	// state directory. apollo.fs and apollo.idem may touch only these two.
	Workspace() string
	StateDir() string
	// Marker returns the task's marker of that name, if any.
	Marker(name string) (Marker, bool)
	// RecordMarker appends a MARKER record and returns once it is durable.
	RecordMarker(m Marker) error
	// Log receives apollo.log lines (the step's output file).
	Log() io.Writer
}

// StepReport is one step as apollo.state.steps() shows it.
type StepReport struct {
	ID         string `json:"id"`
	Status     string `json:"status"`
	Attempts   int    `json:"attempts"`
	RetryCount int    `json:"retry_count"`
	Dirty      bool   `json:"dirty"`
	LastError  string `json:"last_error"`
}

// StateEnv is the extra access `apollo script` recovery scripts get through
// apollo.state. Interventions are appended as records, never edits.
type StateEnv interface {
	Steps() []StepReport
	Markers() []Marker
	// Intervene appends a WARNING-backed intervention: action is "reset",
	// "skip" or "clear_marker"; target a step id or a marker name.
	Intervene(action, target, why string) error
}
