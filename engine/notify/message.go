package notify

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Message is one notification: the event and what it is about. Its JSON
// is the webhook's body and what the log keeps to send it again.
type Message struct {
	// ID names the notification: the same on every resend, so that a
	// receiver can drop a duplicate (the Message-ID of an email).
	ID       string `json:"id"`
	Text     string `json:"text"`
	Event    string `json:"event"`
	Task     string `json:"task"`
	Pipeline string `json:"pipeline"`
	Step     string `json:"step,omitempty"`
	// Attempt is the step's attempt number (the log's retry_count, from
	// 0); nil for the task's events.
	Attempt  *int   `json:"attempt,omitempty"`
	Status   string `json:"status"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Error    string `json:"error,omitempty"`
	// Log is the task's log file, absolute: apollo run knows no URL of
	// the run, and apollo inspect/logs read it.
	Log  string `json:"log,omitempty"`
	Time string `json:"time"`
}

// Describe is the message's one-line text, for Text and an email's
// subject: "apollo: step load of task t failed (attempt 2): exit 1".
func (m *Message) Describe() string {
	what := "task " + m.Task
	if m.Step != "" {
		what = fmt.Sprintf("step %s of task %s", m.Step, m.Task)
	}
	var s string
	switch m.Event {
	case "failure":
		s = what + " failed"
	case "success":
		s = what + " succeeded"
	case "retry":
		s = what + " failed and will be retried"
	case "recovered":
		s = what + " recovered: it succeeded after a failure"
	case "sla_missed":
		s = what + " missed its SLA: it was not complete in time"
	default:
		s = what + ": " + m.Event
	}
	if m.Attempt != nil {
		s += fmt.Sprintf(" (attempt %d)", *m.Attempt)
	}
	if m.Error != "" {
		s += ": " + firstLine(m.Error)
	}
	return "apollo: " + s
}

// Body is the text of an email: the description, then each field.
func (m *Message) Body() string {
	var b strings.Builder
	b.WriteString(m.Text + "\n\n")
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(&b, "%-9s %s\n", k+":", v)
		}
	}
	line("event", m.Event)
	line("task", m.Task)
	line("pipeline", m.Pipeline)
	line("step", m.Step)
	if m.Attempt != nil {
		line("attempt", fmt.Sprint(*m.Attempt))
	}
	line("status", m.Status)
	if m.ExitCode != nil {
		line("exit code", fmt.Sprint(*m.ExitCode))
	}
	line("time", m.Time)
	line("log", m.Log)
	line("id", m.ID)
	if m.Error != "" {
		b.WriteString("\nerror:\n" + m.Error + "\n")
	}
	return b.String()
}

// JSON is the message's JSON.
func (m *Message) JSON() json.RawMessage {
	b, _ := json.Marshal(m) // strings and ints only
	return b
}

// firstLine is s up to its first line break, at most 200 bytes.
func firstLine(s string) string {
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i] + " …"
	}
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
