package web

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"apollo/engine/cron"
	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

var epoch = time.Date(2026, 11, 1, 2, 0, 0, 0, time.UTC)

// logWriter writes a task's log as a runner would, record by record.
type logWriter struct {
	t *testing.T
	w *eventlog.Writer
}

// newLog creates the log of taskID in stateDir, started at start, with a
// TASK_START naming steps (each "id" or "id<dep1,dep2").
func newLog(t *testing.T, stateDir, taskID string, start time.Time, steps ...string) *logWriter {
	t.Helper()
	var infos []eventlog.StepInfo
	for _, s := range steps {
		id, deps, _ := strings.Cut(s, "<")
		si := eventlog.StepInfo{ID: id, DependsOn: []string{}}
		if deps != "" {
			si.DependsOn = strings.Split(deps, ",")
		}
		infos = append(infos, si)
	}
	d := statedir.Dir{Root: stateDir}
	os.MkdirAll(d.Logs(), 0o755)
	at := start
	now := func() time.Time { at = at.Add(100 * time.Millisecond); return at }
	first := &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running,
		Start: &eventlog.StartInfo{Version: 1, TaskName: "demo", Pipeline: "demo.yaml", Steps: infos, Invocation: 1,
			Vars: map[string]string{"task_date": "2026-11-01"}}}
	w, err := eventlog.Open(d.Log(taskID, start.Unix()), eventlog.WriterOptions{TaskID: taskID, First: first, Now: now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	lw := &logWriter{t: t, w: w}
	t.Cleanup(func() { w.Close() })
	return lw
}

func (l *logWriter) add(recs ...*eventlog.Record) *logWriter {
	l.t.Helper()
	for _, r := range recs {
		if err := l.w.Append(r); err != nil {
			l.t.Fatal(err)
		}
	}
	return l
}

func start(step string, n int) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.StepStart, StepID: step, Status: eventlog.Running, RetryCount: n}
}

func end(step string, n int, status, errMsg string) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.StepEnd, StepID: step, Status: status, RetryCount: n, ErrorMessage: errMsg, DurationMS: 1500}
}

func summary(status string) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.TaskSummary, Status: status, Summary: &eventlog.SummaryInfo{
		Counts: map[string]int{status: 1}, Fsync: &eventlog.FsyncInfo{Count: 4, TotalUS: 2000, MaxUS: 900}}}
}

// fixture is a state folder with a complete run, a failed run whose step
// printed hostile output, and an unfinished one.
func fixture(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "state")
	newLog(t, dir, "ok", epoch, "a", "b<a").add(start("a", 0), end("a", 0, eventlog.Success, ""),
		start("b", 0), end("b", 0, eventlog.Success, ""), summary(eventlog.Success))
	newLog(t, dir, "bad", epoch.Add(time.Hour), "fetch", "x<fetch").add(start("fetch", 0),
		end("fetch", 0, eventlog.Failed, `exit status 1: <script>alert("e")</script>`), summary(eventlog.Failed))
	out := statedir.Dir{Root: dir}.Output("bad", "fetch", 0)
	os.MkdirAll(filepath.Dir(out), 0o755)
	os.WriteFile(out, []byte("<script>alert('out')</script><img src=x onerror=alert(1)>\n"), 0o644)
	newLog(t, dir, "cut", epoch.Add(2*time.Hour), "a").add(start("a", 0))
	return dir
}

type harness struct {
	srv  *Server
	http *httptest.Server
	dir  string
}

func newHarness(t *testing.T, dir string, auth *Auth) *harness {
	t.Helper()
	s, hs := startTestServer(t, Options{StateDirs: []string{dir}, Auth: auth, Version: "test", Host: "h"})
	return &harness{srv: s, http: hs, dir: dir}
}

// startTestServer starts a server with o on a test HTTP server, stopped
// when the test ends, and waits until its index has read every log.
func startTestServer(t *testing.T, o Options) (*Server, *httptest.Server) {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		cancel()
		s.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, pending := s.ix.progress(); pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the index did not read the logs within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s, hs
}

func (h *harness) get(t *testing.T, path string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", h.http.URL+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

func logName(t *testing.T, dir, task string) string {
	t.Helper()
	p, err := statedir.Dir{Root: dir}.LatestLog(task)
	if err != nil || p == "" {
		t.Fatalf("no log of %s", task)
	}
	return filepath.Base(p)
}

// TestAPIShapes checks that /api/runs is apollo list --json and
// /api/runs/{sd}/{log} apollo inspect --json, on the same data.
func TestAPIShapes(t *testing.T) {
	dir := fixture(t)
	h := newHarness(t, dir, nil)
	code, body := h.get(t, "/api/runs")
	if code != 200 {
		t.Fatalf("GET /api/runs = %d", code)
	}
	var got struct{ Runs []history.RunInfo }
	json.Unmarshal([]byte(body), &got)
	want, err := history.Runs{Dir: statedir.Dir{Root: dir}}.List(history.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var cli bytes.Buffer
	history.WriteListJSON(&cli, want)
	if body != cli.String() {
		t.Errorf("/api/runs:\n%s\napollo list --all --json:\n%s", body, cli.String())
	}
	if !reflect.DeepEqual(got.Runs, want) {
		t.Errorf("/api/runs:\n got %+v\nwant %+v", got.Runs, want)
	}
	h.get(t, "/api/runs") // a second time, from the kept encodings
	if _, again := h.get(t, "/api/runs"); again != cli.String() {
		t.Errorf("/api/runs the second time differs:\n%s", again)
	}
	code, body = h.get(t, "/api/runs/0/"+logName(t, dir, "bad"))
	if code != 200 {
		t.Fatalf("GET /api/runs/0/... = %d", code)
	}
	var rep, wantRep map[string]any
	json.Unmarshal([]byte(body), &rep)
	r, err := history.Runs{Dir: statedir.Dir{Root: dir}}.Inspect("bad")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(r)
	json.Unmarshal(data, &wantRep)
	if !reflect.DeepEqual(rep, wantRep) {
		t.Errorf("/api/runs/0/bad:\n got %v\nwant %v", rep, wantRep)
	}
	code, body = h.get(t, "/api/runs?status=failed")
	if code != 200 || !strings.Contains(body, `"task_id": "bad"`) || strings.Contains(body, `"task_id": "ok"`) {
		t.Errorf("GET /api/runs?status=failed = %d %s, want only bad", code, body)
	}
}

// TestHostileOutputIsText: output, errors and step ids full of HTML are
// shown as text on every page.
func TestHostileOutputIsText(t *testing.T) {
	dir := fixture(t)
	h := newHarness(t, dir, nil)
	name := logName(t, dir, "bad")
	for _, path := range []string{"/", "/runs/0/" + name, "/runs/0/" + name + "/events", "/runs/0/" + name + "/steps/fetch/0"} {
		code, body := h.get(t, path)
		if code != 200 {
			t.Errorf("GET %s = %d", path, code)
			continue
		}
		if strings.Contains(body, "<script>alert") || strings.Contains(body, "<img src=x") {
			t.Errorf("GET %s shows hostile text as HTML", path)
		}
	}
	_, body := h.get(t, "/runs/0/"+name+"/steps/fetch/0")
	if !strings.Contains(body, "&lt;script&gt;alert(&#39;out&#39;)&lt;/script&gt;") {
		t.Errorf("the output page does not show the output as text:\n%s", body)
	}
}

// TestPathTraversal: no URL reads a file outside the state folders and the
// pipelines folder.
func TestPathTraversal(t *testing.T) {
	root := t.TempDir()
	dir := fixture(t)
	secret := filepath.Join(root, "secret.txt")
	os.WriteFile(secret, []byte("TOP-SECRET"), 0o644)
	// A link in the output folder that points out of the state folder.
	out := statedir.Dir{Root: dir}.Output("bad", "x", 0)
	os.Symlink(secret, out)
	pipes := filepath.Join(root, "pipelines")
	os.MkdirAll(pipes, 0o755)
	os.WriteFile(filepath.Join(root, "outside.yaml"), []byte("task_name: TOP-SECRET\nsteps: [{id: a, command: x}]\n"), 0o644)
	os.Symlink(filepath.Join(root, "outside.yaml"), filepath.Join(pipes, "link.yaml"))
	s, err := New(Options{StateDirs: []string{dir}, Pipelines: pipes})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	hs := httptest.NewServer(s.Handler())
	defer func() { hs.Close(); cancel(); s.Wait() }()
	h := &harness{srv: s, http: hs, dir: dir}
	name := logName(t, dir, "bad")
	for _, path := range []string{
		"/runs/0/..%2F..%2Fsecret.txt",
		"/runs/0/%2E%2E%2Fsecret.txt",
		"/runs/1/" + name,
		"/runs/-1/" + name,
		"/runs/0/task_bad_1.jsonl%2F..%2F..%2F..%2Fsecret.txt",
		"/api/runs/0/" + name + "/steps/..%2F..%2F..%2Fsecret.txt/0",
		"/api/runs/0/" + name + "/steps/fetch/..%2F..%2Fsecret",
		"/api/runs/0/" + name + "/steps/x/0",
		"/runs/0/" + name + "/steps/x/0",
		"/pipelines/..%2Fsecret.txt",
		"/pipelines/../secret.txt",
		"/pipelines/link.yaml",
		"/static/..%2Ftemplates%2Flayout.html",
		"/static/../../secret.txt",
	} {
		code, body := h.get(t, path)
		if strings.Contains(body, "TOP-SECRET") || strings.Contains(body, "{{define") {
			t.Errorf("GET %s = %d and shows a file outside the folders", path, code)
		}
		if code == 200 && !strings.HasPrefix(path, "/pipelines/") {
			t.Errorf("GET %s = 200, want a refusal", path)
		}
	}
}

// TestSecurityHeaders: a CSP without inline script, no framing.
func TestSecurityHeaders(t *testing.T) {
	h := newHarness(t, fixture(t), nil)
	res, err := http.Get(h.http.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	csp := res.Header.Get("Content-Security-Policy")
	for _, want := range []string{"script-src 'self'", "frame-ancestors 'none'", "default-src 'none'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q allows unsafe sources", csp)
	}
	if got := res.Header.Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("X-Frame-Options = %q, want DENY", got)
	}
	// No page holds inline script or inline style.
	for _, path := range []string{"/", "/runs/0/" + logName(t, h.dir, "bad"), "/pipelines"} {
		_, body := h.get(t, path)
		if regexp.MustCompile(`<script>|<script [^s]|style="|onclick=|onload=`).MatchString(body) {
			t.Errorf("GET %s holds inline script or style", path)
		}
	}
}

// records reads a log's records.
func records(t *testing.T, dir, task string) []*eventlog.Record {
	t.Helper()
	p, _ := statedir.Dir{Root: dir}.LatestLog(task)
	recs, _, err := eventlog.ReadAll(p, eventlog.ReadOptions{TaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func (h *harness) post(t *testing.T, path string, form url.Values, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", h.http.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(body)
}

// TestInterventionsNeedAuth: without sign-in configured, or without a user,
// or without the CSRF token, nothing is appended; with them, the reset is
// appended as apollo script would, naming the user.
func TestInterventionsNeedAuth(t *testing.T) {
	form := url.Values{"action": {"reset"}, "target": {"fetch"}, "why": {"input fixed"}}
	t.Run("no auth configured", func(t *testing.T) {
		dir := fixture(t)
		h := newHarness(t, dir, nil)
		n := len(records(t, dir, "bad"))
		code, body := h.post(t, "/runs/0/"+logName(t, dir, "bad")+"/act", form)
		if code != http.StatusForbidden || !strings.Contains(body, "--token-file") {
			t.Errorf("POST = %d %s, want 403 naming --token-file", code, body)
		}
		if got := len(records(t, dir, "bad")); got != n {
			t.Errorf("the log has %d records, want %d", got, n)
		}
	})
	t.Run("token", func(t *testing.T) {
		dir := fixture(t)
		token := "0123456789abcdef0123"
		h := newHarness(t, dir, &Auth{Token: []byte(token)})
		path := "/runs/0/" + logName(t, dir, "bad") + "/act"
		if code, _ := h.get(t, "/api/runs"); code != http.StatusUnauthorized {
			t.Errorf("GET /api/runs without the token = %d, want 401", code)
		}
		if code, _ := h.get(t, "/api/runs", "Authorization", "Bearer wrong-token-wrong-token"); code != http.StatusUnauthorized {
			t.Errorf("GET /api/runs with a wrong token = %d, want 401", code)
		}
		if code, _ := h.post(t, path, form); code != http.StatusUnauthorized {
			t.Errorf("POST without the token = %d, want 401", code)
		}
		n := len(records(t, dir, "bad"))
		if code, body := h.post(t, path, form, "Authorization", "Bearer "+token); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
			t.Errorf("POST without the CSRF token = %d %s, want 403", code, body)
		}
		withCSRF := url.Values{"csrf": {h.srv.opts.Auth.csrf("token")}}
		for k, v := range form {
			withCSRF[k] = v
		}
		if code, _ := h.post(t, path, withCSRF, "Authorization", "Bearer "+token, "Origin", "https://evil.example"); code != http.StatusForbidden {
			t.Errorf("POST from another site = %d, want 403", code)
		}
		if got := len(records(t, dir, "bad")); got != n {
			t.Fatalf("refused requests appended %d records", got-n)
		}
		code, body := h.post(t, path, withCSRF, "Authorization", "Bearer "+token)
		if code != 200 {
			t.Fatalf("POST with the token and the CSRF token = %d %s", code, body)
		}
		recs := records(t, dir, "bad")
		last := recs[len(recs)-1]
		if last.EventType != eventlog.Warning || last.Intervention == nil || last.Intervention.Action != "reset" ||
			last.Intervention.Why != "input fixed" || !strings.HasPrefix(last.Intervention.By, "token via apollo serve on h (pid ") {
			t.Errorf("last record = %+v %+v, want the reset by token via apollo serve", last, last.Intervention)
		}
		if !strings.Contains(last.Message, `manual intervention by token via apollo serve on h`) || !strings.Contains(last.Message, `step "fetch" reset: the next apollo run runs it again (why: input fixed)`) {
			t.Errorf("message = %q", last.Message)
		}
	})
	t.Run("basic auth", func(t *testing.T) {
		dir := fixture(t)
		hash, _ := bcrypt.GenerateFromPassword([]byte("s3cret-pass"), bcrypt.MinCost)
		h := newHarness(t, dir, &Auth{Users: map[string][]byte{"ann": hash}})
		req, _ := http.NewRequest("GET", h.http.URL+"/", nil)
		res, _ := http.DefaultClient.Do(req)
		res.Body.Close()
		if res.StatusCode != 401 || !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("GET / without a user = %d %q, want 401 asking for Basic", res.StatusCode, res.Header.Get("WWW-Authenticate"))
		}
		req.SetBasicAuth("ann", "wrong")
		res, _ = http.DefaultClient.Do(req)
		res.Body.Close()
		if res.StatusCode != 401 {
			t.Errorf("GET / with a wrong password = %d, want 401", res.StatusCode)
		}
		req.SetBasicAuth("ann", "s3cret-pass")
		res, _ = http.DefaultClient.Do(req)
		page, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(page), "signed in as ann") {
			t.Errorf("GET / as ann = %d", res.StatusCode)
		}
		f := url.Values{"action": {"skip"}, "target": {"x"}, "why": {"not needed"}, "csrf": {h.srv.opts.Auth.csrf("ann")}}
		preq, _ := http.NewRequest("POST", h.http.URL+"/runs/0/"+logName(t, dir, "bad")+"/act", strings.NewReader(f.Encode()))
		preq.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		preq.SetBasicAuth("ann", "s3cret-pass")
		res, _ = http.DefaultTransport.RoundTrip(preq)
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther {
			t.Errorf("POST skip as ann = %d, want 303 back to the page", res.StatusCode)
		}
		recs := records(t, dir, "bad")
		if iv := recs[len(recs)-1].Intervention; iv == nil || iv.Action != "skip" || !strings.HasPrefix(iv.By, "ann via apollo serve") {
			t.Errorf("last intervention = %+v, want ann's skip", iv)
		}
	})
}

// sse reads server-sent events from path until want returns true for one,
// or 10 seconds pass.
func sse(t *testing.T, base, path string, want func(event, data string) bool, after func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	event, first := "", true
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if want(event, strings.TrimPrefix(line, "data: ")) {
				return
			}
		case line == "" && first:
			first = false
			after()
		}
	}
	t.Fatalf("GET %s: no awaited event within 10s", path)
}

// TestLiveRun: a run page's event stream tells of a step that changed
// state as soon as the log shows it.
func TestLiveRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	lw := newLog(t, dir, "live", epoch, "a", "b<a")
	lw.add(start("a", 0))
	h := newHarness(t, dir, nil)
	sse(t, h.http.URL, "/sse/runs/0/"+logName(t, dir, "live"), func(event, data string) bool {
		return event == "run" && strings.Contains(data, `{"id":"a","state":"SUCCESS"`)
	}, func() { lw.add(end("a", 0, eventlog.Success, "")) })
	sse(t, h.http.URL, "/sse/runs", func(event, data string) bool {
		return event == "runs" && strings.Contains(data, `"done":2`)
	}, func() { lw.add(start("b", 0), end("b", 0, eventlog.Success, "")) })
}

// TestLiveOutput: an attempt page's stream sends what its output gains.
func TestLiveOutput(t *testing.T) {
	dir := fixture(t)
	h := newHarness(t, dir, nil)
	out := statedir.Dir{Root: dir}.Output("bad", "fetch", 0)
	sse(t, h.http.URL, "/sse/runs/0/"+logName(t, dir, "bad")+"/steps/fetch/0?offset=0", func(event, data string) bool {
		return event == "output" && strings.Contains(data, "more output")
	}, func() {
		f, _ := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
		f.WriteString("more output\n")
		f.Close()
	})
}

// TestMetrics scrapes /metrics: runs by status, attempts by result, the
// duration histogram, time since the last success and the runners' fsyncs.
func TestMetrics(t *testing.T) {
	dir := fixture(t)
	h := newHarness(t, dir, nil)
	code, body := h.get(t, "/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, want := range []string{
		`apollo_runs{state_dir="` + dir + `",status="succeeded"} 1`,
		`apollo_runs{state_dir="` + dir + `",status="failed"} 1`,
		`apollo_runs{state_dir="` + dir + `",status="unfinished"} 1`,
		`apollo_step_attempts_total{result="success",state_dir="` + dir + `"} 2`,
		`apollo_step_attempts_total{result="failed",state_dir="` + dir + `"} 1`,
		`apollo_step_duration_seconds_bucket{state_dir="` + dir + `",le="5"} 3`,
		`apollo_step_duration_seconds_count{state_dir="` + dir + `"} 3`,
		`apollo_pipeline_seconds_since_last_success{state_dir="` + dir + `",task_name="demo"}`,
		`apollo_log_fsyncs_total{state_dir="` + dir + `"} 8`,
		`apollo_log_fsync_seconds_total{state_dir="` + dir + `"} 0.004`,
		`apollo_log_fsync_max_seconds{state_dir="` + dir + `"} 0.0009`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestIndexCache: a second server takes finished runs from the cache the
// first saved, and reads again a log that changed since.
func TestIndexCache(t *testing.T) {
	dir := fixture(t)
	h := newHarness(t, dir, nil)
	h.srv.ix.save()
	if _, err := os.Stat(cachePath(statedir.Dir{Root: dir})); err != nil {
		t.Fatalf("no index cache: %v", err)
	}
	p, _ := statedir.Dir{Root: dir}.LatestLog("ok")
	w, err := eventlog.Open(p, eventlog.WriterOptions{TaskID: "ok"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Append(&eventlog.Record{EventType: eventlog.Warning, Status: eventlog.Running, StepID: "a",
		Intervention: &eventlog.Intervention{Action: eventlog.ActionReset, Steps: []string{"a"}, Why: "w", By: "b"}})
	w.Close()
	s, err := New(Options{StateDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	todo := s.ix.scan()
	fromCache := 0
	for _, r := range todo {
		if r.loaded {
			fromCache++
		}
	}
	if fromCache != 2 { // ok and bad; cut is unfinished, so never cached
		t.Errorf("%d runs known from the cache after a restart, want 2", fromCache)
	}
	s.ix.readAll(todo)
	for _, r := range s.ix.list() {
		if ri := s.ix.entry(r); ri.TaskID == "ok" && ri.Status != "unfinished" {
			t.Errorf("run ok after a reset = %s, want unfinished (open again)", ri.Status)
		}
	}
}

// TestResumeAndStop: resume starts apollo run on the run's task with its
// pipeline and variables (through the scheduler, recorded), after a note in
// the log; stop sends SIGTERM to the process holding the task's lock.
func TestResumeAndStop(t *testing.T) {
	dir := fixture(t)
	pipes := filepath.Join(t.TempDir(), "pipelines")
	os.MkdirAll(pipes, 0o755)
	os.WriteFile(filepath.Join(pipes, "demo.yaml"), []byte("task_name: demo\nsteps:\n  - id: a\n    command: echo {{task_date}}\n"), 0o644)
	jobs := make(chan cron.Job, 1)
	sched, err := cron.New(cron.Options{StateDir: dir, Launch: func(j cron.Job, _, _ string) (*cron.Process, error) {
		jobs <- j
		return &cron.Process{PID: 4242, Wait: func() int { return 0 }}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	token := "0123456789abcdef0123"
	s, err := New(Options{StateDirs: []string{dir}, Pipelines: pipes, Auth: &Auth{Token: []byte(token)}, Scheduler: sched, Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	hs := httptest.NewServer(s.Handler())
	defer func() { hs.Close(); cancel(); s.Wait() }()
	for ; ; time.Sleep(10 * time.Millisecond) {
		if _, p := s.ix.progress(); p == 0 {
			break
		}
	}
	h := &harness{srv: s, http: hs, dir: dir}
	form := func(action string) url.Values {
		return url.Values{"action": {action}, "why": {"carry on"}, "csrf": {s.opts.Auth.csrf("token")}}
	}
	code, body := h.post(t, "/runs/0/"+logName(t, dir, "cut")+"/act", form("resume"), "Authorization", "Bearer "+token)
	if code != 200 {
		t.Fatalf("resume = %d %s", code, body)
	}
	j := <-jobs
	if j.TaskID != "cut" || j.TaskDate != "2026-11-01" || j.Pipe.Path != filepath.Join(pipes, "demo.yaml") || j.Trigger != cron.TriggerManual {
		t.Errorf("job = %+v, want task cut of demo.yaml on 2026-11-01", j)
	}
	recs := records(t, dir, "cut")
	if last := recs[len(recs)-1]; !strings.HasPrefix(last.Message, "resume requested by token via apollo serve on h") {
		t.Errorf("last record = %q, want the note of the resume", last.Message)
	}

	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1) to hold a task's lock from another process")
	}
	lock := statedir.Dir{Root: dir}.Lock("cut")
	holder := exec.Command("flock", lock, "sleep", "30")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- holder.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, held := eventlog.Holder(lock); held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("flock did not take the lock")
		}
	}
	code, body = h.post(t, "/runs/0/"+logName(t, dir, "cut")+"/act", form("stop"), "Authorization", "Bearer "+token)
	if code != 200 || !strings.Contains(body, fmt.Sprintf("SIGTERM to apollo process %d", holder.Process.Pid)) {
		t.Fatalf("stop = %d %s", code, body)
	}
	select {
	case err := <-done:
		if ee, ok := err.(*exec.ExitError); !ok || ee.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("the holder ended with %v, want SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		holder.Process.Kill()
		t.Fatal("the holder did not end within 10s of the stop")
	}
}

// TestStepDecisions: the run page's step table shows, apart from errors,
// what the run decided about each step: a when: that was false, a result
// taken from the cache, the instances a foreach expanded into.
func TestStepDecisions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	cached := end("c", 0, eventlog.Success, "")
	cached.Message, cached.CachedFrom = "cached from nightly-1 (output files: 1 restored, 0 unchanged)", "nightly-1"
	expanded := end("each", 0, eventlog.Success, "")
	expanded.Message = "expanded into 3 instance(s)"
	newLog(t, dir, "dec", epoch, "gate", "c", "each", "boom").add(
		end("gate", 0, eventlog.Skipped, `when: ctx.vars.env == "prod" is false: skipped`),
		cached, expanded,
		start("boom", 0), end("boom", 0, eventlog.Failed, "exit status 3"), summary(eventlog.Failed))
	h := newHarness(t, dir, nil)
	_, body := h.get(t, "/runs/0/"+logName(t, dir, "dec"))
	for _, want := range []string{
		`<td class="decision">when: ctx.vars.env == &#34;prod&#34; is false: skipped</td>`,
		`<td class="decision">cached from nightly-1 (output files: 1 restored, 0 unchanged)</td>`,
		`<td class="decision">expanded into 3 instance(s)</td>`,
		`<td class="lasterr">exit status 3</td>`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the run page lacks %s", want)
		}
	}
	if strings.Contains(body, `<td class="lasterr">when:`) {
		t.Error("the run page shows a skip's reason as an error")
	}
	_, js := h.get(t, "/api/runs/0/"+logName(t, dir, "dec"))
	for _, want := range []string{`"note": "expanded into 3 instance(s)"`, `"cached_from": "nightly-1"`} {
		if !strings.Contains(js, want) {
			t.Errorf("the run's JSON lacks %s", want)
		}
	}
}

// TestHostCheck: without sign-in only loopback Host names are answered
// (DNS rebinding); with sign-in and AllowedHosts, only those and loopback
// ones. The serve scripts test the same on the real binary.
func TestHostCheck(t *testing.T) {
	open := newHarness(t, fixture(t), nil)
	tok := []byte("0123456789abcdef0123456789abcdef")
	_, closed := startTestServer(t, Options{StateDirs: []string{fixture(t)}, Auth: &Auth{Token: tok},
		AllowedHosts: []string{"apollo.example", "ci.example:8443"}})
	for _, tt := range []struct {
		srv  *httptest.Server
		host string
		want int
	}{
		{open.http, "127.0.0.1:8080", 200},
		{open.http, "localhost", 200},
		{open.http, "LocalHost:1", 200},
		{open.http, "[::1]:80", 200},
		{open.http, "127.9.9.9", 200},
		{open.http, "evil.example", 421},
		{open.http, "evil.example:8080", 421},
		{open.http, "localhost.evil.example", 421},
		{open.http, "127.0.0.1.evil.example", 421},
		{open.http, "192.168.1.2", 421},
		{closed, "apollo.example:9", 200},
		{closed, "ci.example:8443", 200},
		{closed, "localhost:1", 200},
		{closed, "ci.example:8444", 421},
		{closed, "evil.example", 421},
	} {
		req, _ := http.NewRequest("GET", tt.srv.URL+"/api/runs", nil)
		req.Host = tt.host
		req.Header.Set("Authorization", "Bearer "+string(tok))
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != tt.want {
			t.Errorf("Host %q: status %d, want %d: %s", tt.host, res.StatusCode, tt.want, body)
		}
		if tt.want == 421 && strings.Contains(string(body), "runs") {
			t.Errorf("Host %q: refused, but the body tells of runs: %s", tt.host, body)
		}
	}
}
