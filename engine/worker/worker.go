package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/container"
	"apollo/engine/executor"
	"apollo/engine/remote"
	"apollo/engine/trace"
)

// DefaultLiveness is the hub's ack deadline of an attempt: a worker silent
// for this long has lost it (docs/spec.md §8.2).
const DefaultLiveness = 30 * time.Second

// Options configure a worker.
type Options struct {
	// Client is the worker's connection to the hub.
	Client *remote.Client
	// Name, when set, is added to the worker's id (host:pid:name), for
	// several workers in one process (tests).
	Name string
	// Pool is the pool it pulls from (default "default").
	Pool string
	// Slots bounds its concurrent attempts (default: the CPU count).
	Slots int
	// Liveness is the ack deadline of the pool's consumer: silence past it
	// makes the hub redeliver. Heartbeats go every third of it, and the
	// worker fences itself at Liveness less min(5 s, a third of it).
	Liveness time.Duration
	// StateDir holds the worker's files: the record of its running process
	// groups and its attempts' output while they run.
	StateDir string
	// Workdir is the workspace where bodies run.
	Workdir string
	// Bundled holds the bundled Lua step modules.
	Bundled fs.FS
	// Log receives one line per attempt event.
	Log io.Writer
	// Executors replaces the built-in executors by kind ("shell", "lua"),
	// for tests.
	Executors map[string]executor.Executor
	// AfterEnd, when set, is called once an attempt's end is stored and
	// before its message is acknowledged (tests stop a worker there).
	AfterEnd func(w *remote.Work)
	// Started, when set, is called once a body may run (tests learn which
	// worker holds which attempt).
	Started func(w *remote.Work, pgid int)
	// Container, when set, is the engine this worker runs container steps
	// (image:) with (apollo worker --container-engine): it then also pulls
	// its pool's container queue. Without it the worker never receives a
	// container step.
	Container *container.Config
	// Tracer exports a span per attempt, a child of the coordinator's
	// (Work.Traceparent); nil exports none.
	Tracer *trace.Tracer
}

// Worker pulls and runs attempts.
type Worker struct {
	o           Options
	id          string               // host:pid
	cons        []jetstream.Consumer // the pool's, and its container queue's when it runs containers
	shell       executor.Executor
	lua         executor.Executor
	margin      time.Duration
	hb          time.Duration
	running     *runningFile
	folders     *attemptFolders
	attemptN    atomic.Int64 // attempts prepared, naming each one's files
	mu          sync.Mutex
	attempts    map[*attempt]struct{}
	interrupted atomic.Int64
	lostN       atomic.Int64
	ran         atomic.Int64
}

// New prepares a worker: it ends what an earlier worker left running in
// the same state folder, and makes its pool's consumer.
func New(ctx context.Context, o Options) (*Worker, error) {
	if o.Pool == "" {
		o.Pool = remote.DefaultPool
	}
	if !remote.ValidPool(o.Pool) {
		return nil, fmt.Errorf("worker: pool %q may only hold letters, digits, _ and -", o.Pool)
	}
	if o.Slots <= 0 {
		o.Slots = runtime.NumCPU()
	}
	if o.Liveness <= 0 {
		o.Liveness = DefaultLiveness
	}
	if o.Workdir == "" {
		o.Workdir, _ = os.Getwd()
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	host, _ := os.Hostname()
	w := &Worker{o: o, id: host + ":" + strconv.Itoa(os.Getpid()), attempts: map[*attempt]struct{}{}}
	if o.Name != "" {
		w.id += ":" + o.Name
	}
	w.margin = min(5*time.Second, o.Liveness/3)
	w.hb = o.Liveness / 3
	w.shell, w.lua = executor.Shell{}, &executor.Lua{Bundled: o.Bundled, Workdir: o.Workdir}
	if x, ok := o.Executors["shell"]; ok {
		w.shell = x
	}
	if x, ok := o.Executors["lua"]; ok {
		w.lua = x
	}
	var err error
	if w.running, err = openRunning(filepath.Join(o.StateDir, "workers"), w.id); err != nil {
		return nil, err
	}
	w.folders = &attemptFolders{dir: w.running.dir, owner: w.running.name(), keep: o.Slots}
	n, boxes := w.running.endLeftovers(5 * time.Second)
	if n > 0 {
		w.logf("ended %d process(es) that a stopped worker left running", n)
	}
	for _, b := range boxes {
		w.logf("removed container %s that a stopped worker left", b)
	}
	if err := o.Client.EnsureForWorker(ctx, o.Client.ClusterSize()); err != nil {
		w.running.close()
		return nil, err
	}
	cons, err := o.Client.PoolConsumer(ctx, o.Pool, o.Liveness)
	if err != nil {
		w.running.close()
		return nil, err
	}
	w.cons = append(w.cons, cons)
	if o.Container != nil {
		if cons, err = o.Client.ContainerConsumer(ctx, o.Pool, o.Liveness); err != nil {
			w.running.close()
			return nil, err
		}
		w.cons = append(w.cons, cons)
	}
	return w, nil
}

// ID is the worker's host:pid.
func (w *Worker) ID() string { return w.id }

func (w *Worker) logf(format string, args ...any) {
	fmt.Fprintf(w.o.Log, "%s worker %s: %s\n", time.Now().Format("15:04:05"), w.id, fmt.Sprintf(format, args...))
}

// Stats says what the worker did.
type Stats struct {
	Ran, Lost, Interrupted int64
}

// Run pulls and runs attempts until ctx ends. Then it drains: it takes no
// new attempt and waits for the running ones, unless kill is closed, which
// ends them; their ends are reported as interrupted.
func (w *Worker) Run(ctx context.Context, kill <-chan struct{}) (Stats, error) {
	defer w.running.close()
	defer w.folders.close()
	// A coordinator that is interrupted asks its workers to end the task's
	// attempts.
	sub, err := w.o.Client.NC.Subscribe("apollo.cancel.>", func(m *nats.Msg) {
		var req remote.Cancel
		if len(m.Data) > 0 {
			if err := json.Unmarshal(m.Data, &req); err != nil {
				w.logf("ignoring a request to end attempts on %s that does not read (%v)", m.Subject, err)
				return
			}
		}
		w.cancelTask(strings.TrimPrefix(m.Subject, "apollo.cancel."), &req)
	})
	if err == nil {
		defer sub.Unsubscribe()
	}
	slots := make(chan struct{}, w.o.Slots)
	var wg sync.WaitGroup
	what := "attempts of pool " + w.o.Pool
	if w.o.Container != nil {
		what += " and its container steps (engine " + w.o.Container.EngineName() + ")"
	}
	w.logf("pulling %s (%d slots, liveness %s)", what, w.o.Slots, w.o.Liveness)
	wait := pullWait
	if len(w.cons) > 1 {
		wait = sharedPullWait
	}
	var pulls sync.WaitGroup
	for _, cons := range w.cons {
		pulls.Add(1)
		go func() { defer pulls.Done(); w.pull(ctx, cons, wait, slots, &wg) }()
	}
	pulls.Wait()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-kill:
		w.mu.Lock()
		for a := range w.attempts {
			a.cancel(errKilled)
		}
		w.mu.Unlock()
		<-done
	}
	return Stats{Ran: w.ran.Load(), Lost: w.lostN.Load(), Interrupted: w.interrupted.Load()}, nil
}

// pullWait is how long one pull request waits on the hub for attempts,
// and pullBeat how often the hub confirms that it still holds it. A pull
// request is a replicated write when made and another when done (hubs of
// several nodes), so an idle worker renews its pull seldom; a pull the hub
// lost (its node failed) shows by missing beats, and is made again two
// beats later. A request for the free slots waits unfilled only while
// the queue is empty: the attempt that fills it makes the worker pull
// again at once for every slot free by then.
//
// sharedPullWait replaces pullWait for a worker that pulls from two
// consumers (its pool's, and its pool's container queue): they share the
// slots, and a pull holds the free ones while it waits, so each pull ends
// within a second to let the other consumer's pull have them.
const (
	pullWait       = 30 * time.Second
	pullBeat       = time.Second
	sharedPullWait = time.Second
)

// pull fetches attempts from cons while ctx lasts, each pull waiting up
// to wait, each attempt run in a slot of slots, which the worker's
// consumers share.
func (w *Worker) pull(ctx context.Context, cons jetstream.Consumer, wait time.Duration, slots chan struct{}, wg *sync.WaitGroup) {
	for ctx.Err() == nil {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		free := 1 + (cap(slots) - len(slots)) // this slot and the others free
		for i := 1; i < free; i++ {
			select {
			case slots <- struct{}{}:
			default: // another consumer's pull took it
				free = i
			}
		}
		// The pull is withdrawn when the worker drains (ctx ends); it
		// expires on the hub after wait otherwise.
		fctx, cancel := context.WithTimeout(ctx, wait)
		opts := []jetstream.FetchOpt{jetstream.FetchContext(fctx)}
		if wait > sharedPullWait {
			opts = append(opts, jetstream.FetchHeartbeat(pullBeat))
		}
		batch, err := cons.Fetch(free, opts...)
		got := 0
		if err == nil {
			for m := range batch.Messages() {
				got++
				at := time.Now()
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-slots }()
					w.handle(ctx, m, at)
				}()
			}
			err = batch.Error()
		}
		cancel()
		for i := got; i < free; i++ {
			<-slots
		}
		if err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			if !errors.Is(err, jetstream.ErrNoMessages) {
				time.Sleep(200 * time.Millisecond) // the hub fails over; try again
			}
		}
	}
}

var (
	errKilled    = errors.New("interrupted: the worker was asked to stop; process group ended")
	errCancelled = errors.New("interrupted: the coordinator was asked to stop; process group ended")
	errFenced    = errors.New("fenced")
)

// cancelTask ends the running attempts of a task (by its subject token)
// that req names.
func (w *Worker) cancelTask(token string, req *remote.Cancel) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for a := range w.attempts {
		if remote.Token(a.work.Task) == token && req.Names(a.work.Step, a.work.Attempt) {
			a.cancel(errCancelled)
		}
	}
}

// attempt is one attempt the worker runs.
type attempt struct {
	w      *Worker
	msg    jetstream.Msg
	work   *remote.Work
	token  string
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	pgid    int
	lastOK  time.Time // the last confirmed contact with the hub about this message
	fenced  bool
	started bool
	// byTag is set for an attempt whose body may start without a shell
	// (executor.Attempt.Direct): its start is reported before its process
	// exists, so the running file names its tag (the fence learns its
	// group from bodyRuns).
	byTag bool
	// box is the attempt's container, and image and imageID its image as
	// written and resolved, when its step runs in one.
	box            boxRef
	image, imageID string
}

// handle runs one delivered message.
func (w *Worker) handle(ctx context.Context, m jetstream.Msg, deliveredAt time.Time) {
	var work remote.Work
	if err := json.Unmarshal(m.Data(), &work); err != nil || work.StepDef() == nil {
		w.logf("dropping a message that is not an attempt (%v)", err)
		_ = m.TermWithReason("not an apollo attempt")
		return
	}
	meta, err := m.Metadata()
	delivery := uint64(1)
	if err == nil {
		delivery = meta.NumDelivered
	}
	id := remote.AttemptID(work.Task, work.Step, work.Attempt)
	if delivery > 1 {
		// The holder went silent past the deadline: the attempt is lost,
		// and its successor is the coordinator's to dispatch (after its
		// cleanup). Never run it here.
		ev := &remote.Event{Type: remote.EventLost, Run: work.Run, Task: work.Task, Step: work.Step, Attempt: work.Attempt,
			Pool: work.Pool, Secret: work.Secret, Worker: w.id, Delivery: delivery}
		if _, err := w.o.Client.Report(context.Background(), ev); err != nil {
			w.logf("%s: cannot report it lost: %v", id, err)
			return // redelivered again later
		}
		w.lostN.Add(1)
		w.logf("%s: delivered a %s time: its worker went silent; reported LOST", id, ordinal(delivery))
		_ = m.TermWithReason("lost")
		return
	}
	a := &attempt{w: w, msg: m, work: &work, lastOK: deliveredAt,
		token: fmt.Sprintf("apollo-worker:%s#%s#%s#%d", w.id, work.Task, work.Step, work.Attempt)}
	actx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	a.cancel = cancel
	defer cancel(nil)
	w.mu.Lock()
	w.attempts[a] = struct{}{}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.attempts, a)
		w.mu.Unlock()
	}()
	a.run(actx, delivery)
}

func ordinal(n uint64) string {
	switch n {
	case 2:
		return "second"
	case 3:
		return "third"
	}
	return strconv.FormatUint(n, 10) + "th"
}

// fenceAt is when the attempt must be ended unless a heartbeat is
// confirmed before.
func (a *attempt) fenceAt() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastOK.Add(a.w.o.Liveness - a.w.margin)
}

// run runs the attempt and reports it.
func (a *attempt) run(ctx context.Context, delivery uint64) {
	w, work := a.w, a.work
	id := remote.AttemptID(work.Task, work.Step, work.Attempt)
	dir, err := w.folders.take()
	if err != nil {
		w.logf("%s: %v", id, err)
		_ = a.msg.Nak()
		return
	}
	defer w.folders.put(dir)
	ex, exa, err := w.prepare(ctx, a, dir)
	if err != nil {
		w.logf("%s: %v", id, err)
		_ = a.msg.Nak()
		return
	}
	sp := w.startSpan(ctx, work, exa)
	out := newStreamer(w.o.Client, work, exa.OutputPath)
	b := &beats{stop: make(chan struct{})}
	a.byTag = exa.Direct
	exa.Started = func(pgid int) error { return a.begin(ctx, delivery, id, pgid, b) }
	exa.Running = a.bodyRuns
	tctx, tcancel := executor.WithTimeout(ctx, work.StepDef().Timeout)
	began := time.Now()
	res := ex.Run(tctx, exa)
	tcancel()
	w.endSpan(sp, res)
	b.end()
	// The group leaves the running file while the end is reported: the
	// body has ended, and the coordinator waits for the end alone.
	removed := make(chan struct{})
	go func() { defer close(removed); w.running.remove(a.token) }()
	w.ran.Add(1)
	a.finish(ctx, delivery, id, res, out, began)
	<-removed
}

// beats are an attempt's heartbeat and fence, which run from its stored
// start until its body ends.
type beats struct {
	stop chan struct{}
	wg   sync.WaitGroup
}

func (b *beats) start(a *attempt) {
	b.wg.Add(2)
	go func() { defer b.wg.Done(); a.heartbeat(b.stop) }()
	go func() { defer b.wg.Done(); a.fence(b.stop) }()
}

// end stops them (if they started) and waits for them to return.
func (b *beats) end() {
	close(b.stop)
	b.wg.Wait()
}

// begin is the executor's Started callback: the body may run only once
// this returns nil.
func (a *attempt) begin(ctx context.Context, delivery uint64, id string, pgid int, b *beats) error {
	w, work := a.w, a.work
	ev := &remote.Event{Type: remote.EventStarted, Run: work.Run, Task: work.Task, Step: work.Step, Attempt: work.Attempt,
		Pool: work.Pool, Secret: work.Secret, Worker: w.id, Delivery: delivery, PGID: pgid}
	a.mu.Lock()
	ev.Image, ev.ImageID = a.image, a.imageID
	box := a.box
	a.mu.Unlock()
	// The process group goes into the worker's running file while the
	// hub stores the start: both are done before the body runs, and
	// neither waits for the other.
	recorded := make(chan struct{})
	record := pgid > 0 || box.Name != "" || a.byTag
	if record {
		go func() { defer close(recorded); w.running.add(a.token, pgid, a.byTag, box) }()
	} else {
		close(recorded)
	}
	// The start is stored (replicated, fsynced) before the body runs,
	// and only while the message is surely still this worker's.
	rctx, cancel := context.WithDeadline(ctx, a.fenceAt())
	_, err := w.o.Client.Report(rctx, ev)
	cancel()
	<-recorded
	if err == nil && time.Now().After(a.fenceAt()) {
		a.fenced = true
		err = errors.New("the attempt's lease ran out before its start was stored; its body was not run")
	} else if err != nil {
		err = fmt.Errorf("the hub did not store the attempt's start in time, so its body was not run: %w", err)
	}
	if err != nil {
		if record {
			w.running.remove(a.token) // the held process ends without running the body
		}
		return err
	}
	a.mu.Lock()
	a.started, a.pgid = true, pgid
	a.mu.Unlock()
	b.start(a)
	if w.o.Started != nil {
		w.o.Started(work, pgid)
	}
	switch {
	case box.Name != "":
		w.logf("%s: started (pgid %d, container %s)", id, pgid, box.Name)
	case pgid == 0:
		w.logf("%s: started", id)
	default:
		w.logf("%s: started (pgid %d)", id, pgid)
	}
	return nil
}

// bodyRuns is the executor's Running callback: a body started without a
// shell now leads its process group, which the fence ends from here on.
// The running file keeps naming it by its tag alone, which every process
// of its group carries (a restarted worker ends them by it, and the group
// each leads), rather than costing each attempt one more write.
func (a *attempt) bodyRuns(pgid int) {
	a.mu.Lock()
	a.pgid = pgid
	a.mu.Unlock()
}

// finish reports the attempt's end, and acknowledges its message once the
// end is stored; a fenced attempt or one that never started reports
// nothing.
func (a *attempt) finish(ctx context.Context, delivery uint64, id string, res executor.Result, out *streamer, began time.Time) {
	w := a.w
	if a.isFenced() {
		// Its attempt is (or soon is) another worker's to report lost: say
		// nothing more, and leave the message to its redelivery.
		out.stop(false)
		w.logf("%s: fenced: no heartbeat confirmed for %s, so its process group was ended and nothing is reported",
			id, w.o.Liveness-w.margin)
		return
	}
	if res.NotStarted && !a.isStarted() {
		out.stop(false)
		w.logf("%s: not started: %v", id, res.Err)
		_ = a.msg.Nak() // delivered again: reported lost, then the coordinator's to clean and rerun
		return
	}
	ev := a.endEvent(ctx, delivery, res, out, began)
	if _, err := w.o.Client.Report(context.WithoutCancel(ctx), ev); err != nil {
		w.logf("%s: cannot report its end (%v); the hub will redeliver it and it will be reported lost", id, err)
		return
	}
	if w.o.AfterEnd != nil {
		w.o.AfterEnd(a.work)
	}
	a.acknowledge(id, ev.Error)
}

// endEvent stops the output's streaming and makes the attempt's end
// event. An interruption from the worker or the coordinator becomes its
// error, so that the end says which.
func (a *attempt) endEvent(ctx context.Context, delivery uint64, res executor.Result, out *streamer, began time.Time) *remote.Event {
	w, work := a.w, a.work
	sent, tail, outErr := out.stop(true)
	ev := &remote.Event{Type: remote.EventEnd, Run: work.Run, Task: work.Task, Step: work.Step, Attempt: work.Attempt,
		Pool: work.Pool, Secret: work.Secret, Worker: w.id,
		Delivery: delivery, ExitCode: res.ExitCode, OutputDigest: res.OutputDigest, Output: res.Output,
		TimedOut: res.TimedOut, Interrupted: res.Interrupted, NotStarted: res.NotStarted, Note: res.Note,
		DurationMS: time.Since(began).Milliseconds(), OutBytes: sent, Tail: tail}
	if cause := context.Cause(ctx); res.Interrupted && cause != nil && !errors.Is(cause, context.Canceled) {
		res.Err = cause
		w.interrupted.Add(1)
	}
	if res.Err != nil {
		ev.Error = res.Err.Error()
	}
	if outErr != nil {
		ev.Note = strings.TrimPrefix(ev.Note+"; output not all sent to the coordinator: "+outErr.Error(), "; ")
	}
	return ev
}

// acknowledge acknowledges the message, now that the attempt's end is
// stored, and logs the end with its error ("" when it succeeded). A lost acknowledgement is harmless: the
// redelivery is reported lost, and the coordinator ignores the loss of an
// attempt that has ended.
func (a *attempt) acknowledge(id, runErr string) {
	actx, cancel := context.WithTimeout(context.Background(), a.w.o.Client.Config().CallTimeout)
	err := a.msg.DoubleAck(actx)
	cancel()
	status := "ok"
	if runErr != "" {
		status = runErr
	}
	a.w.logf("%s: ended: %s", id, firstLine(status))
	if err != nil {
		a.w.logf("%s: acknowledgement not confirmed (%v): a redelivery will be reported lost and ignored", id, err)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

func (a *attempt) isFenced() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fenced
}

func (a *attempt) isStarted() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.started
}

// heartbeat tells the hub the attempt is alive, a third of the liveness
// apart. InProgress alone is fire-and-forget; a flush after it is a round
// trip through the server, which confirms it arrived.
func (a *attempt) heartbeat(stop <-chan struct{}) {
	t := time.NewTicker(a.w.hb)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		a.beat()
	}
}

// beat tells the hub once that the attempt is alive, and moves its fence
// on once the hub confirms it.
func (a *attempt) beat() {
	sent := time.Now()
	if err := a.msg.InProgress(); err != nil {
		return
	}
	if err := a.w.o.Client.NC.FlushTimeout(min(a.w.hb, 2*time.Second)); err != nil {
		return
	}
	a.mu.Lock()
	a.lastOK = sent
	a.mu.Unlock()
}

// keepalive heartbeats the attempt while f runs, and once after: work
// before the body's start (a leftover container removed, an image pulled)
// must not run out the attempt's lease.
func (a *attempt) keepalive(f func()) {
	stop, done := make(chan struct{}), make(chan struct{})
	go func() { defer close(done); a.heartbeat(stop) }()
	f()
	close(stop)
	<-done
	a.beat()
}

// fence ends the attempt's process group when no heartbeat was confirmed
// for the liveness deadline less the margin: by then the hub has
// redelivered it, or is about to, and another worker reports it lost.
func (a *attempt) fence(stop <-chan struct{}) {
	for {
		wait := time.Until(a.fenceAt())
		if wait <= 0 {
			a.mu.Lock()
			a.fenced = true
			pgid := a.pgid
			a.mu.Unlock()
			if pgid > 0 {
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
			}
			a.cancel(errFenced)
			return
		}
		t := time.NewTimer(wait)
		select {
		case <-stop:
			t.Stop()
			return
		case <-t.C:
		}
	}
}
