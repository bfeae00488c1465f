package engine

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"apollo/engine/remote"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// The task's log in the hub (docs/spec.md §8.8). With --hub, every record
// goes to the hub's log stream first — appended on the condition that the
// subject's last message is the one this coordinator wrote last, and
// acknowledged by the hub's quorum — and only then into the local JSONL,
// with the same bytes: the eventlog writer hands each line to hubPublish
// before its file. A coordinator another has replaced is refused by the
// stream and stops. A coordinator whose state folder lacks the log (another
// host, a replaced disk) rebuilds it from the stream before it opens it.

// hubPublish is the writer's Publish hook of a run with a hub, nil without
// one. Records appended at once reach the hub in one atomic batch.
func (r *taskRun) hubPublish(path string) func(first int64, lines [][]byte) error {
	h := r.hub
	if h == nil || h.log == nil {
		return nil
	}
	h.log.Name = filepath.Base(path)
	return func(first int64, lines [][]byte) error {
		if first == 1 && h.log.Last() != 0 {
			// A new log of the task (--fresh, after apollo gc): it
			// replaces the hub's, which this coordinator, holding the
			// lease, has chosen not to resume.
			if err := h.log.Purge(h.logCtx); err != nil {
				return h.logFailed(err)
			}
		}
		if h.log.Run == "" {
			if rec, err := eventlog.Decode(bytes.TrimSuffix(lines[0], []byte("\n"))); err == nil && rec.Start != nil {
				h.log.Run = rec.Start.RunNonce
			}
		}
		if last := h.log.Last(); first != last+1 {
			return h.logFailed(fmt.Errorf("the task's log in the hub ends at record seq %d, and this coordinator's next record is seq %d", last, first))
		}
		if err := h.log.AppendBatch(h.logCtx, first, lines); err != nil {
			return h.logFailed(err)
		}
		return nil
	}
}

// replicatedLinger is how long a record appended without waiting (a
// remote step's STEP_START) waits in a run whose log in the hub is
// replicated for the append that takes it along: there the records of one
// publication are one atomic batch, one replicated write, so a start that
// rides with its step's STEP_END and the next DISPATCH costs no write of
// its own. A body that runs longer sees its start published after this.
const replicatedLinger = 20 * time.Millisecond

// hubLinger is the writer's PublishLinger: replicatedLinger when the
// task's log in the hub stores a publication as one atomic batch, the
// writer's own otherwise (through one node a batch is appended record by
// record, so waiting gains nothing).
func (r *taskRun) hubLinger() time.Duration {
	if h := r.hub; h != nil && h.log != nil && !h.log.OneByOne() {
		return cmp.Or(r.ro.Hub.linger, replicatedLinger)
	}
	return 0
}

// logFailed stops the run on an append the hub refused or never
// acknowledged, and returns the error for the writer to keep.
func (h *hubRun) logFailed(err error) error {
	err = &HubError{TaskID: h.r.t.id, Err: err}
	h.fail(err)
	return err
}

// hubLine is one record of the task's log in the hub.
type hubLine struct {
	line []byte
	rec  *eventlog.Record
}

// readHubLog reads the task's log from the hub, checking each record's crc
// and that seq runs 1, 2, 3 ... without a gap, and returns its records and
// the file name it had.
func (h *hubRun) readHubLog(ctx context.Context) ([]hubLine, string, error) {
	var lines []hubLine
	name := ""
	id := h.r.t.id
	err := h.log.Read(ctx, func(seq int64, line []byte, n string) error {
		rec, err := eventlog.Decode(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			return fmt.Errorf("the hub's log of task %s is damaged at record %d: %w", id, len(lines)+1, err)
		}
		if want := int64(len(lines) + 1); rec.Seq != want || seq != want || rec.TaskID != id {
			return fmt.Errorf("the hub's log of task %s has record seq %d (task %q) where seq %d was due: records are missing",
				id, rec.Seq, rec.TaskID, want)
		}
		if len(lines) == 0 {
			name = n
		}
		lines = append(lines, hubLine{line: bytes.Clone(line), rec: rec})
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return lines, name, nil
}

// takeLogFromHub makes the state folder's log of the task agree with the
// hub's before it is opened: rebuilt from the hub when the folder has none
// (another host carries the task on), completed from the hub when it lacks
// the hub's last records, and the hub given what it lacks when the log was
// written without it. A log that differs from the hub's is refused. With
// --fresh, or when this folder archived the hub's log with apollo gc, a
// new log is started (and replaces the hub's at its first record).
func (r *taskRun) takeLogFromHub(ctx context.Context) error {
	h := r.hub
	if h == nil || h.log == nil || r.ro.Fresh {
		return nil
	}
	local, target := "", r.ro.log
	if target != "" {
		if _, err := os.Stat(target); err == nil {
			local = target
		}
	} else {
		var err error
		if local, err = r.t.dir.LatestLog(r.t.id); err != nil {
			return err
		}
	}
	var hub []hubLine
	name := ""
	if h.log.Last() > 0 {
		var err error
		if hub, name, err = h.readHubLog(ctx); err != nil {
			return &HubError{TaskID: r.t.id, Err: err}
		}
	}
	if local == "" {
		if len(hub) == 0 {
			return nil
		}
		if target == "" {
			start, ok := logStart(name, r.t.id)
			if !ok {
				start = r.started.Unix()
				if t := hub[0].rec.Time(); !t.IsZero() {
					start = t.Unix()
				}
			}
			if archived, _ := statedir.ArchivedLogs(r.t.dir.Archive(), r.t.id); archivedHere(archived, start) {
				return nil // apollo gc archived it here: a new log follows it
			}
			target = r.t.dir.Log(r.t.id, start)
		}
		err := eventlog.WriteFileAtomic(r.e.fs(), target, 0o644, func(w io.Writer) error {
			for _, l := range hub {
				if _, err := w.Write(l.line); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("task %s: rebuild its log from the hub: %w", r.t.id, err)
		}
		fmt.Fprintf(r.e.opts.Stderr, "apollo: rebuilt the log of task %s from the hub: %d record(s) in %s\n", r.t.id, len(hub), target)
		return nil
	}
	mine, err := os.ReadFile(local)
	if err != nil {
		return fmt.Errorf("task %s: read its log: %w", r.t.id, err)
	}
	complete := mine[:bytes.LastIndexByte(mine, '\n')+1] // a torn tail is Open's to repair
	var lines [][]byte
	for l := range bytes.Lines(complete) {
		lines = append(lines, l)
	}
	for i := 0; i < len(lines) && i < len(hub); i++ {
		if !bytes.Equal(lines[i], hub[i].line) {
			return fmt.Errorf("task %s: its log %s differs from the task's log in the hub at record %d: another coordinator wrote the task there; "+
				"move %s away to carry on from the hub's log, or run with --fresh to start a new log", r.t.id, local, i+1, local)
		}
	}
	switch {
	case len(hub) > len(lines):
		// The hub took records this folder never wrote (a crash between
		// the two): the log gets them, as the hub has them.
		if len(complete) < len(mine) {
			if err := os.Truncate(local, int64(len(complete))); err != nil {
				return fmt.Errorf("task %s: complete its log from the hub: %w", r.t.id, err)
			}
		}
		f, err := os.OpenFile(local, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("task %s: complete its log from the hub: %w", r.t.id, err)
		}
		for _, l := range hub[len(lines):] {
			if _, err = f.Write(l.line); err != nil {
				break
			}
		}
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("task %s: complete its log from the hub: %w", r.t.id, err)
		}
		fmt.Fprintf(r.e.opts.Stderr, "apollo: took %d record(s) of task %s from the hub into %s\n", len(hub)-len(lines), r.t.id, local)
	case len(lines) > len(hub):
		// Written without the hub (a run without --hub): the hub gets the
		// records it lacks, in order, before anything is appended.
		h.log.Name = filepath.Base(local)
		for i, l := range lines[len(hub):] {
			if err := h.log.Append(h.logCtx, int64(len(hub)+i+1), l); err != nil {
				return &HubError{TaskID: r.t.id, Err: err}
			}
		}
	}
	return nil
}

// logStart is the start of a log's file name task_<id>_<start>.jsonl.
func logStart(name, taskID string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, "task_"+taskID+"_")
	if !ok {
		return 0, false
	}
	rest, ok = strings.CutSuffix(rest, ".jsonl")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	return n, err == nil && n > 0
}

// archivedHere reports whether one of the archived logs is the log that
// started at start.
func archivedHere(logs []statedir.LogFile, start int64) bool {
	for _, l := range logs {
		if l.Start == start {
			return true
		}
	}
	return false
}

// indexTask writes the task's entry in the hub's task index, with status:
// only for a run that began (startHub ran), not one that found the task
// complete or refused to start.
func (r *taskRun) indexTask(status string) {
	h := r.hub
	if h == nil || h.c == nil || h.lease == nil || h.run == "" {
		return
	}
	select {
	case <-h.failed:
		return // the hub failed the run: the task may be another coordinator's now
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*h.c.Config().CallTimeout)
	defer cancel()
	now := time.Now().UTC()
	_ = h.c.IndexTask(ctx, remote.TaskEntry{Pipeline: r.t.p.Path, TaskID: r.t.id, Status: status,
		Started: r.started.UTC(), Updated: now, Coordinator: h.lease.Holder()})
}

// runStatus is what a run's error says of the task, for the task index.
func runStatus(err error) string {
	switch {
	case err == nil:
		return eventlog.Success
	case errors.As(err, new(*TaskFailedError)):
		return eventlog.Failed
	case errors.As(err, new(*InterruptedError)):
		return "INTERRUPTED"
	}
	return "STOPPED"
}
