package e2e_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"

	"apollo/engine/internal/golden"
	"apollo/eventlog"
)

// This file feeds the real binary hostile input: bad pipelines, bad command
// lines, hostile Lua scripts and damaged logs. Whatever the input, apollo
// must answer with the documented exit code and a message that names the
// place (file:line), never panic, and never write where it must not.

// noPanic fails the test if a run's output shows a Go panic or a runtime
// fatal error: both exit 2, the code of a usage error, so the exit code
// alone proves nothing.
func noPanic(t *testing.T, what string, res runResult) {
	t.Helper()
	for _, out := range []string{res.stdout, res.stderr} {
		if strings.Contains(out, "panic") || strings.Contains(out, "goroutine ") || strings.Contains(out, "fatal error") {
			t.Errorf("%s: the output shows a crash:\n%s", what, out)
			return
		}
	}
}

// treeDigest describes every file, folder and link under dir, so that two
// calls tell whether anything was created, removed or changed.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			files[rel] = "link " + target
			return err
		case d.IsDir():
			files[rel] = "dir"
		case d.Type()&fs.ModeNamedPipe != 0:
			files[rel] = "fifo" // never opened: reading would block
		default:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			files[rel] = hex.EncodeToString(sum[:])
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// sameTree reports what changed between two treeDigests.
func sameTree(before, after map[string]string) []string {
	var diffs []string
	for name, d := range after {
		if b, ok := before[name]; !ok {
			diffs = append(diffs, "created "+name)
		} else if b != d {
			diffs = append(diffs, "changed "+name)
		}
	}
	for name := range before {
		if _, ok := after[name]; !ok {
			diffs = append(diffs, "removed "+name)
		}
	}
	slices.Sort(diffs)
	return diffs
}

// badPipelineCases are the bad pipelines: the loader's own corpus plus the
// ones only the binary sees.
func badPipelineCases(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"../pipeline/testdata/load/bad/*.txtar", "testdata/hostile/pipelines/*.txtar"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 60 {
		t.Fatalf("found %d bad pipelines, want at least 60", len(files))
	}
	return files
}

// TestHostilePipelines runs `apollo validate` and `apollo run` on every bad
// pipeline, in a folder of its own: both must exit 2 and print every line
// of the case's want section (file:line: step: problem), and neither may
// create, change or remove anything in the folder. A case's "vars" section
// becomes --var flags; a comment line "crlf" gives pipeline.yaml CRLF line
// endings. APOLLO_UPDATE_GOLDEN=1 rewrites the want sections of
// testdata/hostile/pipelines (the loader's corpus has its own test).
func TestHostilePipelines(t *testing.T) {
	for _, file := range badPipelineCases(t) {
		name := strings.TrimSuffix(filepath.Base(file), ".txtar")
		if strings.HasPrefix(file, "../") {
			name = "load/" + name
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			var vars []string
			wantIdx := -1
			crlf := slices.Contains(strings.Split(string(ar.Comment), "\n"), "crlf")
			for i, f := range ar.Files {
				switch f.Name {
				case "want":
					wantIdx = i
				case "vars":
					for line := range strings.Lines(string(f.Data)) {
						if line = strings.TrimSpace(line); line != "" {
							vars = append(vars, "--var", line)
						}
					}
				default:
					data := f.Data
					if crlf && f.Name == "pipeline.yaml" {
						data = bytes.ReplaceAll(data, []byte("\n"), []byte("\r\n"))
					}
					path := filepath.Join(dir, f.Name)
					if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(path, data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if wantIdx < 0 {
				t.Fatal("no want section")
			}
			before := treeDigest(t, dir)
			var stderrs []string
			for _, cmd := range []string{"validate", "run"} {
				res := runApollo(t, dir, nil, append([]string{cmd, "pipeline.yaml"}, vars...)...)
				what := "apollo " + cmd
				noPanic(t, what, res)
				if res.code != exitUsage {
					t.Errorf("%s: exit %d, want %d; stderr:\n%s", what, res.code, exitUsage, res.stderr)
				}
				if res.stdout != "" {
					t.Errorf("%s: printed on stdout:\n%s", what, res.stdout)
				}
				for line := range strings.Lines(res.stderr) {
					if !strings.HasPrefix(line, "pipeline.yaml:") {
						t.Errorf("%s: stderr line %q does not start with the file name", what, line)
					}
				}
				if diffs := sameTree(before, treeDigest(t, dir)); len(diffs) > 0 {
					t.Errorf("%s wrote in the folder: %v", what, diffs)
				}
				stderrs = append(stderrs, res.stderr)
			}
			if stderrs[0] != stderrs[1] {
				t.Errorf("validate and run disagree:\n%s\nversus\n%s", stderrs[0], stderrs[1])
			}
			want := string(ar.Files[wantIdx].Data)
			if golden.Update() && strings.HasPrefix(file, "testdata") {
				ar.Files[wantIdx].Data = []byte(stderrs[0])
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if strings.TrimSpace(want) == "" {
				t.Fatalf("empty want section; stderr is:\n%s", stderrs[0])
			}
			for line := range strings.Lines(want) {
				if !strings.Contains(stderrs[0], line) {
					t.Errorf("stderr lacks the line %q; stderr:\n%s", strings.TrimSpace(line), stderrs[0])
				}
			}
		})
	}
}

// cmdlineCase is one line of testdata/hostile/cmdlines.txt.
type cmdlineCase struct {
	line int
	code int
	args []string
	want string // a fragment of stderr
}

// readCmdlines parses testdata/hostile/cmdlines.txt: "EXIT ARGS... =>
// FRAGMENT" per line, arguments split on spaces, '...' quoting.
func readCmdlines(t *testing.T) []cmdlineCase {
	t.Helper()
	data, err := os.ReadFile("testdata/hostile/cmdlines.txt")
	if err != nil {
		t.Fatal(err)
	}
	var cases []cmdlineCase
	for i, line := range strings.Split(string(data), "\n") {
		if line = strings.TrimSpace(line); line == "" || line[0] == '#' {
			continue
		}
		cmd, want, ok := strings.Cut(line, " => ")
		if !ok {
			t.Fatalf("cmdlines.txt:%d: no \" => \"", i+1)
		}
		words, err := splitWords(cmd)
		if err != nil || len(words) == 0 {
			t.Fatalf("cmdlines.txt:%d: %v", i+1, err)
		}
		code, err := strconv.Atoi(words[0])
		if err != nil {
			t.Fatalf("cmdlines.txt:%d: exit code: %v", i+1, err)
		}
		cases = append(cases, cmdlineCase{line: i + 1, code: code, args: words[1:], want: want})
	}
	return cases
}

// splitWords splits s on spaces; '...' quotes spaces and makes "" possible.
func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quoted := false, false
	for _, r := range s {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		return nil, fmt.Errorf("unterminated quote in %q", s)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// TestHostileCommandLines runs each bad command line of
// testdata/hostile/cmdlines.txt in one folder holding the files of
// testdata/hostile/cmdline plus a folder, a binary file, an 11 MiB file and
// a named pipe posing as pipelines. Each must exit with the code the line
// gives, print the fragment on stderr, and leave the folder as it was.
func TestHostileCommandLines(t *testing.T) {
	cases := readCmdlines(t)
	if len(cases) < 15 {
		t.Fatalf("found %d command lines, want at least 15", len(cases))
	}
	dir := t.TempDir()
	fixtures, err := os.ReadDir("testdata/hostile/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fixtures {
		b, err := os.ReadFile(filepath.Join("testdata/hostile/cmdline", f.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFileT(t, filepath.Join(dir, f.Name()), b)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFileT(t, filepath.Join(dir, "bin.yaml"), []byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00task_name: t\n"))
	writeFileT(t, filepath.Join(dir, "huge.yaml"), bytes.Repeat([]byte("# a comment line of a huge pipeline file\n"), 11<<20/40))
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("line%d", c.line), func(t *testing.T) {
			before := treeDigest(t, dir)
			res := runApollo(t, dir, []string{"APOLLO_HOME="}, c.args...)
			what := "apollo " + strings.Join(c.args, " ")
			noPanic(t, what, res)
			if res.code != c.code {
				t.Errorf("%s: exit %d, want %d; stderr:\n%s", what, res.code, c.code, res.stderr)
			}
			if !strings.Contains(res.stderr, c.want) {
				t.Errorf("%s: stderr lacks %q:\n%s", what, c.want, res.stderr)
			}
			if diffs := sameTree(before, treeDigest(t, dir)); len(diffs) > 0 {
				t.Errorf("%s wrote in the folder: %v", what, diffs)
			}
		})
	}
}

func writeFileT(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// luaCase is one hostile script of testdata/hostile/lua.
type luaCase struct {
	id   string
	want string // "SUCCESS", "any", or a fragment of the step's error
	// serial scripts allocate a lot: they run in a task of their own, two
	// at a time, so that at most two heaps near their limit exist at once
	// whatever else the machine runs.
	serial bool
	// timeout is the step's timeout_seconds: 0.3 for scripts that should
	// time out (or may) — the bound acts wherever the script is, so a short
	// one proves as much as a long one — 60 for memory bombs, so the memory
	// bound acts first however loaded the machine, 10 for the rest;
	// "-- timeout: N" overrides it.
	timeout float64
	// isolated scripts ("-- isolation: process") run twice, with the same
	// want: in a pooled worker like the others, and in a task with
	// isolation: process, whose worker of its own must end them alike.
	isolated bool
}

var luaHeader = regexp.MustCompile(`(?m)^-- (want|serial|timeout|isolation)(?:: (.*))?$`)

func readLuaCases(t *testing.T) []luaCase {
	t.Helper()
	files, err := filepath.Glob("testdata/hostile/lua/*.lua")
	if err != nil {
		t.Fatal(err)
	}
	var cases []luaCase
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c := luaCase{id: strings.TrimSuffix(filepath.Base(f), ".lua")}
		for _, m := range luaHeader.FindAllStringSubmatch(string(b), -1) {
			switch m[1] {
			case "want":
				c.want = m[2]
			case "serial":
				c.serial = true
			case "isolation":
				c.isolated = m[2] == "process"
			case "timeout":
				if c.timeout, err = strconv.ParseFloat(m[2], 64); err != nil {
					t.Fatalf("%s: timeout: %v", f, err)
				}
			}
		}
		if c.want == "" {
			t.Fatalf("%s: no \"-- want: ...\" line", f)
		}
		if strings.Contains(c.want, "memory") {
			c.serial = true
		}
		if c.timeout == 0 {
			switch {
			case strings.Contains(c.want, "timed out"), c.want == "any":
				c.timeout = 0.3
			case strings.Contains(c.want, "memory"):
				c.timeout = 60
			default:
				c.timeout = 10
			}
		}
		cases = append(cases, c)
	}
	return cases
}

// luaPipeline runs cases as optional steps, then a step "after" that needs
// them all: it runs only if the runner survived them, and checks that no
// script's changes (to the string metatable, say) leaked into its state.
func luaPipeline(task, outside string, cases []luaCase, parallelism int, isolation string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task_name: %s\nparallelism: %d\nisolation: %q\nvars: {outside: %q}\nsteps:\n", task, parallelism, isolation, outside)
	var ids []string
	for _, c := range cases {
		fmt.Fprintf(&b, "  - id: %s\n    script: lua/%s.lua\n    optional: true\n    timeout_seconds: %g\n    memory_mb: 64\n    allow: [exec, http]\n", c.id, c.id, c.timeout)
		ids = append(ids, c.id)
	}
	fmt.Fprintf(&b, `  - id: after
    depends_on: [%s]
    lua: |
      assert(("x"):upper() == "X", "the string metatable leaked")
      assert(rawget(_G, "os") == nil, "os leaked")
      require("apollo.fs").write("after-%s.txt", "alive")
`, strings.Join(ids, ", "), task)
	return b.String()
}

// TestHostileLua runs every script of testdata/hostile/lua as a step of the
// real binary (memory_mb 64, allowed exec and http: the attacks get every
// capability a pipeline can grant): each must end its step as its
// "-- want:" line says (FAILED with that text, SUCCESS, or either for
// "any"), the runner must survive to run the step after them all, exit 0
// (the hostile steps are optional), and leave a folder outside the
// workspace, which the scripts attack through absolute paths, "..", a
// link, LUA_PATH and a link swapped in mid-step, exactly as it was.
func TestHostileLua(t *testing.T) {
	cases := readLuaCases(t)
	if len(cases) < 40 {
		t.Fatalf("found %d hostile scripts, want at least 40", len(cases))
	}
	if testing.Short() {
		// -short: the isolated scripts and one memory bomb in the runner's
		// process; the full suite sets off every bomb (7 s).
		bomb := false
		cases = slices.DeleteFunc(cases, func(c luaCase) bool {
			if c.isolated || !strings.Contains(c.want, "memory") {
				return false
			}
			keep := !bomb
			bomb = true
			return !keep
		})
	}
	root := t.TempDir()
	outside, dir := filepath.Join(root, "outside"), filepath.Join(root, "ws")
	writeFileT(t, filepath.Join(outside, "secret.txt"), []byte("top secret\n"))
	writeFileT(t, filepath.Join(outside, "evil.lua"), []byte("EVIL = true\nreturn {pwned = true}\n"))
	files, _ := filepath.Glob("testdata/hostile/lua/*.lua")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		writeFileT(t, filepath.Join(dir, "lua", filepath.Base(f)), b)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	outsideBefore := treeDigest(t, outside)

	var serial, parallel, isolated []luaCase
	for _, c := range cases {
		if c.isolated {
			isolated = append(isolated, c)
		}
		switch {
		case c.serial:
			serial = append(serial, c)
		default:
			parallel = append(parallel, c)
		}
	}
	runs := []struct {
		task      string
		cases     []luaCase
		par       int
		isolation string
	}{{"hostile_serial", serial, 2, ""}, {"hostile_parallel", parallel, 4, ""}, {"hostile_isolated", isolated, 2, "process"}}
	env := []string{"LUA_PATH=" + outside + "/?.lua", "APOLLO_HOME="}
	binary(t) // built here: a failed build must stop the test in its own goroutine
	results := make([]runResult, len(runs))
	var wg sync.WaitGroup
	for i, r := range runs {
		writeFileT(t, filepath.Join(dir, r.task+".yaml"), []byte(luaPipeline(r.task, outside, r.cases, r.par, r.isolation)))
		// One process per group: the memory watchdog is per process, so
		// the serial bombs cannot touch the parallel steps.
		wg.Go(func() { results[i] = runApollo(t, dir, env, "run", r.task+".yaml", "--task-id", r.task, "-q") })
	}
	wg.Wait()

	for i, r := range runs {
		res := results[i]
		noPanic(t, r.task, res)
		if res.code != exitOK {
			t.Errorf("%s: exit %d, want 0 (the hostile steps are optional); stderr:\n%s", r.task, res.code, res.stderr)
		}
		if _, err := os.Stat(filepath.Join(dir, "after-"+r.task+".txt")); err != nil {
			t.Errorf("%s: the step after the hostile ones did not run: %v", r.task, err)
		}
		path := taskLog(dir, r.task)
		if path == "" {
			t.Fatalf("%s: no log", r.task)
		}
		recs, tail, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: r.task})
		if err != nil || tail.Torn > 0 {
			t.Fatalf("%s: the log does not read back whole: %v (torn %d bytes)", r.task, err, tail.Torn)
		}
		raw, _ := os.ReadFile(path)
		for n, line := range bytes.Split(raw, []byte("\n")) {
			if len(line) > 64<<10 {
				t.Errorf("%s: log line %d is %d bytes; a step's error must not bloat the log", r.task, n+1, len(line))
			}
		}
		end := map[string]*eventlog.Record{}
		for _, rec := range recs {
			if rec.EventType == eventlog.StepEnd {
				end[rec.StepID] = rec
			}
		}
		for _, c := range r.cases {
			rec := end[c.id]
			switch {
			case rec == nil:
				t.Errorf("%s: no STEP_END", c.id)
			case c.want == "SUCCESS":
				if rec.Status != eventlog.Success {
					t.Errorf("%s: %s (%s), want SUCCESS", c.id, rec.Status, rec.ErrorMessage)
				}
			case strings.Contains(rec.ErrorMessage, "goroutine ") || strings.Contains(rec.ErrorMessage, "fp=0x"):
				t.Errorf("%s: the error is a Go stack trace, not a message: %s", c.id, abbrev(rec.ErrorMessage))
			case c.want == "any":
				if rec.Status == eventlog.Failed && strings.TrimSpace(rec.ErrorMessage) == "" {
					t.Errorf("%s: FAILED without a message", c.id)
				}
			case rec.Status != eventlog.Failed:
				t.Errorf("%s: %s, want FAILED with %q", c.id, rec.Status, c.want)
			case !strings.Contains(rec.ErrorMessage, c.want):
				t.Errorf("%s: error %q, want it to contain %q", c.id, abbrev(rec.ErrorMessage), c.want)
			}
		}
	}
	if diffs := sameTree(outsideBefore, treeDigest(t, outside)); len(diffs) > 0 {
		t.Errorf("the scripts changed the folder outside the workspace: %v", diffs)
	}
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), "pwned") {
			t.Errorf("a script's payload ran: %s exists", path)
		}
		return nil
	})
	t.Logf("hostile-lua scripts=%d serial=%d parallel=%d isolated=%d crashes=0 escapes=0", len(cases), len(serial), len(parallel), len(isolated))
}

func abbrev(s string) string {
	if len(s) > 300 {
		return s[:150] + " … " + s[len(s)-150:]
	}
	return s
}

// TestHostileLogs damages a real task's log in the four ways below: `apollo
// run` of the task (also with --dry-run), `apollo inspect` of the task and
// of the log file must refuse, exit 1 (a log apollo cannot go on from) with
// a message naming the log file and the line, and leave the log byte for
// byte as it was, with no side file and no new log. A log of a newer format
// is refused by run only, and its message names the file.
func TestHostileLogs(t *testing.T) {
	const pipeline = `task_name: damaged
steps:
  - id: a
    command: echo a
  - id: b
    command: "exit 1"
    depends_on: [a]
`
	// Two tasks' logs to damage: x (unfinished, so run would resume it)
	// and y, whose log is planted under x's name.
	tmpl := t.TempDir()
	writeFileT(t, filepath.Join(tmpl, "pipeline.yaml"), []byte(pipeline))
	for _, id := range []string{"x", "y"} {
		if res := runApollo(t, tmpl, nil, "run", "pipeline.yaml", "--task-id", id, "-q"); res.code != exitFailed {
			t.Fatalf("setup run %s: exit %d: %s", id, res.code, res.stderr)
		}
	}
	logX, logY := taskLog(tmpl, "x"), taskLog(tmpl, "y")
	linesX := bytes.SplitAfter(mustRead(t, logX), []byte("\n"))
	linesX = linesX[:len(linesX)-1] // after the last newline
	if len(linesX) < 5 {
		t.Fatalf("the setup log has %d lines, want at least 5", len(linesX))
	}
	join := func(lines [][]byte) []byte { return bytes.Join(lines, nil) }
	replace := func(n int, line []byte) []byte {
		out := slices.Clone(linesX)
		out[n-1] = line
		return join(out)
	}

	// A TASK_START of a newer format version, correctly sealed.
	start, err := eventlog.Decode(bytes.TrimSuffix(linesX[0], []byte("\n")))
	if err != nil {
		t.Fatal(err)
	}
	start.Start.Version = 99
	future, err := eventlog.Encode(start)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasSuffix(future, []byte("\n")) {
		future = append(future, '\n')
	}
	// A middle line whose content no longer matches its checksum.
	badCRC := bytes.Replace(linesX[2], []byte(`"retry_count":0`), []byte(`"retry_count":7`), 1)
	if bytes.Equal(badCRC, linesX[2]) {
		t.Fatalf("line 3 has no retry_count to damage: %s", linesX[2])
	}
	// Two records run together: a lost newline.
	together := slices.Clone(linesX)
	together[1] = append(bytes.TrimSuffix(slices.Clone(together[1]), []byte("\n")), together[2]...)
	together = slices.Delete(together, 2, 3)

	refusers := [][]string{
		{"run", "pipeline.yaml", "--task-id", "x"},
		{"run", "pipeline.yaml", "--task-id", "x", "--dry-run"},
		{"inspect", "x"},
		{"inspect", "LOG", "--json"},
	}
	tests := []struct {
		name string
		log  []byte // written as x's newest log
		line int    // the line the message must name; 0: the file only
		want string // in the message
		cmds [][]string
	}{
		{"foreign task", mustRead(t, logY), 1, `"y"`, refusers},
		// Readers skip what they do not know, so inspect may show a newer
		// log; only a writer must refuse it.
		{"future version", replace(1, future), 1, "format v99, newer than this apollo", refusers[:2]},
		{"bad crc mid-log", replace(3, badCRC), 3, "checksum", refusers},
		{"two records on one line", join(together), 2, "", refusers},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFileT(t, filepath.Join(dir, "pipeline.yaml"), []byte(pipeline))
			// A newer start time than x's own log, so it is the one read.
			name := strings.TrimSuffix(filepath.Base(logX), ".jsonl")
			ts, _ := strconv.ParseInt(name[strings.LastIndex(name, "_")+1:], 10, 64)
			planted := filepath.Join(dir, ".apollo", "logs", fmt.Sprintf("task_x_%d.jsonl", ts+100))
			writeFileT(t, planted, tt.log)
			before := treeDigest(t, filepath.Join(dir, ".apollo"))
			rel, _ := filepath.Rel(dir, planted)
			for _, args := range tt.cmds {
				args = slices.Clone(args)
				if i := slices.Index(args, "LOG"); i >= 0 {
					args[i] = rel
				}
				res := runApollo(t, dir, []string{"APOLLO_HOME="}, args...)
				what := "apollo " + strings.Join(args, " ")
				noPanic(t, what, res)
				if res.code != exitFailed {
					t.Errorf("%s: exit %d, want %d; stdout:\n%s\nstderr:\n%s", what, res.code, exitFailed, res.stdout, res.stderr)
				}
				place := fmt.Sprintf("%s:%d:", filepath.Base(planted), tt.line)
				if tt.line == 0 {
					place = filepath.Base(planted)
				}
				if !strings.Contains(res.stderr, place) {
					t.Errorf("%s: stderr does not name %s:\n%s", what, place, res.stderr)
				}
				if !strings.Contains(res.stderr, tt.want) {
					t.Errorf("%s: stderr lacks %q:\n%s", what, tt.want, res.stderr)
				}
				after := treeDigest(t, filepath.Join(dir, ".apollo"))
				for _, d := range sameTree(before, after) {
					if !strings.HasSuffix(d, ".lock") { // the runner's lock file may be created
						t.Errorf("%s: %s", what, d)
					}
				}
			}
			if got := mustRead(t, planted); !bytes.Equal(got, tt.log) {
				t.Errorf("the damaged log changed")
			}
		})
	}
}

// TestHostileLogUnderSnapshot: a line changed in place (the same file and
// length) inside the prefix a snapshot covers stops run and its dry run,
// naming the line, and nothing is appended: the snapshot does not hide it.
func TestHostileLogUnderSnapshot(t *testing.T) {
	dir := t.TempDir()
	writeFileT(t, filepath.Join(dir, "pipeline.yaml"), []byte("task_name: snap\nsteps:\n  - id: a\n    command: echo a\n"+
		"  - id: b\n    command: \"exit 1\"\n    depends_on: [a]\n"))
	if res := runApollo(t, dir, []string{"APOLLO_HOME="}, "run", "pipeline.yaml", "--task-id", "x", "-q"); res.code != exitFailed {
		t.Fatalf("setup run: exit %d: %s", res.code, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, ".apollo", "state", "x.snapshot.json")); err != nil {
		t.Fatalf("the setup run left no snapshot: %v", err)
	}
	log := taskLog(dir, "x")
	lines := bytes.SplitAfter(mustRead(t, log), []byte("\n"))
	at := int64(len(lines[0]) + len(lines[1]) + bytes.Index(lines[2], []byte(`"retry_count":0`)) + len(`"retry_count":`))
	if at < int64(len(lines[0])+len(lines[1])) {
		t.Fatalf("line 3 has no retry_count to damage: %s", lines[2])
	}
	f, err := os.OpenFile(log, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("7"), at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	damaged := mustRead(t, log)
	for _, args := range [][]string{
		{"run", "pipeline.yaml", "--task-id", "x"},
		{"run", "pipeline.yaml", "--task-id", "x", "--dry-run"},
	} {
		res := runApollo(t, dir, []string{"APOLLO_HOME="}, args...)
		what := "apollo " + strings.Join(args, " ")
		noPanic(t, what, res)
		if res.code != exitFailed || !strings.Contains(res.stderr, filepath.Base(log)+":3:") || !strings.Contains(res.stderr, "checksum") {
			t.Errorf("%s: exit %d, want %d naming line 3's checksum; stderr:\n%s", what, res.code, exitFailed, res.stderr)
		}
		if got := mustRead(t, log); !bytes.Equal(got, damaged) {
			t.Errorf("%s: the damaged log changed", what)
		}
	}
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
