package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"apollo/eventlog"
	"apollo/stdlib"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		// The scripts' apollo is the real one, plus a last stderr line
		// "[exit N]" when N is not 0, so scripts can check exact exit codes.
		"apollo": func() {
			code := runCLI(os.Args[1:], os.Stdout, os.Stderr)
			if code != 0 {
				fmt.Fprintf(os.Stderr, "[exit %d]\n", code)
			}
			os.Exit(code)
		},
	})
}

// TestScripts runs the end-to-end scripts in testdata/script: the real
// binary on real pipelines in temporary folders.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("APOLLO_KILL_GRACE", "500ms")
			env.Setenv("NO_COLOR", "1")
			return nil
		},
		Condition: func(cond string) (bool, error) {
			if cond == "container" {
				return containerCondition(), nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitfile": cmdWaitFile,
			"records":  cmdRecords,
			"pidgone":  cmdPidGone,
			"tear":     cmdTear,
			"procs":    cmdProcs,
			"ports":    cmdPorts,
			"waithub":  cmdWaitHub,
			"nkey":     cmdNKey,
			"tlscerts": cmdTLSCerts,
			"hubcheck": cmdHubCheck,
			"waitlog":  cmdWaitLog,
			"forge":    cmdForge,
			"snoop":    cmdSnoop,
			"hubpurge": cmdHubPurge,
			// notify_test.go
			"hooksink": cmdHookSink,
			"hooks":    cmdHooks,
			"smtpsink": cmdSMTPSink,
			// container_test.go
			"needcontainer": cmdNeedContainer,
			"containers":    cmdContainers,
		},
	})
}

// cmdWaitFile waits (up to 30s) until a file exists: waitfile PATH.
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: waitfile PATH")
	}
	path := ts.MkAbs(args[0])
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("waitfile: %s did not appear within 30s", args[0])
}

// latestLog returns the newest log of a task in .apollo/logs.
func latestLog(ts *testscript.TestScript, taskID string) string {
	matches, _ := filepath.Glob(ts.MkAbs(filepath.Join(".apollo", "logs", "task_"+taskID+"_*.jsonl")))
	if len(matches) == 0 {
		ts.Fatalf("no log for task %s", taskID)
	}
	best, bestN := "", int64(-1)
	for _, m := range matches {
		base := strings.TrimSuffix(filepath.Base(m), ".jsonl")
		n, err := strconv.ParseInt(base[strings.LastIndex(base, "_")+1:], 10, 64)
		if err == nil && n > bestN {
			best, bestN = m, n
		}
	}
	return best
}

// cmdRecords reads a task's newest log strictly (it fails on any damage,
// and on a torn tail unless -torn is given) and prints one line per record:
// "EVENT step STATUS retry=N [dirty] [interrupted] [timed_out] message".
// The script then checks them with stdout.
func cmdRecords(ts *testscript.TestScript, neg bool, args []string) {
	allowTorn := len(args) > 0 && args[0] == "-torn"
	if allowTorn {
		args = args[1:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: records [-torn] TASK_ID")
	}
	path := latestLog(ts, args[0])
	recs, tail, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: args[0]})
	if err != nil {
		ts.Fatalf("read %s: %v", path, err)
	}
	if tail.Torn > 0 && !allowTorn {
		ts.Fatalf("%s ends in a %d-byte torn tail", path, tail.Torn)
	}
	var b bytes.Buffer
	for _, r := range recs {
		fmt.Fprintf(&b, "%s %s %s retry=%d", r.EventType, r.StepID, r.Status, r.RetryCount)
		if r.Dirty {
			b.WriteString(" dirty")
		}
		if r.Interrupted {
			b.WriteString(" interrupted")
		}
		if r.TimedOut {
			b.WriteString(" timed_out")
		}
		if r.PGID > 0 {
			b.WriteString(" pgid")
		}
		if r.NextDelayMS > 0 {
			fmt.Fprintf(&b, " next_delay_ms=%d", r.NextDelayMS)
		}
		if r.Intervention != nil {
			fmt.Fprintf(&b, " intervention=%s", r.Intervention.Action)
		}
		if r.ErrorMessage != "" {
			fmt.Fprintf(&b, " error=%q", r.ErrorMessage)
		}
		if r.Message != "" {
			fmt.Fprintf(&b, " message=%q", r.Message)
		}
		if r.CachedFrom != "" {
			fmt.Fprintf(&b, " cached_from=%s", r.CachedFrom)
		}
		if r.Image != "" {
			fmt.Fprintf(&b, " image=%s image_id=%s", r.Image, r.ImageID)
		}
		if r.Notify != nil {
			fmt.Fprintf(&b, " notify=%s target=%s", r.Notify.Event, r.Notify.Target)
		}
		b.WriteString("\n")
	}
	ts.Stdout().Write(b.Bytes())
}

// cmdPidGone checks that the process whose pid is in a file has ended
// (waiting up to 10s): pidgone FILE.
func cmdPidGone(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: pidgone FILE")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ts.ReadFile(args[0])))
	if err != nil {
		ts.Fatalf("pidgone: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(pid, 0) != nil {
			if neg {
				ts.Fatalf("process %d has ended", pid)
			}
			return
		}
		if neg {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	ts.Fatalf("process %d is still running", pid)
}

// cmdTear appends bytes without a newline to a task's newest log, as a
// crash mid-write would leave it: tear TASK_ID TEXT.
func cmdTear(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: tear TASK_ID TEXT")
	}
	f, err := os.OpenFile(latestLog(ts, args[0]), os.O_WRONLY|os.O_APPEND, 0)
	ts.Check(err)
	_, err = f.WriteString(args[1])
	ts.Check(err)
	ts.Check(f.Close())
}

// cmdProcs waits (up to 10s) until some process of this script's state
// folder runs as step STEP (APOLLO_STEP_ID in its environment), or with !
// until none does: [!] procs STEP.
func cmdProcs(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: [!] procs STEP")
	}
	ours := []byte("APOLLO_ATTEMPT=" + ts.MkAbs(filepath.Join(".apollo", "logs")) + "/")
	count := func() (n int) {
		for _, pid := range stdlib.FindTagged("APOLLO_STEP_ID=" + args[0]) {
			if env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ"); err == nil && bytes.Contains(env, ours) {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if n := count(); (n == 0) == neg {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	if neg {
		ts.Fatalf("step %s still has %d process(es) after 10s", args[0], count())
	}
	ts.Fatalf("no process of step %s appeared within 10s", args[0])
}
