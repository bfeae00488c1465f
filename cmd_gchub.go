package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"apollo/engine"
	"apollo/engine/history"
	"apollo/engine/remote"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// gcHub is apollo gc --hub (docs/spec.md §8.8): for each task of the hub's
// task index, holding its lease so that no coordinator starts on it
// meanwhile, it copies the task's log from the hub, lets gc's own rules
// decide (finished, older than the cutoff, unless --include-unfinished),
// writes the archive (fsynced, renamed, its folder fsynced), and only then
// purges the records it read from the hub and removes the task's index
// entry. Run again after a crash, it finishes the job: the archive is
// written anew under the same name, and an index entry whose log is gone
// is removed.
func gcHub(ctx context.Context, o *gcOptions, age time.Duration, in invocation) error {
	c, err := remote.Connect(ctx, remote.Config{URLs: o.hub.urls, Name: fmt.Sprintf("apollo gc (pid %d)", os.Getpid()),
		Auth: o.hub.auth(), CallTimeout: envDuration(envHubCallTimeout), GiveUp: envDuration(envHubGiveUp)})
	if err != nil {
		return fmt.Errorf("gc --hub: %w", err)
	}
	defer c.Close()
	tasks, err := c.ListTasks(ctx)
	if err != nil {
		return fmt.Errorf("gc --hub: %w", err)
	}
	sort.Slice(tasks, func(i, j int) bool { return tasks[i].TaskID < tasks[j].TaskID })
	archive := o.archive
	if archive == "" {
		archive = statedir.Dir{Root: o.stateDir}.Archive()
	}
	cutoff := time.Now().Add(-age)
	res := &history.GCResult{DryRun: o.dryRun, OlderThan: age.String(), Cutoff: eventlog.FormatTime(cutoff), Archive: archive,
		Archived: []history.GCArchived{}, Removed: []string{}, Kept: []history.GCKept{}}
	g := &hubGC{c: c, o: o, age: age, archive: archive, res: res}
	g.me.Host, _ = os.Hostname()
	g.me.PID, g.me.StateDir = os.Getpid(), "apollo gc --hub"
	if g.ttl = envDuration(envHubLeaseTTL); g.ttl == 0 {
		g.ttl = engine.DefaultLeaseTTL
	}
	for _, t := range tasks {
		if err := g.task(ctx, t.TaskID); err != nil {
			return fmt.Errorf("gc --hub: task %s: %w", t.TaskID, err)
		}
	}
	if o.json {
		return history.WriteGCJSON(in.stdout, res)
	}
	history.WriteGC(in.stdout, res)
	return nil
}

// hubGC is one apollo gc --hub.
type hubGC struct {
	c       *remote.Client
	o       *gcOptions
	age     time.Duration
	archive string
	me      remote.Holder
	ttl     time.Duration
	res     *history.GCResult
}

// task archives and drops one task of the index, or says why it keeps it.
func (g *hubGC) task(ctx context.Context, id string) error {
	where := "hub " + remote.LogSubject(id)
	running := func(h remote.Holder) {
		g.res.Kept = append(g.res.Kept, history.GCKept{TaskID: id, Log: where, Reason: history.KeepRunning,
			Detail: fmt.Sprintf("coordinator pid %d on host %s holds its lease", h.PID, h.Host), PID: h.PID})
	}
	if g.o.dryRun {
		h, held, err := g.c.TaskHolder(ctx, id)
		if err != nil {
			return err
		}
		if held {
			running(h)
			return nil
		}
	} else {
		g.me.Since = time.Now().UTC()
		lease, err := g.c.AcquireLease(ctx, id, g.me, g.ttl)
		if held, ok := errors.AsType[*remote.HeldError](err); ok {
			running(held.Holder)
			return nil
		}
		if err != nil {
			return err
		}
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*g.c.Config().CallTimeout)
			defer cancel()
			lease.Release(rctx)
		}()
	}
	dir, l, err := hubLogCopy(ctx, g.c, id)
	if err != nil {
		return err
	}
	if l == nil {
		// An index entry whose log is gone: a gc cut off between the two.
		if !g.o.dryRun {
			if err := g.c.UnindexTask(ctx, id); err != nil {
				return err
			}
		}
		g.res.Removed = append(g.res.Removed, "hub task index entry of "+id+" (its log is not in the hub)")
		return nil
	}
	defer os.RemoveAll(dir)
	r, err := history.Runs{Dir: statedir.Dir{Root: dir}}.GC(history.GCOptions{OlderThan: g.age, Archive: g.archive,
		DryRun: g.o.dryRun, IncludeUnfinished: g.o.unfinished})
	if err != nil {
		return err
	}
	for _, k := range r.Kept {
		k.Log = where
		g.res.Kept = append(g.res.Kept, k)
	}
	if len(r.Archived) == 0 {
		return nil
	}
	for _, a := range r.Archived {
		a.Log = where
		g.res.Archived = append(g.res.Archived, a)
	}
	// The archive is durable: only now do the hub's records go, then the
	// index entry.
	if !g.o.dryRun {
		if err := l.PurgeRead(ctx); err != nil {
			return err
		}
		if err := g.c.UnindexTask(ctx, id); err != nil {
			return err
		}
	}
	g.res.Removed = append(g.res.Removed, where+" and the task index entry of "+id)
	return nil
}
