package web

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"apollo/engine/cron"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// chromium finds Debian's chromium (or $APOLLO_CHROMIUM), or skips the test
// saying how to get it.
func chromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("browser tests are skipped with -short")
	}
	if p := os.Getenv("APOLLO_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium to drive: install it (apt-get install -y chromium) or set APOLLO_CHROMIUM; .ci/run installs it")
	return ""
}

// browser starts a headless chromium with a fresh profile and returns a
// context for its first tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("hide-scrollbars", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// within runs actions with a 20-second limit.
func within(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(c, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string, opts ...chromedp.EvaluateOption) T {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(c, chromedp.Evaluate[T](js, opts...))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// waitFor waits until the JavaScript predicate holds.
func waitFor(t *testing.T, ctx context.Context, what, js string) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := chromedp.Run(c, chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// demo is a state folder and a pipelines folder as a user would have
// them: a complete run, a failed one that retried, and one running, whose
// writer the test holds to move it on.
type demo struct {
	dir, pipes string
	live       *logWriter
	liveName   string
	failedName string
}

var etl = []string{"fetch_orders", "fetch_customers", "fetch_products", "clean_orders<fetch_orders",
	"join<clean_orders,fetch_customers,fetch_products", "aggregate<join", "report<aggregate", "publish<aggregate", "notify<report"}

func newDemo(t *testing.T) *demo {
	t.Helper()
	root := t.TempDir()
	d := &demo{dir: filepath.Join(root, "state"), pipes: filepath.Join(root, "pipelines")}
	// script plays a run: each line "step +seconds event" at a time from
	// the run's start, fetches in parallel as a runner would run them.
	type ev struct {
		step string
		at   float64
		kind string // start, ok, retry, fail
	}
	play := func(task string, at time.Time, evs []ev, last *eventlog.Record) *logWriter {
		lw := newLog(t, d.dir, task, at, etl...)
		started := map[string]float64{}
		tries := map[string]int{}
		for _, e := range evs {
			ts := eventlog.FormatTime(at.Add(time.Duration(e.at * float64(time.Second))))
			var r *eventlog.Record
			switch e.kind {
			case "start":
				started[e.step] = e.at
				r = start(e.step, tries[e.step])
			case "ok", "retry", "fail":
				status, msg := eventlog.Success, ""
				if e.kind != "ok" {
					status, msg = eventlog.Failed, "exit status 1: connection reset by peer"
					if e.kind == "retry" {
						status = eventlog.Running
					}
				}
				r = end(e.step, tries[e.step], status, msg)
				r.DurationMS = int64((e.at - started[e.step]) * 1000)
				if e.kind == "ok" {
					out := statedir.Dir{Root: d.dir}.Output(task, e.step, tries[e.step])
					os.MkdirAll(filepath.Dir(out), 0o755)
					os.WriteFile(out, fmt.Appendf(nil, "%s: 1,204 rows\n", e.step), 0o644)
				}
				tries[e.step]++
			}
			r.Timestamp = ts
			lw.add(r)
		}
		if last != nil {
			last.Timestamp = eventlog.FormatTime(at.Add(time.Duration(evs[len(evs)-1].at*float64(time.Second)) + time.Second))
			lw.add(last)
		}
		return lw
	}
	head := []ev{{"fetch_orders", 0, "start"}, {"fetch_customers", 0.2, "start"}, {"fetch_products", 0.4, "start"},
		{"fetch_customers", 9, "ok"}, {"fetch_orders", 14, "ok"}, {"clean_orders", 14.1, "start"}, {"fetch_products", 21, "ok"},
		{"clean_orders", 26, "ok"}, {"join", 26.1, "start"}}
	full := append(append([]ev{}, head...), ev{"join", 48, "ok"}, ev{"aggregate", 48.1, "start"}, ev{"aggregate", 63, "ok"},
		ev{"report", 63.1, "start"}, ev{"publish", 63.2, "start"}, ev{"publish", 70, "ok"}, ev{"report", 75, "ok"},
		ev{"notify", 75.1, "start"}, ev{"notify", 76, "ok"})
	failed := append(append([]ev{}, head...), ev{"join", 40, "retry"}, ev{"join", 50, "start"}, ev{"join", 61, "fail"})
	base := time.Now().UTC().Add(-26 * time.Hour).Truncate(time.Hour)
	play("etl-2026-10-30", base.Add(-24*time.Hour), full, summary(eventlog.Success))
	play("etl-2026-10-31", base, failed, &eventlog.Record{EventType: eventlog.TaskSummary, Status: eventlog.Failed,
		ErrorMessage: "1 required step(s) failed, 4 blocked",
		Summary:      &eventlog.SummaryInfo{Counts: map[string]int{"SUCCESS": 4, "FAILED": 1, "PENDING": 4}, Failed: []string{"join"}}})
	d.live = play("etl-2026-11-01", time.Now().UTC().Add(-40*time.Second).Truncate(time.Second), head, nil)
	// The running step's output, with text a page must not take for HTML.
	out := statedir.Dir{Root: d.dir}.Output("etl-2026-11-01", "join", 0)
	os.WriteFile(out, []byte("joining 3 inputs\n<script>alert('x')</script><img src=x onerror=alert(1)>\n"), 0o644)
	d.liveName = logName(t, d.dir, "etl-2026-11-01")
	// The test is the live run's runner: it holds the task lock.
	lock, err := eventlog.LockTask(statedir.Dir{Root: d.dir}.Lock("etl-2026-11-01"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Unlock() })
	d.failedName = logName(t, d.dir, "etl-2026-10-31")
	os.MkdirAll(d.pipes, 0o755)
	var steps strings.Builder
	for _, s := range etl {
		id, deps, _ := strings.Cut(s, "<")
		fmt.Fprintf(&steps, "  - id: %s\n    command: echo %s\n", id, id)
		if deps != "" {
			fmt.Fprintf(&steps, "    depends_on: [%s]\n", deps)
		}
	}
	os.WriteFile(filepath.Join(d.pipes, "etl.yaml"), []byte("task_name: etl\nschedule:\n  cron: \"0 2 * * *\"\n  timezone: Europe/Paris\n  catchup: all\n  catchup_limit: 7\nsteps:\n"+steps.String()), 0o644)
	return d
}

// serveDemo serves d, with auth when given, and a scheduler whose runs are
// not started (the browser tests start none).
func serveDemo(t *testing.T, d *demo, auth *Auth) string {
	t.Helper()
	sched, err := cron.New(cron.Options{StateDir: d.dir, Launch: func(cron.Job, string, string) (*cron.Process, error) {
		return nil, fmt.Errorf("no runs in browser tests")
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sched.Close() }) // runs after the server stops: cleanups run last first
	_, hs := startTestServer(t, Options{StateDirs: []string{d.dir}, Pipelines: d.pipes, Auth: auth, Scheduler: sched, Version: "dev", Host: "demo"})
	return hs.URL
}

// TestBrowserLive: the runs page lists the runs; a running run's page
// shows a step change colour without a reload; an attempt's page tails
// its output live and shows hostile output as text.
func TestBrowserLive(t *testing.T) {
	ctx := browser(t)
	d := newDemo(t)
	base := serveDemo(t, d, nil)

	within(t, ctx, "runs page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(`#runs`))
	if got := eval[string](t, ctx, `document.querySelector("#runs tbody").innerText`); !strings.Contains(got, "etl-2026-11-01") ||
		!strings.Contains(got, fmt.Sprintf("running (pid %d)", os.Getpid())) || !strings.Contains(got, "failed") {
		t.Errorf("runs page shows:\n%s", got)
	}

	// A run that starts while the page is open appears at the top.
	eval[bool](t, ctx, `window.notReloaded = true`)
	waitFor(t, ctx, "the live stream opens", `document.getElementById("live").classList.contains("on")`)
	newLog(t, d.dir, "etl-2026-11-02", time.Now().UTC().Truncate(time.Second), etl...).add(start("fetch_orders", 0))
	waitFor(t, ctx, "the new run's row appears without a reload",
		`window.notReloaded === true && document.querySelector("#runs tbody tr").dataset.key.includes("etl-2026-11-02")`)

	within(t, ctx, "run page", chromedp.Navigate(base+"/runs/0/"+d.liveName), chromedp.WaitVisible(`svg.dag`))
	eval[bool](t, ctx, `window.notReloaded = true`)
	join := `document.querySelector('svg.dag g.node[data-step="join"]').classList`
	if !eval[bool](t, ctx, join+`.contains("st-running")`) {
		t.Fatalf("join is drawn %s, want running", eval[string](t, ctx, join+`.value`))
	}
	waitFor(t, ctx, "the live stream opens", `document.getElementById("live").classList.contains("on")`)
	d.live.add(end("join", 0, eventlog.Success, ""), start("aggregate", 0))
	waitFor(t, ctx, "join turns green without a reload", join+`.contains("st-success") && window.notReloaded === true`)
	waitFor(t, ctx, "aggregate turns yellow", `document.querySelector('svg.dag g.node[data-step="aggregate"]').classList.contains("st-running")`)
	waitFor(t, ctx, "the table follows", `document.querySelector('#steps tr[data-step="join"] .state').innerText.trim() === "success"`)

	out := statedir.Dir{Root: d.dir}.Output("etl-2026-11-01", "aggregate", 0)
	os.WriteFile(out, []byte("aggregating\n"), 0o644)
	within(t, ctx, "attempt page", chromedp.Navigate(base+"/runs/0/"+d.liveName+"/steps/aggregate/0"), chromedp.WaitVisible(`#output`))
	waitFor(t, ctx, "the live stream opens", `document.getElementById("live").classList.contains("on")`)
	f, _ := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("<b>42 groups</b> written\n")
	f.Close()
	waitFor(t, ctx, "new output appears", `document.getElementById("output").textContent.includes("<b>42 groups</b> written")`)
	if n := eval[int](t, ctx, `document.querySelectorAll("#output b").length`); n != 0 {
		t.Errorf("output became HTML: %d <b> elements", n)
	}

	within(t, ctx, "hostile output", chromedp.Navigate(base+"/runs/0/"+d.liveName+"/steps/join/0"), chromedp.WaitVisible(`#output`))
	if got := eval[string](t, ctx, `document.getElementById("output").textContent`); !strings.Contains(got, "<script>alert('x')</script><img src=x onerror=alert(1)>") {
		t.Errorf("hostile output shows as %q, want the text itself", got)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("main script, main img").length`); n != 0 {
		t.Errorf("hostile output made %d elements", n)
	}
}

// TestBrowserInterventions: without sign-in the page offers no
// intervention and a post is refused; signed in with the token, a retry
// from the page lands in the log with the user and the reason.
func TestBrowserInterventions(t *testing.T) {
	ctx := browser(t)
	d := newDemo(t)

	t.Run("without auth", func(t *testing.T) {
		base := serveDemo(t, d, nil)
		within(t, ctx, "run page", chromedp.Navigate(base+"/runs/0/"+d.failedName), chromedp.WaitVisible(`#steps`))
		if n := eval[int](t, ctx, `document.querySelectorAll('form[action$="/act"]').length`); n != 0 {
			t.Errorf("%d intervention forms without sign-in, want none", n)
		}
		status := eval[int](t, ctx, `fetch(location.pathname + "/act", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "action=reset&target=join&why=x"}).then(r => r.status)`, chromedp.EvalAwaitPromise)
		if status != 403 {
			t.Errorf("POST without sign-in = %d, want 403", status)
		}
	})

	t.Run("with a token", func(t *testing.T) {
		token := "browser-test-token-0123456789"
		base := serveDemo(t, d, &Auth{Token: []byte(token)})
		within(t, ctx, "sign in", chromedp.Navigate(base+"/runs/0/"+d.failedName), chromedp.WaitVisible(`input[name=token]`),
			chromedp.SendKeys(`input[name=token]`, token), chromedp.Click(`button[type=submit]`), chromedp.WaitVisible(`#runs`))
		within(t, ctx, "run page", chromedp.Navigate(base+"/runs/0/"+d.failedName), chromedp.WaitVisible(`#steps`))
		// A forged post without the page's CSRF token is refused.
		status := eval[int](t, ctx, `fetch(location.pathname + "/act", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"},
			body: "action=reset&target=join&why=forged"}).then(r => r.status)`, chromedp.EvalAwaitPromise)
		if status != 403 {
			t.Errorf("POST without the CSRF token = %d, want 403", status)
		}
		within(t, ctx, "retry join",
			chromedp.SendKeys(`#steps tr[data-step="join"] input[name=why]`, "the API is back"),
			chromedp.Click(`#steps tr[data-step="join"] button[value=reset]`),
			chromedp.WaitVisible(`.flash`))
		flash := eval[string](t, ctx, `document.querySelector(".flash").innerText`)
		if !strings.Contains(flash, `step "join" reset`) {
			t.Errorf("flash = %q", flash)
		}
		recs := records(t, d.dir, "etl-2026-10-31")
		iv := recs[len(recs)-1].Intervention
		if iv == nil || iv.Action != "reset" || iv.Why != "the API is back" || !strings.HasPrefix(iv.By, "token via apollo serve on demo") {
			t.Errorf("last record's intervention = %+v, want the reset from the page", iv)
		}
	})
}

// TestScreenshots writes pictures of the main pages, made from the demo
// data by a real browser: into docs/screenshots when APOLLO_UPDATE_GOLDEN=1
// (the README shows them), else into a temporary folder.
func TestScreenshots(t *testing.T) {
	ctx := browser(t)
	d := newDemo(t)
	base := serveDemo(t, d, nil)
	dir := t.TempDir()
	if os.Getenv("APOLLO_UPDATE_GOLDEN") == "1" {
		dir = filepath.Join("..", "..", "docs", "screenshots")
		os.MkdirAll(dir, 0o755)
	}
	for _, shot := range []struct{ name, path, ready string }{
		{"runs", "/", "#runs"},
		{"run", "/runs/0/" + d.liveName, "svg.gantt"},
		{"failed-run", "/runs/0/" + d.failedName, "svg.gantt"},
		{"output", "/runs/0/" + d.liveName + "/steps/join/0", "#output"},
		{"pipelines", "/pipelines/etl.yaml", "svg.dag"},
	} {
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		if err := chromedp.Do(c, chromedp.Navigate(base+shot.path), chromedp.WaitVisible(shot.ready), chromedp.Sleep(300*time.Millisecond)); err != nil {
			cancel()
			t.Fatalf("%s: %v", shot.name, err)
		}
		png, err := chromedp.Run(c, chromedp.FullScreenshot(100))
		cancel()
		if err != nil {
			t.Fatalf("screenshot %s: %v", shot.name, err)
		}
		if err := os.WriteFile(filepath.Join(dir, shot.name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
