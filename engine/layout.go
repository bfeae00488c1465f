package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// layout names the files under a state directory (SPEC §3).
type layout struct{ root string }

func (l layout) logsDir() string { return filepath.Join(l.root, "logs") }

func (l layout) lockPath(taskID string) string {
	return filepath.Join(l.logsDir(), "task_"+taskID+".lock")
}

func (l layout) logPath(taskID string, startUnix int64) string {
	return filepath.Join(l.logsDir(), fmt.Sprintf("task_%s_%d.jsonl", taskID, startUnix))
}

func (l layout) artifactsDir(taskID string) string {
	return filepath.Join(l.root, "artifacts", taskID)
}

func (l layout) outputDir(taskID string) string { return filepath.Join(l.root, "output", taskID) }

func (l layout) outputPath(taskID, stepID string, retry int) string {
	return filepath.Join(l.outputDir(taskID), fmt.Sprintf("%s.%d.log", stepID, retry))
}

// logFile is one task's log found in the logs folder.
type logFile struct {
	path      string
	startUnix int64
}

// taskLogs lists the logs of a task, oldest first. A missing folder means
// none.
func (l layout) taskLogs(taskID string) ([]logFile, error) {
	entries, err := os.ReadDir(l.logsDir())
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list logs: %w", err)
	}
	prefix := "task_" + taskID + "_"
	var out []logFile
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".jsonl") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".jsonl"), 10, 64)
		if err != nil {
			continue // another task whose id extends this one (task_a_b_…)
		}
		out = append(out, logFile{path: filepath.Join(l.logsDir(), name), startUnix: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].startUnix < out[j].startUnix })
	return out, nil
}

// removeUnfinishedLogs removes what a crash while creating one of the task's
// logs left: a "<log>.new" file that was never renamed into place, which holds
// at most an unsynced TASK_START and never a record of a step.
func (l layout) removeUnfinishedLogs(taskID string) {
	leftovers, _ := filepath.Glob(filepath.Join(l.logsDir(), "task_"+taskID+"_*.jsonl.new"))
	for _, f := range leftovers {
		os.Remove(f)
	}
}

// latestLog returns the newest log of a task, or "" if it has none.
func (l layout) latestLog(taskID string) (string, error) {
	logs, err := l.taskLogs(taskID)
	if err != nil || len(logs) == 0 {
		return "", err
	}
	return logs[len(logs)-1].path, nil
}
