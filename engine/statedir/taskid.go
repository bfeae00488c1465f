package statedir

import (
	"errors"
	"fmt"
	"strings"
)

// MaxTaskIDLen keeps file names built from a task id well under NAME_MAX.
const MaxTaskIDLen = 200

// ValidTaskID reports whether id may name a task: [A-Za-z0-9_.-]+, not "."
// or "..", not starting with "-" (it would read as an option), at most
// MaxTaskIDLen bytes. A task id names files and folders.
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
	}
	return nil
}

func idChars(id string) bool {
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.-", c) >= 0) {
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
