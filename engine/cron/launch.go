package cron

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
)

// ExecLauncher starts each job as `exe run PIPELINE --task-id ID --var
// task_date=DATE --state-dir DIR --progress plain [extra...]` in the
// folder workdir (extra: apollo serve --hub's hub and credentials),
// in a process group of its own so that it outlives a stop of apollo
// serve (the next serve takes it up), its stdout and stderr going to the
// output file.
func ExecLauncher(exe, workdir string, extra ...string) Launcher {
	return func(job Job, stateDir, output string) (*Process, error) {
		args := []string{"run", job.Pipe.Path, "--state-dir", stateDir, "--progress", "plain"}
		if job.TaskID != "" {
			args = append(args, "--task-id", job.TaskID)
		}
		if job.TaskDate != "" {
			args = append(args, "--var", "task_date="+job.TaskDate)
		}
		for _, k := range slices.Sorted(maps.Keys(job.Vars)) {
			if k != "task_date" {
				args = append(args, "--var", k+"="+job.Vars[k])
			}
		}
		if job.Fresh {
			args = append(args, "--fresh")
		}
		args = append(args, extra...)
		out, err := os.OpenFile(output, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		cmd := exec.Command(exe, args...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = workdir, out, out
		cmd.SysProcAttr = ownGroup()
		err = cmd.Start()
		out.Close()
		if err != nil {
			return nil, err
		}
		return &Process{PID: cmd.Process.Pid, Wait: func() int {
			err := cmd.Wait()
			if ee, ok := errors.AsType[*exec.ExitError](err); ok {
				return ee.ExitCode()
			}
			if err != nil {
				return -1
			}
			return 0
		}}, nil
	}
}
