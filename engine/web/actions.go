package web

import (
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"apollo/engine/cron"
	"apollo/engine/intervene"
	"apollo/engine/pipeline"
	"apollo/engine/template"
	"apollo/eventlog"
)

// by names who intervenes, as the log's intervention.by says it.
func (s *Server) by(user string) string {
	return fmt.Sprintf("%s via apollo serve on %s (pid %d)", user, s.opts.Host, os.Getpid())
}

// allowed checks that a state-changing request comes from a signed-in
// user, with the form's CSRF token, from this server's pages.
func (s *Server) allowed(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !s.opts.Auth.Enabled() {
		s.refuse(w, r, http.StatusForbidden, "interventions need a signed-in user: start apollo serve with --token-file or --auth-file")
		return "", false
	}
	user := userOf(r)
	if user == "" {
		s.refuse(w, r, http.StatusUnauthorized, "sign in first")
		return "", false
	}
	if isAPI(r) {
		return user, true // an Authorization header and a JSON body: no form can send that
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := s.opts.Auth.checkCSRF(r, user); err != nil {
		s.refuse(w, r, http.StatusForbidden, err.Error())
		return "", false
	}
	return user, true
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if jsonWanted(r) {
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	w.WriteHeader(code)
	s.render(w, r, "error", page{Title: "refused", Error: msg})
}

// done answers an intervention: JSON, or back to the page with a note.
func (s *Server) done(w http.ResponseWriter, r *http.Request, back string, err error, msg string) {
	if jsonWanted(r) {
		if err != nil {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"done": msg})
		return
	}
	q := "done=" + url.QueryEscape(msg)
	if err != nil {
		q = "error=" + url.QueryEscape(err.Error())
	}
	http.Redirect(w, r, back+"?"+q, http.StatusSeeOther)
}

// actRun is an intervention on a run: reset (retry), skip, clear_marker,
// stop or resume. The why is required, and every change lands in the log as
// apollo script would write it.
func (s *Server) actRun(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	if s.isHub(run.key.SD) {
		s.refuse(w, r, http.StatusForbidden, fmt.Sprintf("task %s is shown from the hub (%s): this serve changes nothing of it; %s",
			run.f.TaskID, s.dirName(run.key.SD), hubReadOnly))
		return
	}
	if why := s.readOnly(run.key.SD); why != "" {
		s.refuse(w, r, http.StatusForbidden, fmt.Sprintf("the state folder %s is read-only (%s): its runs take no intervention",
			s.dirs[run.key.SD].Root, why))
		return
	}
	user, ok := s.allowed(w, r)
	if !ok {
		return
	}
	back := runLink(run.key)
	action, target, why := r.PostFormValue("action"), r.PostFormValue("target"), r.PostFormValue("why")
	if why == "" {
		s.done(w, r, back, fmt.Errorf("say why: the reason is kept in the log"), "")
		return
	}
	if run.f.Archived {
		s.done(w, r, back, fmt.Errorf("the run was archived by apollo gc: it cannot change"), "")
		return
	}
	latest, err := s.dirs[run.key.SD].LatestLog(run.f.TaskID)
	if err != nil || latest != run.f.Path {
		s.done(w, r, back, fmt.Errorf("this is not the newest log of task %s: interventions go to the newest", run.f.TaskID), "")
		return
	}
	by := s.by(user)
	switch action {
	case eventlog.ActionReset, eventlog.ActionSkip, eventlog.ActionClearMarker:
		rec, err := intervene.Append(run.f.Path, run.f.TaskID, intervene.Request{Action: action, Target: target, Why: why, By: by})
		if err != nil {
			s.done(w, r, back, err, "")
			return
		}
		msg := rec.Message
		if action == eventlog.ActionReset && r.PostFormValue("resume") != "" {
			if _, err := s.resume(run, user, why); err != nil {
				msg += "; the run was not resumed: " + err.Error()
			} else {
				msg += "; the run is resuming"
			}
		}
		s.done(w, r, back, nil, msg)
	case "stop":
		pid, held := eventlog.Holder(s.dirs[run.key.SD].Lock(run.f.TaskID))
		if !held || pid <= 0 {
			s.done(w, r, back, fmt.Errorf("no runner holds task %s", run.f.TaskID), "")
			return
		}
		msg := fmt.Sprintf("stop requested by %s: SIGTERM to apollo process %d (why: %s)", by, pid, why)
		if err := intervene.Note(run.f.Path, run.f.TaskID, msg); err != nil {
			s.done(w, r, back, err, "")
			return
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			s.done(w, r, back, fmt.Errorf("signal apollo process %d: %w", pid, err), "")
			return
		}
		s.done(w, r, back, nil, msg)
	case "resume":
		e, err := s.resume(run, user, why)
		if err != nil {
			s.done(w, r, back, err, "")
			return
		}
		s.done(w, r, back, nil, fmt.Sprintf("task %s is resuming (apollo run, pid %d)", e.TaskID, e.PID))
	default:
		s.done(w, r, back, fmt.Errorf("unknown action %q", action), "")
	}
}

// resume starts apollo run on the run's task again, with the pipeline and
// the variables its log names.
func (s *Server) resume(run *run, user, why string) (*cron.Entry, error) {
	if s.opts.Scheduler == nil {
		return nil, fmt.Errorf("runs cannot be started from here: %s", s.opts.NoScheduler)
	}
	d := s.ix.detail(run)
	if d == nil || d.start == nil {
		return nil, fmt.Errorf("the run's log names no pipeline")
	}
	st := d.start
	path := s.findPipeline(st.Pipeline, st.TaskName)
	if path == "" {
		return nil, fmt.Errorf("the pipeline file %s is gone (looked beside apollo serve and in the pipelines folder)", st.Pipeline)
	}
	// The run's own values of its variables, those the pipeline declares
	// and those it was given (apollo run --var, the API's vars), so that the
	// resume renders its steps as the run did; not the ones apollo sets.
	vars := map[string]string{}
	for k, v := range st.Vars {
		if k == "task_date" || !slices.Contains(template.BuiltinVars(), k) {
			vars[k] = v
		}
	}
	if err := intervene.Note(run.f.Path, run.f.TaskID, fmt.Sprintf("resume requested by %s (why: %s)", s.by(user), why)); err != nil {
		return nil, err
	}
	return s.opts.Scheduler.StartNow(cron.Job{Pipe: cron.Pipe{Rel: s.relOf(path), Path: path, TaskName: st.TaskName},
		TaskID: run.f.TaskID, TaskDate: vars["task_date"], Vars: vars, StateDir: s.dirs[run.key.SD].Root,
		Trigger: cron.TriggerManual, By: s.by(user)})
}

// findPipeline finds the file a log names: its path as given (relative to
// where apollo serve runs, or absolute), else a file of the pipelines
// folder with that task_name.
func (s *Server) findPipeline(path, taskName string) string {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		abs, _ := filepath.Abs(path)
		return abs
	}
	for _, e := range s.pipelines() {
		if e.Err == "" && e.TaskName == taskName {
			return e.Path
		}
	}
	return ""
}

// relOf names a pipeline file in the schedule log: relative to the
// pipelines folder when it is inside.
func (s *Server) relOf(path string) string {
	for _, e := range s.pipelines() {
		if e.Path == path {
			return e.Rel
		}
	}
	return path
}

// actPipeline starts a pipeline now, or queues a backfill of dates.
func (s *Server) actPipeline(w http.ResponseWriter, r *http.Request) { s.startRun(w, r, "", nil, "") }

// startRun is actPipeline, and the API's start of a run with its task id
// (default task_name-date) and variables.
func (s *Server) startRun(w http.ResponseWriter, r *http.Request, taskID string, vars map[string]string, idemKey string) {
	if s.isHub(0) {
		s.refuse(w, r, http.StatusForbidden, "this serve has no state folder of its own (apollo serve --hub without --state-dir or --pipelines): no run starts here")
		return
	}
	if why := s.readOnly(0); why != "" {
		s.refuse(w, r, http.StatusForbidden, fmt.Sprintf("the state folder %s is read-only (%s): no run starts there", s.dirs[0].Root, why))
		return
	}
	user, ok := s.allowed(w, r)
	if !ok {
		return
	}
	e, found := s.pipelineByRel(r.PathValue("rel"))
	if !found {
		s.notFound(w, r, "no such pipeline in the pipelines folder")
		return
	}
	back := "/pipelines/" + pathEscape(e.Rel)
	if e.Err != "" && len(vars) > 0 {
		// A pipeline that reads a variable it does not declare loads only
		// with that variable given, as apollo run --var gives it.
		if p, err := pipeline.Load(e.Path, pipeline.LoadOptions{Vars: vars}); err == nil {
			e.Err, e.TaskName, e.Schedule = "", p.TaskName, p.Schedule
		}
	}
	if e.Err != "" {
		s.done(w, r, back, fmt.Errorf("the pipeline does not load: %s", e.Err), "")
		return
	}
	if s.opts.Scheduler == nil {
		s.done(w, r, back, fmt.Errorf("runs cannot be started from here: %s", s.opts.NoScheduler), "")
		return
	}
	why := r.PostFormValue("why")
	if why == "" {
		s.done(w, r, back, fmt.Errorf("say why: the reason is kept in the schedule log"), "")
		return
	}
	by := s.by(user) + ": " + why
	switch r.PostFormValue("action") {
	case "run":
		date := r.PostFormValue("date")
		if date == "" {
			loc := time.Local
			if e.Schedule != nil {
				loc = e.Schedule.Location()
			}
			date = s.opts.Now().In(loc).Format(time.DateOnly)
		}
		if _, err := time.Parse(time.DateOnly, date); err != nil {
			s.done(w, r, back, fmt.Errorf("date %q is not a date YYYY-MM-DD", date), "")
			return
		}
		if taskID == "" {
			taskID = e.TaskName + "-" + date
		}
		en, err := s.opts.Scheduler.StartNow(cron.Job{Pipe: e.Pipe, TaskID: taskID, TaskDate: date, Vars: vars,
			Fresh: r.PostFormValue("fresh") != "", Trigger: cron.TriggerManual, By: by, Key: idemKey})
		if err != nil {
			s.done(w, r, back, err, "")
			return
		}
		if isAPI(r) {
			writeJSON(w, http.StatusCreated, startedAnswer(en))
			return
		}
		s.done(w, r, back, nil, fmt.Sprintf("started task %s (apollo run, pid %d)", en.TaskID, en.PID))
	case "backfill":
		dates, err := dateRange(r.PostFormValue("from"), r.PostFormValue("to"))
		if err != nil {
			s.done(w, r, back, err, "")
			return
		}
		if err := s.opts.Scheduler.Backfill(e.Pipe, dates, by); err != nil {
			s.done(w, r, back, err, "")
			return
		}
		s.done(w, r, back, nil, fmt.Sprintf("queued %d run(s), %s to %s, one at a time", len(dates), dates[0], dates[len(dates)-1]))
	default:
		s.done(w, r, back, fmt.Errorf("unknown action %q", r.PostFormValue("action")), "")
	}
}

// startedAnswer is the API's answer to a run it started.
func startedAnswer(en *cron.Entry) map[string]any {
	return map[string]any{"task_id": en.TaskID, "task_date": en.TaskDate, "pid": en.PID,
		"url": "/api/runs?q=" + url.QueryEscape(en.TaskID), "page": "/?q=" + url.QueryEscape(en.TaskID)}
}

// dateRange lists the dates from from to to, at most 3,660.
func dateRange(from, to string) ([]string, error) {
	a, err := time.Parse(time.DateOnly, from)
	if err != nil {
		return nil, fmt.Errorf("from %q is not a date YYYY-MM-DD", from)
	}
	b, err := time.Parse(time.DateOnly, to)
	if err != nil {
		return nil, fmt.Errorf("to %q is not a date YYYY-MM-DD", to)
	}
	if b.Before(a) {
		return nil, fmt.Errorf("%s comes after %s", from, to)
	}
	var out []string
	for t := a; !t.After(b); t = t.AddDate(0, 0, 1) {
		if out = append(out, t.Format(time.DateOnly)); len(out) > 3660 {
			return nil, fmt.Errorf("more than 3660 dates: backfill ten years at a time")
		}
	}
	return out, nil
}
