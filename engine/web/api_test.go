package web

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"apollo/engine/cron"
)

func (h *harness) postJSON(t *testing.T, path, body string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", h.http.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestAPIForOtherSystems: a client with the token, no CSRF token, starts a
// run (201 with its task id) and intervenes with a JSON body; a request with
// only a session cookie still needs the CSRF token; without sign-in
// configured the API's POSTs are refused.
func TestAPIForOtherSystems(t *testing.T) {
	h, jobs, token := apiServer(t)
	s, dir := h.srv, h.dir
	bearer := []string{"Authorization", "Bearer " + token}

	code, body := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-01","vars":{"region":"eu"}}`, bearer...)
	if code != http.StatusCreated || !strings.Contains(body, `"task_id": "demo-2026-12-01"`) {
		t.Fatalf("start = %d %s, want 201 with the task id", code, body)
	}
	if j := <-jobs; j.TaskID != "demo-2026-12-01" || j.TaskDate != "2026-12-01" || j.Vars["region"] != "eu" || !strings.HasPrefix(j.By, "token via apollo serve") {
		t.Errorf("job = %+v", j)
	}
	// A retried request with its Idempotency-Key gets the same run, no second
	// one; the key with another body is refused.
	idem := append([]string{"Idempotency-Key", "k-1"}, bearer...)
	code, first := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-02"}`, idem...)
	if code != http.StatusCreated {
		t.Fatalf("start with a key = %d %s", code, first)
	}
	<-jobs
	if code, again := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-02"}`, idem...); code != http.StatusOK || again != first {
		t.Errorf("replay = %d %s, want 200 with %s", code, again, first)
	}
	if code, body := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-03"}`, idem...); code != http.StatusUnprocessableEntity || !strings.Contains(body, "Idempotency-Key") {
		t.Errorf("same key, another body = %d %s, want 422", code, body)
	}
	select {
	case j := <-jobs:
		t.Errorf("a replay started %+v", j)
	default:
	}
	if code, body := h.postJSON(t, "/api/pipelines/nope.yaml/runs", `{}`, bearer...); code != http.StatusNotFound {
		t.Errorf("unknown pipeline = %d %s, want 404", code, body)
	}
	if code, body := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-01","colour":1}`, bearer...); code != http.StatusBadRequest || !strings.Contains(body, `"field": "colour"`) {
		t.Errorf("unknown field = %d %s, want 400 naming it", code, body)
	}
	if code, body := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"soon"}`, bearer...); code == http.StatusCreated {
		t.Errorf("bad date = %d %s, want refused", code, body)
	}
	if code, body := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_id":"-rf"}`, bearer...); code != http.StatusBadRequest || !strings.Contains(body, `"field": "task_id"`) {
		t.Errorf("bad task id = %d %s, want 400 naming task_id", code, body)
	}
	if code, body := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"vars":{"a=b":"c"}}`, bearer...); code != http.StatusBadRequest || !strings.Contains(body, `"field": "vars.a=b"`) {
		t.Errorf("bad var = %d %s, want 400 naming it", code, body)
	}
	if code, _ := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{}`, "Authorization", "Bearer wrong-token-wrong-token"); code != http.StatusUnauthorized {
		t.Errorf("wrong token = %d, want 401", code)
	}
	if code, _ := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{}`); code != http.StatusUnauthorized {
		t.Errorf("no credentials = %d, want 401", code)
	}
	cookie := []string{"Cookie", sessionCookie + "=" + s.opts.Auth.sign("session:token")}
	if code, body := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{}`, cookie...); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("session cookie without CSRF = %d %s, want 403", code, body)
	}

	logPath := "/api/runs/0/" + logName(t, dir, "bad")
	n := len(records(t, dir, "bad"))
	if code, body := h.postJSON(t, logPath+"/retry", `{"target":"fetch"}`, bearer...); code != http.StatusBadRequest || !strings.Contains(body, `"field": "why"`) {
		t.Errorf("retry without why = %d %s, want 400 naming why", code, body)
	}
	if code, body := h.postJSON(t, logPath+"/retry", `{"target":"fetch","why":"fixed"}`, cookie...); code != http.StatusForbidden {
		t.Errorf("retry by cookie = %d %s, want 403", code, body)
	}
	if got := len(records(t, dir, "bad")); got != n {
		t.Fatalf("refused requests appended %d records", got-n)
	}
	if code, body := h.postJSON(t, logPath+"/retry", `{"target":"fetch","why":"input fixed"}`, bearer...); code != 200 {
		t.Fatalf("retry = %d %s", code, body)
	}
	recs := records(t, dir, "bad")
	if iv := recs[len(recs)-1].Intervention; iv == nil || iv.Action != "reset" || iv.Why != "input fixed" || !strings.HasPrefix(iv.By, "token via apollo serve") {
		t.Errorf("last intervention = %+v, want the reset by token", iv)
	}
	if code, body := h.postJSON(t, logPath+"/skip", `{"target":"x","why":"not needed"}`, bearer...); code != 200 {
		t.Fatalf("skip = %d %s", code, body)
	}
	recs = records(t, dir, "bad")
	if iv := recs[len(recs)-1].Intervention; iv == nil || iv.Action != "skip" {
		t.Errorf("last intervention = %+v, want the skip", iv)
	}
	if code, body := h.postJSON(t, logPath+"/stop", `{"why":"enough"}`, bearer...); code != http.StatusUnprocessableEntity || !strings.Contains(body, "no runner holds") {
		t.Errorf("stop of an idle run = %d %s, want 422", code, body)
	}
	if code, body := h.postJSON(t, logPath+"/explode", `{"why":"x"}`, bearer...); code != http.StatusNotFound {
		t.Errorf("unknown action = %d %s, want 404", code, body)
	}

	h2 := newHarness(t, fixture(t), nil)
	if code, body := h2.postJSON(t, "/api/pipelines/demo.yaml/runs", `{}`, bearer...); code != http.StatusForbidden {
		t.Errorf("no auth configured = %d %s, want 403", code, body)
	}
}

// apiServer is a serve with the token, a pipelines folder with demo.yaml
// and a scheduler whose launches are sent on jobs.
// TestAPIIdempotencyKeyOutlivesServe: a request retried with its
// Idempotency-Key after serve restarted gets the run the first try started
// (the schedule log remembers the key's digest, never the key), and starts
// nothing; the key with another body is still refused.
func TestAPIIdempotencyKeyOutlivesServe(t *testing.T) {
	h, jobs, token := apiServer(t)
	idem := []string{"Authorization", "Bearer " + token, "Idempotency-Key", "deploy-42"}
	code, first := h.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-02"}`, idem...)
	if code != http.StatusCreated {
		t.Fatalf("start with a key = %d %s", code, first)
	}
	<-jobs
	h.http.Close()
	h.srv.opts.Scheduler.Wait() // the run's exit is in the log: the next serve has nothing to resume
	h.srv.opts.Scheduler.Close()

	pipes := h.srv.opts.Pipelines
	again, jobs2, token2 := apiServerOn(t, h.dir, pipes)
	idem[1] = "Bearer " + token2
	code, body := again.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-02"}`, idem...)
	if code != http.StatusOK || !strings.Contains(body, `"task_id": "demo-2026-12-02"`) {
		t.Errorf("replay after a restart = %d %s, want 200 with the first run's task id", code, body)
	}
	if code, body := again.postJSON(t, "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-03"}`, idem...); code != http.StatusUnprocessableEntity {
		t.Errorf("the key with another body after a restart = %d %s, want 422", code, body)
	}
	select {
	case j := <-jobs2:
		t.Errorf("a replay after the restart started %+v", j)
	default:
	}
	logb, _ := os.ReadFile(cron.LogName(h.dir))
	if strings.Contains(string(logb), "deploy-42") {
		t.Error("the schedule log holds the Idempotency-Key in clear")
	}
}

func apiServer(t *testing.T) (*harness, chan cron.Job, string) {
	dir := fixture(t)
	pipes := filepath.Join(t.TempDir(), "pipelines")
	os.MkdirAll(pipes, 0o755)
	os.WriteFile(filepath.Join(pipes, "demo.yaml"), []byte("task_name: demo\nsteps:\n  - id: a\n    command: echo {{task_date}}\n"), 0o644)
	return apiServerOn(t, dir, pipes)
}

// apiServerOn starts a serve with a token on the state folder dir and the
// pipelines folder pipes; its scheduler's launches go to the channel.
func apiServerOn(t *testing.T, dir, pipes string) (*harness, chan cron.Job, string) {
	jobs := make(chan cron.Job, 4)
	sched, err := cron.New(cron.Options{StateDir: dir, Launch: func(j cron.Job, _, _ string) (*cron.Process, error) {
		jobs <- j
		return &cron.Process{PID: 4242, Wait: func() int { return 0 }}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Close() })
	token := "0123456789abcdef0123"
	s, err := New(Options{StateDirs: []string{dir}, Pipelines: pipes, Auth: &Auth{Token: []byte(token)}, Scheduler: sched, Host: "h"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.Start(ctx)
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() { hs.Close(); cancel(); s.Wait() })
	for ; ; time.Sleep(10 * time.Millisecond) {
		if _, p := s.ix.progress(); p == 0 {
			break
		}
	}
	return &harness{srv: s, http: hs, dir: dir}, jobs, token
}
