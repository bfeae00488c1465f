package executor

import (
	"os"
	"strconv"
)

// inFolder reports whether process pid's working folder is the one dir
// names now ("" is this process's own).
func inFolder(pid int, dir string) bool {
	cwd, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return false
	}
	if dir == "" {
		dir = "."
	}
	now, err := os.Stat(dir)
	return err == nil && os.SameFile(cwd, now)
}
