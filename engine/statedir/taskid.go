package statedir

import (
	"errors"
	"fmt"
	"strings"
)

// MaxTaskIDLen keeps file names built from a task id well under NAME_MAX.
const MaxTaskIDLen = 200

// ChildSep joins a sub-pipeline task's id to its parent's:
// <parent task id>~<step id>. A task id a user chooses may not hold it
// (ValidUserTaskID), so the ids of sub-pipeline tasks are a namespace of
// their own: no task a user names can be taken for a child, or the reverse.
const ChildSep = '~'

// ValidTaskID reports whether id may name a task, a user's or a
// sub-pipeline's: [A-Za-z0-9_.-~]+, not "." or "..", not starting with "-"
// (it would read as an option) or "~", at most MaxTaskIDLen bytes. A task
// id names files and folders.
func ValidTaskID(id string) error {
	switch {
	case id == "":
		return errors.New("task id is empty")
	case len(id) > MaxTaskIDLen:
		return fmt.Errorf("task id is %d bytes; the limit is %d", len(id), MaxTaskIDLen)
	case id == "." || id == "..":
		return fmt.Errorf("task id %q is not allowed: it names a folder", id)
	case !idChars(id):
		return fmt.Errorf("task id %q may only hold letters, digits, \"_\", \".\" and \"-\"", shorten(id))
	case id[0] == '-':
		return fmt.Errorf("task id %q must not start with \"-\"", id)
	case id[0] == ChildSep:
		return fmt.Errorf("task id %q must not start with %q", id, string(ChildSep))
	}
	return nil
}

// ValidUserTaskID reports whether id may name a task a user starts (run
// --task-id, a pipeline's default): a valid task id without ChildSep, which
// only the ids of sub-pipeline tasks hold.
func ValidUserTaskID(id string) error {
	if err := ValidTaskID(id); err != nil {
		return err
	}
	if strings.IndexByte(id, ChildSep) >= 0 {
		return fmt.Errorf("task id %q may not hold %q: it names the task of a sub-pipeline step", shorten(id), string(ChildSep))
	}
	return nil
}

func idChars(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.-", c) >= 0 || c == ChildSep) {
			return false
		}
	}
	return true
}

// shorten cuts s to its first line and at most 30 bytes, for messages.
func shorten(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 30 {
		s = s[:30] + "..."
	}
	return s
}
