//go:build unix

package stdlib

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"apollo/luart"
)

// replaceRounds replaces key's record in data.jsonl of env's workspace rounds times, the
// record saying which round wrote it.
func replaceRounds(t *testing.T, env *fakeEnv, key string, rounds int) error {
	for r := 1; r <= rounds; r++ {
		_, err := runLua(t, env, fmt.Sprintf(`require("apollo.idem").replace("data.jsonl", %q, {{round = %d}})`, key, r))
		if err != nil {
			return fmt.Errorf("key %s round %d: %w", key, r, err)
		}
	}
	return nil
}

// checkAllKeys checks that data.jsonl holds the line kept from before and exactly one
// record of each key, from the last round.
func checkAllKeys(t *testing.T, env *fakeEnv, keys []string, rounds int) {
	t.Helper()
	got := map[string][]float64{}
	kept := 0
	for _, m := range readLines(t, filepath.Join(env.workspace, "data.jsonl")) {
		if m["other"] == "kept" {
			kept++
			continue
		}
		k, _ := m["_key"].(string)
		r, _ := m["round"].(float64)
		got[k] = append(got[k], r)
	}
	if kept != 1 {
		t.Errorf("the line of no key is there %d times, want once", kept)
	}
	lost := 0
	for _, k := range keys {
		if rs := got[k]; len(rs) != 1 || rs[0] != float64(rounds) {
			lost++
			t.Errorf("key %s has rounds %v, want [%d]", k, rs, rounds)
		}
	}
	if len(got) != len(keys) {
		t.Errorf("%d keys in the file, want %d", len(got), len(keys))
	}
	if lost > 0 {
		t.Errorf("%d of %d keys lost or duplicated", lost, len(keys))
	}
}

func writeKept(t *testing.T, env *fakeEnv) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(env.workspace, "data.jsonl"), []byte(`{"other":"kept"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReplaceParallel: 64 steps (16 under -short) replacing their own key in one file, 3
// rounds each, lose nothing (without the lock, most keys were lost).
func TestReplaceParallel(t *testing.T) {
	steps, rounds := 64, 3
	if testing.Short() {
		steps = 16
	}
	env := newFakeEnv(t)
	writeKept(t, env)
	var keys []string
	var wg sync.WaitGroup
	errs := make(chan error, steps)
	for i := range steps {
		key := "k" + strconv.Itoa(i)
		keys = append(keys, key)
		wg.Go(func() {
			if err := replaceRounds(t, env, key, rounds); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkAllKeys(t, env, keys, rounds)
}

// replaceHelperEnv names the workspace and the key of a helper process of
// TestReplaceProcesses.
const replaceHelperEnv = "APOLLO_STDLIB_REPLACE_HELPER"

// TestReplaceProcesses: the lock holds between processes (runners, `apollo script`) too.
// The test binary is run again as 8 helper processes, each replacing its own key.
func TestReplaceProcesses(t *testing.T) {
	if v := os.Getenv(replaceHelperEnv); v != "" {
		var dir, key string
		var rounds int
		if _, err := fmt.Sscanf(v, "%s %s %d", &dir, &key, &rounds); err != nil {
			t.Fatal(err)
		}
		env := newFakeEnv(t)
		env.workspace = dir
		if err := replaceRounds(t, env, key, rounds); err != nil {
			t.Fatal(err)
		}
		return
	}
	const procs, rounds = 8, 3
	env := newFakeEnv(t)
	writeKept(t, env)
	var keys []string
	var cmds []*exec.Cmd
	for i := range procs {
		key := "p" + strconv.Itoa(i)
		keys = append(keys, key)
		cmd := exec.Command(os.Args[0], "-test.run=^TestReplaceProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", replaceHelperEnv, env.workspace, key, rounds))
		cmds = append(cmds, cmd)
	}
	outs := make([][]byte, procs)
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		wg.Go(func() {
			var err error
			if outs[i], err = cmd.CombinedOutput(); err != nil {
				t.Errorf("helper %d: %v\n%s", i, err, outs[i])
			}
		})
	}
	wg.Wait()
	checkAllKeys(t, env, keys, rounds)
}

// holdLock takes the lock of the workspace's data.jsonl from outside, as another process
// would, until the test ends.
func holdLock(t *testing.T, env *fakeEnv) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(env.workspace, ".data.jsonl.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
}

// TestReplaceLockWait: a replace, and an idem.write of a file replace has locked, wait for
// the lock; the step's timeout ends the wait with the timeout, and the file is untouched.
func TestReplaceLockWait(t *testing.T) {
	t.Parallel() // waits out timeouts of its own
	env := newFakeEnv(t)
	writeKept(t, env)
	holdLock(t, env)
	for _, src := range []string{
		`require("apollo.idem").replace("data.jsonl", "k", {{a = 1}})`,
		`require("apollo.idem").write("data.jsonl", "overwritten")`,
	} {
		ctx, cancel := context.WithTimeoutCause(t.Context(), 300*time.Millisecond, luart.ErrTimeout)
		start := time.Now()
		_, err := runLuaCtx(t, ctx, env, src)
		cancel()
		if elapsed := time.Since(start); err == nil || elapsed > 3*time.Second {
			t.Errorf("%s with the lock held: %v after %s, want the timeout", src, err, elapsed)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(env.workspace, "data.jsonl")); string(got) != `{"other":"kept"}`+"\n" {
		t.Errorf("data.jsonl = %q, changed without the lock", got)
	}
}

// TestReplaceLockLink: a link planted at the lock file's path is refused, not followed.
func TestReplaceLockLink(t *testing.T) {
	env := newFakeEnv(t)
	victim := filepath.Join(env.workspace, "victim")
	if err := os.WriteFile(victim, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("victim", filepath.Join(env.workspace, ".data.jsonl.lock")); err != nil {
		t.Fatal(err)
	}
	wantError(t, env, `require("apollo.idem").replace("data.jsonl", "k", {{a = 1}})`, "idem.replace", ".data.jsonl.lock", "symbolic link")
	if _, err := os.Stat(filepath.Join(env.workspace, "data.jsonl")); err == nil {
		t.Errorf("data.jsonl was written without its lock")
	}
}

// TestReplaceLongLine: a line longer than MaxLineBytes (here a file of zeros, which has
// none) is an error, not an unbounded read.
func TestReplaceLongLine(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: reads 64 MiB, seconds; run without -short")
	}
	t.Parallel() // waits out grace periods of its own
	env := newFakeEnv(t)
	f, err := os.Create(filepath.Join(env.workspace, "data.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxLineBytes + 1); err != nil {
		t.Fatal(err)
	}
	f.Close()
	wantError(t, env, `require("apollo.idem").replace("data.jsonl", "k", {{a = 1}})`, "idem.replace", "line 1 is longer than the 64 MiB")
}
