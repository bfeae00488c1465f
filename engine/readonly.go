package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"apollo/engine/statedir"
)

// ReadOnly reports whether err says a file system or a folder cannot be
// written: a read-only mount (a backup, a snapshot) or a folder the user
// may not write.
func ReadOnly(err error) bool {
	return errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission)
}

// runReadOnly answers apollo run when the state folder cannot be written
// (werr says why): a complete task is complete, as it is anywhere (exit
// 0); any other needs to write its log, so it cannot run here.
func (e *Engine) runReadOnly(t *task, ro RunOptions, werr error) error {
	if !ro.Fresh && ro.ResumeFrom == "" && ro.Only == "" && ro.log == "" {
		r := &taskRun{e: e, t: t, ro: ro}
		logPath, err := t.dir.LatestLog(t.id)
		if err != nil {
			return err
		}
		if logPath == "" {
			if done, err := r.completeInArchive(); done || err != nil {
				return err
			}
		} else if st, _, err := statedir.Replay(logPath, t.id, nil); err == nil && st.Complete() {
			r.state, r.logPath = st, logPath
			r.sayComplete()
			return nil
		}
	}
	return fmt.Errorf("the state folder %s is read-only (%w): task %s is not complete and a run writes its log there; "+
		"run it on a writable copy of the folder (--state-dir)", t.dir.Root, werr, t.id)
}
