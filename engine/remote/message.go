package remote

import (
	"encoding/json"
	"strconv"
	"time"

	"apollo/engine/pipeline"
	"apollo/luart"
)

// Work is one attempt of a step, as the coordinator dispatches it: all a
// worker needs to run it with the same executors as local mode.
type Work struct {
	Task    string `json:"task"`
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Pool    string `json:"pool"`
	// Run names the task run: its log's run_nonce. Events of another run
	// of the same task id are not this one's.
	Run string `json:"run"`
	// Secret is the attempt's secret (AttemptSecret): a worker's reports
	// of the attempt carry it back. Never logged or printed.
	Secret string `json:"secret"`
	// Epoch is the revision of the coordinator's lease when it dispatched.
	Epoch       uint64 `json:"epoch"`
	Coordinator string `json:"coordinator"` // host:pid
	// Pipeline holds the pipeline's settings and this one step (Steps[0]):
	// the Lua executor resolves scripts and modules under Pipeline.Dir.
	Pipeline *pipeline.Pipeline `json:"pipeline"`
	// Command is the rendered shell body; Env the step's rendered env and
	// the APOLLO_* variables of docs/spec.md §3.1, added to the worker's
	// environment.
	Command      string                     `json:"command,omitempty"`
	Env          []string                   `json:"env"`
	Vars         map[string]string          `json:"vars"`
	Params       map[string]any             `json:"params,omitempty"`
	Upstream     map[string]json.RawMessage `json:"upstream,omitempty"`
	InputDigest  string                     `json:"input_digest"`
	ArtifactsDir string                     `json:"artifacts_dir"`
	StateDir     string                     `json:"state_dir"`
	OutputLimit  int64                      `json:"output_limit,omitempty"`
	KillGrace    time.Duration              `json:"kill_grace"`
	// Markers are the task's idempotency markers as the coordinator's log
	// holds them at dispatch; the hub's idem bucket is newer where it has
	// a marker.
	Markers []Marker `json:"markers,omitempty"`
	// Sources are the Lua files the step loads, as the coordinator read
	// them when its run began: the worker runs these texts.
	Sources luart.Sources `json:"sources,omitempty"`
	// Traceparent is the W3C traceparent of the coordinator's span of the
	// attempt, when it traces: the worker's span of it is its child, and
	// the body's TRACEPARENT names one of them (docs/spec.md §5.16).
	Traceparent string `json:"traceparent,omitempty"`
}

// Subject is the work's subject: its pool's queue, or the pool's container
// queue for a step with image:, which only workers that run containers
// pull.
func (w *Work) Subject() string {
	if s := w.StepDef(); s != nil && s.Container != nil {
		return ContainerStepSubject(w.Pool, w.Task, w.Step)
	}
	return StepSubject(w.Pool, w.Task, w.Step)
}

// StepDef is the step the work runs.
func (w *Work) StepDef() *pipeline.Step {
	if w.Pipeline == nil || len(w.Pipeline.Steps) == 0 {
		return nil
	}
	return w.Pipeline.Steps[0]
}

// Event types.
const (
	EventStarted = "started" // the body may run now: durable before it does
	EventEnd     = "end"     // the attempt ended; its message is acked after this is stored
	EventLost    = "lost"    // a worker received a redelivery: the holder went silent
	EventMarker  = "marker"  // an idempotency marker changed (idem.once on a worker)
)

// Event is what a worker reports about an attempt, on its pool's event
// subject of the task, in order.
type Event struct {
	Type    string `json:"type"`
	Run     string `json:"run"`
	Task    string `json:"task"`
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Pool    string `json:"pool"`
	// Secret is the attempt's secret, from its message: the coordinator
	// takes no report without it.
	Secret string `json:"secret,omitempty"`
	// Worker is the reporting worker, host:pid; Delivery the message's
	// delivery count as it saw it.
	Worker   string `json:"worker"`
	Delivery uint64 `json:"delivery,omitempty"`
	PGID     int    `json:"pgid,omitempty"`
	// Image and ImageID are, in the start of a container step's attempt,
	// its image as written and the id the worker's engine resolved it to.
	Image   string `json:"image,omitempty"`
	ImageID string `json:"image_id,omitempty"`

	// End.
	Error        string          `json:"error,omitempty"`
	ExitCode     int             `json:"exit_code,omitempty"`
	OutputDigest string          `json:"output_digest,omitempty"`
	Output       json.RawMessage `json:"output,omitempty"`
	TimedOut     bool            `json:"timed_out,omitempty"`
	Interrupted  bool            `json:"interrupted,omitempty"`
	NotStarted   bool            `json:"not_started,omitempty"`
	Note         string          `json:"note,omitempty"`
	DurationMS   int64           `json:"duration_ms,omitempty"`
	// OutBytes is how much output was published before the end, as pieces
	// on the output stream; Tail is the output's last piece, at that
	// offset, carried in the end itself (at most MaxTail bytes), so that
	// the end and the rest of a short output are one write to the hub.
	OutBytes int64  `json:"out_bytes,omitempty"`
	Tail     []byte `json:"tail,omitempty"`

	// Marker.
	Marker *Marker `json:"marker,omitempty"`
	// Seq numbers a worker's marker events within the attempt (their
	// Msg-Ids).
	Seq int `json:"seq,omitempty"`
}

// MaxTail is the most output an end event carries (Event.Tail); more is
// published as pieces first.
const MaxTail = 64 << 10

// MsgID is the event's dedup id on the events stream: a retried publish
// whose acknowledgement was lost is stored once. It holds the run's id, as
// a dispatch's does: another run's attempt of the same number is another
// event.
func (e *Event) MsgID() string {
	id := DispatchID(e.Run, e.Task, e.Step, e.Attempt) + "/" + e.Type
	if e.Type == EventMarker {
		id += "/" + e.Worker + "/" + strconv.Itoa(e.Seq)
	}
	return id
}

// Marker is an idempotency marker (docs/spec.md §6.8, idem.once).
type Marker struct {
	Name   string          `json:"name"`
	State  string          `json:"state"`
	Result json.RawMessage `json:"result,omitempty"`
	// Step and Attempt record what set it, in the idem bucket.
	Step    string `json:"step,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	// Pool is the pool whose key holds it in the idem bucket (Markers.All).
	Pool string `json:"-"`
	// Write names the Markers.Set call that moved it to pending, in the
	// idem bucket only: a value read back after a lost compare-and-set is
	// that call's own stored write only if it carries its Write (two
	// writes of one marker by one attempt are otherwise the same bytes).
	Write string `json:"write,omitempty"`
}

// Output is a piece of a remote attempt's output file, at its offset: a
// coordinator that reads a piece twice writes the same bytes twice.
type Output struct {
	Task    string `json:"task"`
	Pool    string `json:"pool"`
	Secret  string `json:"secret,omitempty"` // the attempt's, as in Event
	Run     string `json:"run"`
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
	Offset  int64  `json:"offset"`
	Data    []byte `json:"data"`
}

// MsgID is the piece's dedup id on the output stream.
func (o *Output) MsgID() string {
	return DispatchID(o.Run, o.Task, o.Step, o.Attempt) + "/out/" + strconv.FormatInt(o.Offset, 10)
}

// Cancel is a coordinator's request, on CancelSubject, that the workers end
// some of a task's running attempts: those it names, each by step and
// attempt number. A request can reach a worker late (held in a connection
// while the network was cut), when newer attempts of the task run: naming
// the attempts keeps it from ending those. An empty request, as a
// coordinator before this one sent, ends every attempt of the task.
type Cancel struct {
	Attempts []CancelAttempt `json:"attempts"`
}

// CancelAttempt names one attempt a Cancel ends.
type CancelAttempt struct {
	Step    string `json:"step"`
	Attempt int    `json:"attempt"`
}

// Names reports whether the request ends attempt n of step.
func (c *Cancel) Names(step string, n int) bool {
	if len(c.Attempts) == 0 {
		return true
	}
	for _, a := range c.Attempts {
		if a.Step == step && a.Attempt == n {
			return true
		}
	}
	return false
}
