package engine

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"apollo/engine/clock"
	"apollo/engine/notify"
	"apollo/engine/pipeline"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// NotifyOptions bound the delivery of notifications (docs/spec.md §2.13).
// Zero fields take their defaults, or APOLLO_NOTIFY_RETRY_DELAY and
// APOLLO_NOTIFY_WAIT when set.
type NotifyOptions struct {
	// Attempts is the most tries of one notification (default 4).
	Attempts int
	// RetryDelay is the wait before the second try, doubled after (1s).
	RetryDelay time.Duration
	// Timeout bounds one try (10s).
	Timeout time.Duration
	// Wait is the most a run waits at its end for notifications still on
	// their way (30s).
	Wait time.Duration
}

// notifyDefaults fills o's zero fields.
func notifyDefaults(o NotifyOptions) NotifyOptions {
	env := func(name string, d *time.Duration, def time.Duration) {
		if *d > 0 {
			return
		}
		if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
			*d = v
			return
		}
		*d = def
	}
	env("APOLLO_NOTIFY_RETRY_DELAY", &o.RetryDelay, time.Second)
	env("APOLLO_NOTIFY_WAIT", &o.Wait, 30*time.Second)
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 4
	}
	return o
}

// notifier sends a run's notifications: each recorded NOTIFY_SENDING,
// durable, before it goes, then NOTIFY_SENT or NOTIFY_FAILED. A task run
// without notify: or sla: has none.
type notifier struct {
	r       *taskRun
	q       *notify.Queue
	targets map[string]pipeline.Notify // by Target name
	// logName and invocation, read when the run starts (the state is not
	// read once steps run), make the notifications' ids.
	logName    string
	invocation int
	// pending are the NOTIFY_SENDING records a crash left without their
	// outcome; slaMissed and startedAt the log's SLA_MISSED and first start.
	pending   []*eventlog.Record
	slaMissed bool
	startedAt string

	mu sync.Mutex
	// known are the notifications the log or this run recorded, by id.
	known map[string]bool
	// failed are the steps with a failed attempt not yet followed by a
	// success; prevFailed says a step failed an attempt, or an earlier
	// invocation ended the task FAILED, since the task last succeeded.
	failed     map[string]bool
	prevFailed bool
	// slaMu guards the sla's timer and its end: held through a raise, so
	// that settleSLA returns only once nothing more is sent for it.
	slaMu   sync.Mutex
	sla     clock.Timer
	slaOver bool // the task settled, or the sla was raised
}

// startNotify makes the run's notifier, when the pipeline asks for
// notifications or the log holds some cut off. It reads the replayed
// state, so it is called before this invocation appends anything; sending
// starts with resendNotify.
func (r *taskRun) startNotify() {
	p := r.t.p
	var pending []*eventlog.Record
	for _, rec := range r.state.Notifications {
		if rec.EventType == eventlog.NotifySending {
			pending = append(pending, rec)
		}
	}
	slices.SortFunc(pending, func(a, b *eventlog.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	any := len(p.Notify) > 0 || p.SLA > 0 || len(pending) > 0
	for _, s := range p.Steps {
		any = any || len(s.Notify) > 0
	}
	if !any {
		return
	}
	inv := r.state.Invocations + 1 // the TASK_START begin appends
	if r.created {
		inv = 1 // the new log's TASK_START is this invocation's
	}
	o := r.e.opts.Notify
	n := &notifier{r: r, targets: map[string]pipeline.Notify{}, known: map[string]bool{}, failed: map[string]bool{},
		logName: filepath.Base(r.logPath), invocation: inv, pending: pending,
		slaMissed: r.state.SLAMissed, startedAt: r.state.StartedAt}
	n.q = notify.New(notify.Options{Attempts: o.Attempts, Backoff: o.RetryDelay, Timeout: o.Timeout}, n)
	for _, t := range p.Notify {
		n.targets[t.Target] = t
	}
	for _, s := range p.Steps {
		for _, t := range s.Notify {
			n.targets[t.Target] = t
		}
	}
	for id := range r.state.Notifications {
		n.known[id] = true
	}
	for id, st := range r.state.Steps {
		if st.Status != eventlog.Success && st.Status != eventlog.Skipped && st.LastError != "" {
			n.failed[id], n.prevFailed = true, true
		}
	}
	if sum := r.state.Summary; sum != nil && sum.Status == eventlog.Failed && (sum.Summary == nil || !sum.Summary.Interrupted) {
		n.prevFailed = true
	}
	r.notes = n
}

// resendNotify sends again each notification the log has as sending but
// not as sent or failed: a crash cut it off. Its id and payload are the
// recorded ones, so the receiver can tell a duplicate.
func (r *taskRun) resendNotify() {
	n := r.notes
	if n == nil {
		return
	}
	for _, rec := range n.pending {
		id := rec.Notify.ID
		var m notify.Message
		if err := json.Unmarshal(rec.Notify.Payload, &m); err != nil {
			n.Failed(&notify.Message{ID: id, Event: rec.Notify.Event, Step: rec.StepID}, rec.Notify.Target, 0,
				fmt.Errorf("its recorded payload does not decode: %v", err))
			continue
		}
		m.ID = id
		t, ok := n.targets[rec.Notify.Target]
		if !ok {
			n.Failed(&m, rec.Notify.Target, 0, fmt.Errorf("its target %s is no longer in the pipeline", rec.Notify.Target))
			continue
		}
		n.q.Send(&m, rec.Notify.Target, n.deliverer(t))
	}
	n.pending = nil
}

// deliverer is the notify.Target of a notify: entry.
func (n *notifier) deliverer(t pipeline.Notify) notify.Target {
	if t.Email == nil {
		return notify.Webhook{URL: t.Webhook}
	}
	e := t.Email
	from := e.From
	if from == "" {
		host, _ := os.Hostname()
		from = "apollo@" + host
	}
	return notify.Email{Addr: e.SMTP, From: from, To: e.To, User: e.User, Password: n.r.secrets[e.PasswordSecret]}
}

// noteStepEnd sends the notifications of a step's recorded STEP_END rec:
// failure, retry, success and recovered to the step's notify: entries, a
// retry also to the top-level ones.
func (r *taskRun) noteStepEnd(s *pipeline.Step, rec *eventlog.Record) {
	n := r.notes
	if n == nil {
		return
	}
	n.mu.Lock()
	var events []string
	switch rec.Status {
	case eventlog.Success:
		events = []string{pipeline.EventSuccess}
		if n.failed[s.ID] {
			events = append(events, pipeline.EventRecovered)
			delete(n.failed, s.ID) // recovered once: a later success is a success
		}
	case eventlog.Running:
		events = []string{pipeline.EventRetry}
		n.failed[s.ID], n.prevFailed = true, true
	case eventlog.Failed:
		events = []string{pipeline.EventFailure}
		n.failed[s.ID], n.prevFailed = true, true
	}
	n.mu.Unlock()
	for _, ev := range events {
		m := r.message(ev, s.ID, rec)
		for _, t := range s.Notify {
			if t.Has(ev) {
				n.send(m, t, rec.Status)
			}
		}
		if ev == pipeline.EventRetry {
			for _, t := range r.t.p.Notify {
				if t.Has(ev) {
					n.send(m, t, rec.Status)
				}
			}
		}
	}
}

// noteTask sends the notifications of the invocation's TASK_SUMMARY rec:
// success (and recovered, after a failure) or failure. An interrupted or
// partial run notifies nothing.
func (r *taskRun) noteTask(rec *eventlog.Record) {
	n := r.notes
	if n == nil || (rec.Summary != nil && rec.Summary.Interrupted) {
		return
	}
	var events []string
	n.mu.Lock()
	switch rec.Status {
	case eventlog.Success:
		events = []string{pipeline.EventSuccess}
		if n.prevFailed {
			events = append(events, pipeline.EventRecovered)
		}
	case eventlog.Failed:
		events = []string{pipeline.EventFailure}
	}
	n.mu.Unlock()
	for _, ev := range events {
		m := r.message(ev, "", rec)
		for _, t := range r.t.p.Notify {
			if t.Has(ev) {
				n.send(m, t, rec.Status)
			}
		}
	}
}

// message is the notification of event about step ("" for the task) whose
// record is rec, secrets masked.
func (r *taskRun) message(event, step string, rec *eventlog.Record) *notify.Message {
	m := &notify.Message{Event: event, Task: r.t.id, Pipeline: r.t.p.TaskName, Step: step,
		Status: shownStatus(rec.Status), ExitCode: rec.ExitCode, Log: r.absLog,
		Time: eventlog.FormatTime(r.e.opts.Clock.Now())}
	if step != "" {
		a := rec.RetryCount
		m.Attempt = &a
	}
	m.Error = rec.ErrorMessage
	if len(m.Error) > 4<<10 {
		m.Error = strings.ToValidUTF8(m.Error[:4<<10], "") + "…"
	}
	if step == "" && event == pipeline.EventFailure && rec.Summary != nil && len(rec.Summary.Failed) > 0 {
		m.Error = "failed: " + strings.Join(rec.Summary.Failed, ", ")
	}
	m.Text = m.Describe()
	m.Error, m.Text = r.mask.String(m.Error), r.mask.String(m.Text)
	return m
}

// send records m for t as sending, durable, then hands it to the queue. A
// notification the log already has (the same event, attempt and target)
// is not sent twice.
func (n *notifier) send(base *notify.Message, t pipeline.Notify, status string) {
	m := *base
	attempt := attemptOf(&m)
	h := sha256.Sum256([]byte(strings.Join([]string{n.r.t.id, n.logName,
		fmt.Sprint(n.invocation), m.Step, fmt.Sprint(attempt), m.Event, t.Target}, "\x00")))
	if m.Step != "" || m.Event == pipeline.EventSLAMissed {
		// A step's event is once per attempt, sla_missed once per log,
		// whatever the invocation.
		h = sha256.Sum256([]byte(strings.Join([]string{n.r.t.id, n.logName,
			m.Step, fmt.Sprint(attempt), m.Event, t.Target}, "\x00")))
	}
	m.ID = hex.EncodeToString(h[:12])
	n.mu.Lock()
	seen := n.known[m.ID]
	n.known[m.ID] = true
	n.mu.Unlock()
	if seen {
		return
	}
	rec := &eventlog.Record{EventType: eventlog.NotifySending, StepID: m.Step, Status: status, RetryCount: attempt,
		Notify: &eventlog.NotifyInfo{ID: m.ID, Event: m.Event, Target: t.Target, Payload: m.JSON()}}
	if err := n.r.w.AppendDurable(rec); err != nil {
		return // the log is broken: the run stops, and sends nothing it could not record
	}
	n.q.Send(&m, t.Target, n.deliverer(t))
}

// attemptOf is m's attempt number, 0 for a task's event.
func attemptOf(m *notify.Message) int {
	if m.Attempt == nil {
		return 0
	}
	return *m.Attempt
}

// Sent records a delivered notification (notify.Recorder).
func (n *notifier) Sent(m *notify.Message, target string, attempts int) {
	n.r.e.crash("notify:delivered")
	n.r.w.AppendDurable(&eventlog.Record{EventType: eventlog.NotifySent, StepID: m.Step, Status: eventlog.Running,
		RetryCount: attemptOf(m), Notify: &eventlog.NotifyInfo{ID: m.ID, Event: m.Event, Target: target, Attempts: attempts}})
}

// Failed records a notification given up (notify.Recorder).
func (n *notifier) Failed(m *notify.Message, target string, attempts int, err error) {
	n.r.w.AppendDurable(&eventlog.Record{EventType: eventlog.NotifyFailed, StepID: m.Step, Status: eventlog.Running,
		RetryCount: attemptOf(m), ErrorMessage: bounded(n.r.mask.String(err.Error())),
		Notify: &eventlog.NotifyInfo{ID: m.ID, Event: m.Event, Target: target, Attempts: attempts}})
}

// startSLA arms the pipeline's sla: the task should be complete by its
// first start plus the sla. Past it, SLA_MISSED is recorded and sla_missed
// sent, once per task run: a resume past the time raises it at once.
func (r *taskRun) startSLA() {
	n := r.notes
	p := r.t.p
	if n == nil || p.SLA <= 0 || n.slaMissed {
		return
	}
	start := r.started
	if t, err := time.Parse(time.RFC3339Nano, n.startedAt); err == nil {
		start = t
	}
	due := start.Add(p.SLA)
	n.slaMu.Lock()
	defer n.slaMu.Unlock()
	n.sla = r.e.opts.Clock.AfterFunc(max(due.Sub(r.e.opts.Clock.Now()), 0), func() { r.slaMissed(start, due) })
}

// slaMissed records and sends sla_missed, unless the task settled first.
func (r *taskRun) slaMissed(start, due time.Time) {
	n := r.notes
	n.slaMu.Lock()
	defer n.slaMu.Unlock()
	if n.slaOver {
		return
	}
	n.slaOver = true
	msg := fmt.Sprintf("sla missed: the task was not complete %s after its start (%s), at %s",
		r.t.p.SLA, eventlog.FormatTime(start), eventlog.FormatTime(due))
	rec := &eventlog.Record{EventType: eventlog.SLAMissed, Status: eventlog.Running, Message: msg}
	if err := r.w.AppendDurable(rec); err != nil {
		return
	}
	fmt.Fprintf(r.e.opts.Stderr, "apollo: %s\n", msg)
	m := r.message(pipeline.EventSLAMissed, "", rec)
	m.Error = msg
	m.Text = r.mask.String(m.Describe())
	for _, t := range r.t.p.Notify {
		if t.Has(pipeline.EventSLAMissed) {
			n.send(m, t, eventlog.Running)
		}
	}
}

// settleSLA says the task's steps have settled: sla_missed is no longer
// raised.
func (r *taskRun) settleSLA() {
	n := r.notes
	if n == nil {
		return
	}
	n.slaMu.Lock()
	n.slaOver = true
	if n.sla != nil {
		n.sla.Stop()
	}
	n.slaMu.Unlock()
}

// finishNotify waits, up to the bound, for the notifications on their
// way; those still going are recorded as NOTIFY_FAILED.
func (r *taskRun) finishNotify() {
	if r.notes == nil {
		return
	}
	r.settleSLA()
	if left := r.notes.q.Flush(r.e.opts.Notify.Wait); left > 0 {
		fmt.Fprintf(r.e.opts.Stderr, "apollo: %d notification(s) not delivered within %s; recorded as NOTIFY_FAILED\n",
			left, r.e.opts.Notify.Wait)
	}
}

// notifyPlan says, for a dry run, who each entry of ns sends to: "on
// failure, retry: webhook https://hooks.example/…". A webhook's path and
// query are left out (they often hold its token), secrets masked.
func notifyPlan(ns []pipeline.Notify, mask *textfmt.Masker) []string {
	var out []string
	for _, n := range ns {
		var to string
		switch {
		case n.Email != nil:
			e := n.Email
			to = fmt.Sprintf("email to %s via %s", strings.Join(e.To, ", "), e.SMTP)
			if e.User != "" {
				to += " as " + e.User
			}
			if e.PasswordSecret != "" {
				to += " (password: secret " + e.PasswordSecret + ")"
			}
		default:
			to = "webhook " + n.Webhook
			if u, err := url.Parse(n.Webhook); err == nil {
				to = "webhook " + u.Scheme + "://" + u.Host
				if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
					to += "/…"
				}
			}
		}
		out = append(out, mask.String(fmt.Sprintf("on %s: %s", strings.Join(n.On, ", "), to)))
	}
	return out
}

// slaText is an sla: as the plan shows it, "" for none.
func slaText(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}
