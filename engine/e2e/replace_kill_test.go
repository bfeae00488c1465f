package e2e_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// replacePipeline has n parallel Lua steps, each replacing its own key in
// one JSON Lines file with idem.replace: the record names the step and the
// round. Kills come faster than the crash-loop guard's default allows.
func replacePipeline(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task_name: replace\nparallelism: 16\nmax_dirty_restarts: 1000\nvars: {round: \"0\"}\nsteps:\n")
	for i := range n {
		fmt.Fprintf(&b, `  - id: r%02d
    lua: |
      local idem = require("apollo.idem")
      idem.replace("shared.jsonl", ctx.step_id, {{step = ctx.step_id, round = ctx.vars.round}})
`, i)
	}
	return b.String()
}

// readShared reads shared.jsonl: each line's key and round. Every line
// must be a whole JSON object, and no key may appear twice.
func readShared(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return map[string]string{}, nil
	}
	if err != nil {
		t.Fatal(err)
	}
	rounds := map[string]string{}
	var problems []string
	for i, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		var rec struct {
			Key   string `json:"_key"`
			Step  string `json:"step"`
			Round string `json:"round"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			problems = append(problems, fmt.Sprintf("line %d is not a JSON object: %q", i+1, line))
			continue
		}
		if _, dup := rounds[rec.Key]; dup {
			problems = append(problems, fmt.Sprintf("key %s appears twice", rec.Key))
		}
		if rec.Key != rec.Step {
			problems = append(problems, fmt.Sprintf("line %d: key %s holds step %s's record", i+1, rec.Key, rec.Step))
		}
		rounds[rec.Key] = rec.Round
	}
	return rounds, problems
}

// TestReplaceUnderKill: steps replacing their own keys in one file from
// parallel Lua processes lose nothing, even when the runner is killed with
// SIGKILL at random moments and resumed (docs/spec.md §6.8, idem.replace).
// Each round is a new task over the same file: once it completes, the file
// holds every key exactly once, with that round's record; after every kill,
// every line is whole and no key is there twice. 64 steps × 3 rounds, up to
// 4 kills a round; -short: 8 steps, one round, one kill. APOLLO_SEED replays.
func TestReplaceUnderKill(t *testing.T) {
	steps, rounds, killsPerRound := 64, 3, 4
	if testing.Short() {
		steps, rounds, killsPerRound = 8, 1, 1
	}
	seed := uint64(envInt("APOLLO_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("APOLLO_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	binary(t)
	dir := t.TempDir()
	writePipeline(t, dir, replacePipeline(steps))
	shared := filepath.Join(dir, "shared.jsonl")

	// How long a whole run takes here, to kill inside it.
	began := time.Now()
	if res := runApollo(t, dir, nil, "run", "pipeline.yaml", "--task-id", "calibrate", "-q"); res.code != 0 {
		t.Fatalf("clean run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	full := time.Since(began)
	kills := 0
	for round := 1; round <= rounds; round++ {
		args := []string{"run", "pipeline.yaml", "--task-id", fmt.Sprintf("round%d", round), "--var", fmt.Sprintf("round=%d", round), "-q"}
		for inRound := 0; ; inRound++ {
			delay := time.Hour // the last invocation of a round runs to its end
			if inRound < killsPerRound {
				delay = time.Duration(rng.Int64N(int64(full / 2)))
			}
			res, _ := runKilledAfter(t, dir, args, delay, true) // the runner and its Lua processes
			noPanic(t, args[4], res)
			_, problems := readShared(t, shared)
			if len(problems) > 0 {
				t.Fatalf("round %d, after invocation %d (killed %v): %s", round, inRound+1, res.killed, strings.Join(problems, "; "))
			}
			if res.killed {
				kills++
				continue
			}
			if res.code != 0 {
				ins := runApollo(t, dir, nil, "inspect", args[3])
				t.Fatalf("round %d: exit %d\n%s%s\n%s", round, res.code, res.stdout, res.stderr, ins.stdout)
			}
			break
		}
		got, _ := readShared(t, shared)
		if len(got) != steps {
			t.Errorf("round %d complete: %d keys in the file, want %d", round, len(got), steps)
		}
		for i := range steps {
			key := fmt.Sprintf("r%02d", i)
			if got[key] != fmt.Sprint(round) {
				t.Errorf("round %d complete: key %s holds round %q", round, key, got[key])
			}
		}
	}
	t.Logf("idem.replace under kill: %d steps x %d rounds, %d kills, clean run %s", steps, rounds, kills, full.Round(time.Millisecond))
}
