package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"apollo/engine/remote"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// hubLogFolder copies the log of a task from the hub (docs/spec.md §8.8)
// into a new temporary state folder, for apollo inspect and logs --hub to
// read as they read any: the hub's log is the task's, wherever its
// coordinator runs. The caller removes the folder.
func hubLogFolder(ctx context.Context, h *hubFlags, taskID string) (string, error) {
	c, err := remote.Connect(ctx, remote.Config{URLs: h.urls, Name: fmt.Sprintf("apollo reader (pid %d)", os.Getpid()),
		Auth: h.auth(), CallTimeout: envDuration(envHubCallTimeout), GiveUp: envDuration(envHubGiveUp)})
	if err != nil {
		return "", err
	}
	defer c.Close()
	dir, l, err := hubLogCopy(ctx, c, taskID)
	if err == nil && l == nil {
		err = fmt.Errorf("the hub at %s holds no log of task %s", h.urls, taskID)
	}
	return dir, err
}

// hubLogCopy is hubLogFolder through client c; it returns the log as read
// (for a purge of what was read), or "" and nil when the hub holds no log
// of the task.
func hubLogCopy(ctx context.Context, c *remote.Client, taskID string) (string, *remote.Log, error) {
	l, err := c.OpenLog(ctx, taskID)
	if err != nil {
		return "", nil, err
	}
	if l.Last() == 0 {
		return "", nil, nil
	}
	var data []byte
	name := ""
	err = l.Read(ctx, func(_ int64, line []byte, n string) error {
		if name == "" {
			name = n
		}
		data = append(data, line...)
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("read the log of task %s from the hub: %w", taskID, err)
	}
	dir, err := os.MkdirTemp("", "apollo-hub-log-")
	if err != nil {
		return "", nil, err
	}
	d := statedir.Dir{Root: dir}
	start := int64(1)
	if rest, ok := strings.CutPrefix(name, "task_"+taskID+"_"); ok {
		if n, err := strconv.ParseInt(strings.TrimSuffix(rest, ".jsonl"), 10, 64); err == nil && n > 0 {
			start = n
		}
	}
	if err := eventlog.MkdirAll(eventlog.OS{}, d.Logs()); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	if err := os.WriteFile(d.Log(taskID, start), data, 0o644); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return filepath.Clean(dir), l, nil
}

// listHub prints the tasks of the hub's task index (apollo list --hub),
// most recently updated first: task id, status, coordinator, pipeline.
func listHub(ctx context.Context, o *listOptions, in invocation) error {
	c, err := remote.Connect(ctx, remote.Config{URLs: o.hub.urls, Name: fmt.Sprintf("apollo list (pid %d)", os.Getpid()),
		Auth: o.hub.auth(), CallTimeout: envDuration(envHubCallTimeout), GiveUp: envDuration(envHubGiveUp)})
	if err != nil {
		return err
	}
	defer c.Close()
	tasks, err := c.ListTasks(ctx)
	if err != nil {
		return err
	}
	sort.Slice(tasks, func(i, j int) bool {
		if !tasks[i].Updated.Equal(tasks[j].Updated) {
			return tasks[i].Updated.After(tasks[j].Updated)
		}
		return tasks[i].TaskID < tasks[j].TaskID
	})
	if o.ids {
		for _, t := range tasks {
			fmt.Fprintln(in.stdout, t.TaskID)
		}
		return nil
	}
	tw := tabwriter.NewWriter(in.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATUS\tUPDATED\tCOORDINATOR\tPIPELINE")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s pid %d\t%s\n", t.TaskID, t.Status, t.Updated.Local().Format("2006-01-02 15:04:05"),
			t.Coordinator.Host, t.Coordinator.PID, t.Pipeline)
	}
	return tw.Flush()
}
