package web

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"apollo/engine/cron"
	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// page is what every template gets.
type page struct {
	Title  string
	Nav    string
	User   string
	CSRF   string
	Auth   bool // users must sign in
	CanAct bool // the user may intervene
	CanRun bool // runs can be started from the page
	NoRun  string
	// ReadOnly names the state folders that cannot be written, on every
	// page; "" when there are none.
	ReadOnly string
	Flash    string
	Error    string
	Version  string
	SSE      string // the live events' URL, for app.js
	Data     any
}

func (s *Server) newPage(r *http.Request, title, nav string) page {
	user := userOf(r)
	p := page{Title: title, Nav: nav, User: user, Auth: s.opts.Auth.Enabled(), Version: s.opts.Version,
		Flash: r.URL.Query().Get("done"), Error: r.URL.Query().Get("error")}
	if user != "" {
		p.CSRF = s.opts.Auth.csrf(user)
		p.CanAct = true
	}
	p.CanRun = p.CanAct && s.opts.Scheduler != nil
	p.NoRun = s.opts.NoScheduler
	if s.opts.Scheduler != nil {
		if leading, holder := s.opts.Scheduler.Leader(); !leading { // serve --hub: another serve leads
			if holder == "" {
				holder = "another apollo serve"
			}
			p.CanRun = false
			p.NoRun = "the schedules are shared through the hub and " + holder + " leads them: schedules run and runs start there"
		}
	}
	p.ReadOnly = s.readOnlyNote()
	return p
}

var funcs = template.FuncMap{
	"lower": strings.ToLower,
	"when": func(ts string) string {
		t, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			return ts
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"dur": func(ms int64) string {
		return textfmt.Duration(time.Duration(ms) * time.Millisecond).String()
	},
	"oneline": func(s string) string { return textfmt.OneLine(s, 200) },
	"stclass": stateClass,
	"pathq":   url.PathEscape,
	"add":     func(a, b int) int { return a + b },
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, name string, p page) {
	var b bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&b, name, p); err != nil {
		s.opts.Logf("apollo serve: page %s: %v", name, err)
		http.Error(w, "the page could not be made: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b.Bytes())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	textfmt.WriteJSON(w, v)
}

// runLink is the page of a run.
func runLink(k runKey) string { return "/runs/" + itoa(k.SD) + "/" + url.PathEscape(k.Name) }

// listRow is one line of the runs page.
type listRow struct {
	history.RunInfo
	run  *run
	Link string
	Key  string
	Dir  string
}

// runsFilter is what the runs page and /api/runs select.
type runsFilter struct {
	Status, Pipeline, Query string
}

func filterOf(r *http.Request) runsFilter {
	q := r.URL.Query()
	return runsFilter{Status: q.Get("status"), Pipeline: q.Get("pipeline"), Query: strings.TrimSpace(q.Get("q"))}
}

func (f runsFilter) keep(ri history.RunInfo) bool {
	switch f.Status {
	case "", "all":
	case "archived":
		if !ri.Archived {
			return false
		}
	default:
		if ri.Status != f.Status {
			return false
		}
	}
	if f.Pipeline != "" && ri.TaskName != f.Pipeline {
		return false
	}
	return f.Query == "" || strings.Contains(ri.TaskID, f.Query)
}

// runs returns the runs the filter keeps, newest first, and the task names
// of all runs.
func (s *Server) runs(f runsFilter) ([]listRow, []string) {
	var rows []listRow
	names := map[string]bool{}
	for _, r := range s.ix.list() {
		if s.ix.shadowed(r) {
			continue
		}
		ri := s.ix.entry(r)
		if ri.TaskName != "" {
			names[ri.TaskName] = true
		}
		if f.keep(ri) {
			rows = append(rows, listRow{RunInfo: ri, run: r, Link: runLink(r.key), Key: itoa(r.key.SD) + "/" + r.key.Name, Dir: s.dirName(r.key.SD)})
		}
	}
	return rows, slices.Sorted(func(yield func(string) bool) {
		for n := range names {
			if !yield(n) {
				return
			}
		}
	})
}

// pageSize is how many runs a page of the runs page shows.
const pageSize = 200

type runsData struct {
	Rows       []listRow
	Total      int
	Page, Last int
	Filter     runsFilter
	Names      []string
	Statuses   []string
	Indexed    int
	Pending    int
	MultiDir   bool
	PrevQuery  string
	NextQuery  string
}

func (s *Server) pageRuns(w http.ResponseWriter, r *http.Request) {
	f := filterOf(r)
	rows, names := s.runs(f)
	n, _ := strconv.Atoi(r.URL.Query().Get("page"))
	last := max(0, (len(rows)-1)/pageSize)
	n = min(max(n, 0), last)
	d := runsData{Total: len(rows), Page: n, Last: last, Filter: f, Names: names, MultiDir: len(s.dirs) > 1,
		Statuses: []string{"running", "succeeded", "failed", "interrupted", "unfinished", "corrupt", "archived"}}
	d.Rows = rows[min(n*pageSize, len(rows)):min((n+1)*pageSize, len(rows))]
	d.Indexed, d.Pending = s.ix.progress()
	q := r.URL.Query()
	q.Set("page", itoa(n-1))
	d.PrevQuery = q.Encode()
	q.Set("page", itoa(n+1))
	d.NextQuery = q.Encode()
	p := s.newPage(r, "runs", "runs")
	p.SSE, p.Data = "/sse/runs", d
	s.render(w, r, "runs", p)
}

// apiRuns writes {"runs": [...]} byte for byte as apollo list --json
// does; a finished run's entry is encoded once and kept.
func (s *Server) apiRuns(w http.ResponseWriter, r *http.Request) {
	rows, _ := s.runs(filterOf(r))
	var b bytes.Buffer
	b.Grow(len(rows) * 400)
	if len(rows) == 0 {
		b.WriteString("{\n  \"runs\": []\n}\n")
	} else {
		b.WriteString("{\n  \"runs\": [\n    ")
		for i, row := range rows {
			if i > 0 {
				b.WriteString(",\n    ")
			}
			b.Write(row.run.encoded(row.RunInfo))
		}
		b.WriteString("\n  ]\n}\n")
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Write(b.Bytes())
}

// encoded is ri, the run's entry now, as an element of list --json's
// "runs": kept while the run is finished, when ri is its final entry.
func (r *run) encoded(ri history.RunInfo) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.enc != nil && r.finished {
		return r.enc
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("    ", "  ")
	enc.SetEscapeHTML(false)
	enc.Encode(ri)
	out := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	if r.finished && ri == r.info {
		r.enc = out
	}
	return out
}

// sseRuns sends the list page each run that changed: event "runs", data
// [{key, link, run}], and {key, gone: true} for a run no longer there.
func (s *Server) sseRuns(w http.ResponseWriter, r *http.Request) {
	first := true
	sb := &sub{all: true}
	s.stream(w, r, sb, func(ev *events) bool {
		if first {
			first = false
			total, pending := s.ix.progress()
			ev.send("index", map[string]int{"runs": total, "pending": pending})
			return false
		}
		type item struct {
			Key  string           `json:"key"`
			Link string           `json:"link,omitempty"`
			Gone bool             `json:"gone,omitempty"`
			Run  *history.RunInfo `json:"run,omitempty"`
		}
		var items []item
		for _, k := range sb.takeKeys() {
			key := itoa(k.SD) + "/" + k.Name
			run := s.ix.get(k)
			if run == nil || s.ix.shadowed(run) {
				items = append(items, item{Key: key, Gone: true})
				continue
			}
			ri := s.ix.entry(run)
			items = append(items, item{Key: key, Link: runLink(k), Run: &ri})
		}
		total, pending := s.ix.progress()
		ev.send("index", map[string]int{"runs": total, "pending": pending})
		if len(items) > 0 {
			ev.send("runs", items)
		}
		return false
	})
}

// maxTableSteps is the most steps a run page's table shows unless asked
// for all: the first ones, in the graph's order.
const maxTableSteps = 1000

// runData is what the run page shows.
type runData struct {
	Key       string
	Hidden    int // steps left out of the table (a huge run, without ?all)
	Link      string
	Report    *history.Report
	Steps     []stepRow
	DAG       template.HTML
	Gantt     template.HTML
	GanttRows int
	Attempts  int
	Warnings  []warningRow
	Running   bool
	Resumable bool
	StateDir  string
	ReadOnly  bool   // the run's state folder cannot be written: no intervention
	FromHub   bool   // the run is the hub's copy of a coordinator's log: no intervention
	Trigger   string // what trigger started the run (hooks.go), "" for none
}

type stepRow struct {
	history.ReportStep
	stepCells
	Outputs []int // attempts with an output file, or known from the log
	Link    string
	Events  string
	// ListHead, on the first handler of a handler list, names the list
	// and what triggers it, for the line above it.
	ListHead string
}

// handlerHead is the line above the handlers of list, as inspect prints it.
func handlerHead(list string) string {
	for _, l := range history.HandlerLists {
		if l.Name == list {
			return l.Name + " handlers (" + l.Trigger + ")"
		}
	}
	return ""
}

// stepCells is what the run page shows of a step, in its table and in its
// live updates.
type stepCells struct {
	State    string // DIRTY for a cut-off attempt that no runner holds
	Duration string
	// Decision and Error split what the step's end said, on one line
	// each: why it was skipped, cached or expanded, and what went wrong.
	Decision, Error string
}

// cellsOf is step st's cells while its task is running or not.
func cellsOf(st history.ReportStep, running bool) stepCells {
	c := stepCells{State: st.Status, Decision: textfmt.OneLine(st.Note, 200), Error: textfmt.OneLine(st.LastError, 200)}
	if st.Dirty && !running {
		c.State = "DIRTY"
	}
	if st.DurationMS > 0 || st.Status == eventlog.Success {
		c.Duration = textfmt.Duration(time.Duration(st.DurationMS) * time.Millisecond).String()
	}
	if st.Status == eventlog.Skipped { // a when: that was false says why as its error
		c.Decision, c.Error = c.Error, ""
	}
	return c
}

type warningRow struct {
	Time, Step, Message, Action, By, Why string
}

func (s *Server) runData(run *run, d *detail) runData {
	rep := d.report
	link := runLink(run.key)
	rd := runData{Key: itoa(run.key.SD) + "/" + run.key.Name, Link: link, Report: rep, Running: rep.Status == "running",
		StateDir: s.dirName(run.key.SD), Attempts: len(d.timeline), Trigger: triggerOf(d.start)}
	rd.Resumable = !rd.Running && !rep.Archived && rep.Status != "complete"
	attempts := map[string][]int{}
	for _, a := range d.timeline {
		attempts[a.Step] = append(attempts[a.Step], a.Retry)
	}
	var nodes []node
	list := ""
	for _, st := range rep.Steps {
		row := stepRow{ReportStep: st, stepCells: cellsOf(st, rd.Running), Outputs: attempts[st.ID],
			Link: link + "/steps/" + url.PathEscape(st.ID), Events: link + "/events?step=" + url.QueryEscape(st.ID)}
		if st.Handler != list {
			list = st.Handler
			row.ListHead = handlerHead(list)
		}
		nodes = append(nodes, node{ID: st.ID, DependsOn: st.DependsOn, State: row.State, Optional: st.Optional, Handler: st.Handler})
		rd.Steps = append(rd.Steps, row)
	}
	rd.DAG = dagSVG(nodes, func(id string) string {
		if as := attempts[id]; len(as) > 0 {
			return link + "/steps/" + url.PathEscape(id) + "/" + itoa(as[len(as)-1])
		}
		return link + "/events?step=" + url.QueryEscape(id)
	})
	rd.Gantt, rd.GanttRows = ganttSVG(d.timeline, s.opts.Now())
	for _, w := range d.warnings {
		row := warningRow{Time: w.Timestamp, Step: w.StepID, Message: w.Message}
		if iv := w.Intervention; iv != nil {
			row.Action, row.By, row.Why = iv.Action, iv.By, iv.Why
		}
		rd.Warnings = append(rd.Warnings, row)
	}
	return rd
}

func (s *Server) pageRun(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	d := s.ix.detail(run)
	if d == nil {
		s.notFound(w, r, "the run's log cannot be read")
		return
	}
	p := s.newPage(r, "task "+d.report.TaskID, "runs")
	rd := s.runData(run, d)
	if s.readOnly(run.key.SD) != "" {
		p.CanAct, p.CanRun, rd.ReadOnly = false, false, true
		rd.FromHub = s.isHub(run.key.SD)
	}
	if len(rd.Steps) > maxTableSteps && r.URL.Query().Get("all") == "" {
		rd.Hidden = len(rd.Steps) - maxTableSteps
		rd.Steps = rd.Steps[:maxTableSteps]
	}
	p.SSE, p.Data = "/sse"+rd.Link, rd
	s.render(w, r, "run", p)
}

func (s *Server) apiRun(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	d := s.ix.detail(run)
	if d == nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": s.ix.entry(run).Error})
		return
	}
	writeJSON(w, http.StatusOK, d.report)
}

func (s *Server) fragGantt(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	d := s.ix.detail(run)
	if d == nil {
		return
	}
	svg, _ := ganttSVG(d.timeline, s.opts.Now())
	w.Header().Set("Content-Type", "image/svg+xml")
	w.Header().Set("Cache-Control", "no-store")
	io.WriteString(w, string(svg))
}

func (s *Server) apiTimeline(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	d := s.ix.detail(run)
	if d == nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": "the run's log cannot be read"})
		return
	}
	type att struct {
		Step   string `json:"step"`
		Retry  int    `json:"attempt"`
		Start  string `json:"start"`
		End    string `json:"end,omitempty"`
		Status string `json:"status"`
	}
	out := []att{}
	for _, a := range d.timeline {
		x := att{Step: a.Step, Retry: a.Retry, Start: eventlog.FormatTime(a.Start), Status: a.Status}
		if !a.End.IsZero() {
			x.End = eventlog.FormatTime(a.End)
		}
		out = append(out, x)
	}
	writeJSON(w, http.StatusOK, map[string]any{"task_id": d.report.TaskID, "attempts": out})
}

// sseRun sends a run page its changes: event "run" with the status, the
// runner and the steps that changed since the last event (all of them
// first).
func (s *Server) sseRun(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	k := run.key
	// What the page has: the records its last event covered and the status
	// then (a runner that died turns running steps dirty without a record).
	seen, lastStatus := -1, ""
	s.stream(w, r, &sub{key: &k}, func(ev *events) bool {
		d := s.ix.detail(run)
		if d == nil {
			return true
		}
		type step struct {
			ID       string `json:"id"`
			State    string `json:"state"`
			Attempts int    `json:"attempts"`
			Duration string `json:"duration"`
			Decision string `json:"decision"`
			Error    string `json:"last_error"`
			Output   string `json:"output,omitempty"`
		}
		running := d.report.Status == "running"
		all := seen < 0 || d.report.Status != lastStatus || d.records < seen
		steps := []step{}
		for _, st := range d.report.Steps {
			if !all && d.changed[st.ID] <= seen {
				continue
			}
			c := cellsOf(st, running)
			x := step{ID: st.ID, State: c.State, Attempts: st.Attempts, Duration: c.Duration, Decision: c.Decision, Error: c.Error}
			if st.Attempts > 0 {
				x.Output = runLink(k) + "/steps/" + url.PathEscape(st.ID) + "/" + itoa(st.RetryCount)
			}
			steps = append(steps, x)
		}
		seen, lastStatus = d.records, d.report.Status
		ev.send("run", map[string]any{"status": d.report.Status, "runner": d.report.Runner, "records": d.report.Records,
			"last_event": d.report.LastEvent, "steps": steps})
		return false
	})
}

// eventRow is one record on the event log page.
type eventRow struct {
	Seq                                    int64
	Time, Step, Type, Status, Detail, Link string
	Retry                                  int
}

// maxEvents is the most records an event log page or its API returns.
const maxEvents = 5000

// events reads the run's records that the filter (step, event type) keeps,
// from the first one after seq from.
func (s *Server) events(run *run, r *http.Request) ([]*eventlog.Record, bool, error) {
	q := r.URL.Query()
	step, typ := q.Get("step"), q.Get("type")
	from, _ := strconv.ParseInt(q.Get("after"), 10, 64)
	var out []*eventlog.Record
	more := false
	errStop := errors.New("enough")
	_, err := statedir.ReadLog(run.f.Path, eventlog.ReadOptions{TaskID: run.f.TaskID}, func(rec *eventlog.Record) error {
		if rec.Seq <= from || (step != "" && rec.StepID != step) || (typ != "" && rec.EventType != typ) {
			return nil
		}
		if len(out) == maxEvents {
			more = true
			return errStop
		}
		out = append(out, rec)
		return nil
	})
	if errors.Is(err, errStop) {
		err = nil
	}
	return out, more, err
}

type eventsData struct {
	Link, Step, Type, TaskID string
	Rows                     []eventRow
	Types                    []string
	Steps                    []string
	More                     string
	Error                    string
}

func (s *Server) pageEvents(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	recs, more, err := s.events(run, r)
	q := r.URL.Query()
	d := eventsData{Link: runLink(run.key), Step: q.Get("step"), Type: q.Get("type"), TaskID: run.f.TaskID,
		Types: []string{eventlog.TaskStart, eventlog.StepStart, eventlog.StepProcess, eventlog.StepEnd, eventlog.Cleanup,
			eventlog.Marker, eventlog.Warning, eventlog.TaskSummary}}
	if err != nil {
		d.Error = err.Error()
	}
	if det := s.ix.detail(run); det != nil {
		for _, st := range det.report.Steps {
			d.Steps = append(d.Steps, st.ID)
		}
	}
	for _, rec := range recs {
		row := eventRow{Seq: rec.Seq, Time: rec.Timestamp, Step: rec.StepID, Type: rec.EventType, Status: rec.Status, Retry: rec.RetryCount}
		line := history.FormatRecord(rec, time.UTC)
		if i := strings.Index(line, "attempt "+itoa(rec.RetryCount)); i >= 0 {
			row.Detail = strings.TrimSpace(line[i+len("attempt "+itoa(rec.RetryCount)):])
		}
		if rec.EventType == eventlog.StepStart || rec.EventType == eventlog.StepEnd {
			row.Link = d.Link + "/steps/" + url.PathEscape(rec.StepID) + "/" + itoa(rec.RetryCount)
		}
		d.Rows = append(d.Rows, row)
	}
	if more && len(recs) > 0 {
		q.Set("after", strconv.FormatInt(recs[len(recs)-1].Seq, 10))
		d.More = q.Encode()
	}
	p := s.newPage(r, "events of "+run.f.TaskID, "runs")
	p.Data = d
	s.render(w, r, "events", p)
}

func (s *Server) apiEvents(w http.ResponseWriter, r *http.Request) {
	run := s.runOf(w, r)
	if run == nil {
		return
	}
	recs, more, err := s.events(run, r)
	if err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error()})
		return
	}
	if recs == nil {
		recs = []*eventlog.Record{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"records": recs, "more": more})
}

// maxStepURL bounds a step id in a URL: an instance id is its step's id
// (128 bytes at most) and its items.
const maxStepURL = 4096

// stepInURL reports whether step, from a URL, may name a step's output
// file: any id a log names (b[eu], m[x,1.5] for instances) but one that
// would name a file elsewhere (a separator, "." or ".."). outputFile also
// wants the run's log to name it, and opens inside the state folder only.
func stepInURL(step string) bool {
	return step != "" && len(step) <= maxStepURL && step != "." && step != ".." &&
		!strings.ContainsAny(step, "/\\\x00") && utf8.ValidString(step)
}

// outputFile opens the output of a step attempt of run, inside its state
// folder only (os.Root: no "..", no link leads out), for a step the log
// names.
func (s *Server) outputFile(run *run, step string, attempt int) (*os.File, string, error) {
	if !stepInURL(step) || attempt < 0 || statedir.ValidTaskID(run.f.TaskID) != nil {
		return nil, "", os.ErrNotExist
	}
	if d := s.ix.detail(run); d == nil || !slices.ContainsFunc(d.report.Steps, func(st history.ReportStep) bool { return st.ID == step }) {
		return nil, "", os.ErrNotExist
	}
	rel := filepath.Join("output", run.f.TaskID, step+"."+itoa(attempt)+".log")
	dir := s.dirs[run.key.SD]
	f, err := os.OpenInRoot(dir.Root, rel)
	return f, filepath.Join(dir.Root, "output", run.f.TaskID), err
}

// maxShownOutput is the most of an output file a page shows at first: its
// end.
const maxShownOutput = 1 << 20

type outputData struct {
	Link, Step, TaskID string
	Attempt            int
	Attempts           []int
	Text               string
	Offset             int64
	Cut                int64
	Missing            bool
	Running            bool
}

func (s *Server) stepAttempt(w http.ResponseWriter, r *http.Request) (*run, string, int, bool) {
	run := s.runOf(w, r)
	if run == nil {
		return nil, "", 0, false
	}
	step := r.PathValue("step")
	attempt, err := atoiStrict(r.PathValue("attempt"))
	if err != nil || !stepInURL(step) {
		s.notFound(w, r, "no such step attempt")
		return nil, "", 0, false
	}
	return run, step, attempt, true
}

func (s *Server) pageOutput(w http.ResponseWriter, r *http.Request) {
	run, step, attempt, ok := s.stepAttempt(w, r)
	if !ok {
		return
	}
	d := outputData{Link: runLink(run.key), Step: step, TaskID: run.f.TaskID, Attempt: attempt}
	det := s.ix.detail(run)
	if det != nil {
		for _, a := range det.timeline {
			if a.Step == step {
				d.Attempts = append(d.Attempts, a.Retry)
				if a.Retry == attempt && a.End.IsZero() {
					d.Running = true
				}
			}
		}
	}
	f, _, err := s.outputFile(run, step, attempt)
	switch {
	case err == nil:
		defer f.Close()
		fi, _ := f.Stat()
		size := fi.Size()
		start := max(0, size-maxShownOutput)
		d.Cut = start
		data := make([]byte, size-start)
		n, _ := f.ReadAt(data, start)
		d.Text, d.Offset = string(data[:n]), start+int64(n)
	case errors.Is(err, os.ErrNotExist) && det != nil && slices.Contains(d.Attempts, attempt):
		d.Missing = true // the attempt printed nothing (yet)
	default:
		s.notFound(w, r, "no such step attempt")
		return
	}
	p := s.newPage(r, step+" attempt "+itoa(attempt)+" of "+run.f.TaskID, "runs")
	p.SSE = "/sse" + d.Link + "/steps/" + url.PathEscape(step) + "/" + itoa(attempt) + "?offset=" + strconv.FormatInt(d.Offset, 10)
	p.Data = d
	s.render(w, r, "output", p)
}

func (s *Server) apiOutput(w http.ResponseWriter, r *http.Request) {
	run, step, attempt, ok := s.stepAttempt(w, r)
	if !ok {
		return
	}
	f, _, err := s.outputFile(run, step, attempt)
	if err != nil {
		s.notFound(w, r, "no output for this step attempt")
		return
	}
	defer f.Close()
	off, _ := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if off > 0 {
		f.Seek(off, io.SeekStart)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	io.Copy(w, f)
}

// sseOutput sends an attempt page what its output file gains: event
// "output" with the new text as a JSON string, from ?offset on.
func (s *Server) sseOutput(w http.ResponseWriter, r *http.Request) {
	run, step, attempt, ok := s.stepAttempt(w, r)
	if !ok {
		return
	}
	off, _ := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	dir := filepath.Join(s.dirs[run.key.SD].Root, "output", run.f.TaskID)
	os.MkdirAll(dir, 0o755) // to watch it before the first byte
	s.watchDir(dir, watchTarget{run.key.SD, "output"})
	s.stream(w, r, &sub{dir: dir}, func(ev *events) bool {
		f, _, err := s.outputFile(run, step, attempt)
		if err != nil {
			return false
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || fi.Size() <= off {
			return false
		}
		buf := make([]byte, min(fi.Size()-off, 4<<20))
		n, _ := f.ReadAt(buf, off)
		off += int64(n)
		ev.send("output", string(buf[:n]))
		return false
	})
}

// pipelineRow is one pipeline on the pipelines page.
type pipelineRow struct {
	File     string `json:"file"`
	TaskName string `json:"task_name,omitempty"`
	// Steps counts what validate does: instances and handlers included;
	// Handlers, the handlers among them.
	Steps    int           `json:"steps"`
	Handlers int           `json:"handlers,omitempty"`
	Schedule *scheduleJSON `json:"schedule,omitempty"`
	Triggers []string      `json:"triggers,omitempty"` // what else starts it (triggers:), one line each
	Status   *cron.Status  `json:"status,omitempty"`
	Error    string        `json:"error,omitempty"`
	Link     string        `json:"-"`
	Graph    template.HTML `json:"-"`
	Entries  []*cron.Entry `json:"-"`
}

type scheduleJSON struct {
	Cron         string `json:"cron"`
	TimeZone     string `json:"timezone"`
	Catchup      string `json:"catchup"`
	CatchupLimit int    `json:"catchup_limit"`
	Overlap      string `json:"overlap"`
}

func (s *Server) pipelineRow(e pipeEntry) pipelineRow {
	row := pipelineRow{File: e.Rel, TaskName: e.TaskName, Steps: len(e.Steps), Error: e.Err, Link: "/pipelines/" + pathEscape(e.Rel)}
	for _, n := range e.Steps {
		if n.Handler != "" {
			row.Handlers++
		}
	}
	if sch := e.Schedule; sch != nil {
		row.Schedule = &scheduleJSON{Cron: sch.Cron, TimeZone: sch.TimeZone, Catchup: sch.Catchup, CatchupLimit: sch.CatchupLimit, Overlap: sch.Overlap}
	}
	for _, t := range e.Triggers {
		row.Triggers = append(row.Triggers, t.Describe())
	}
	if s.opts.Scheduler != nil && e.Err == "" {
		st := s.opts.Scheduler.Status(e.Pipe)
		row.Status = &st
	}
	return row
}

// pathEscape escapes each part of a slash-separated path.
func pathEscape(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

type pipelinesData struct {
	Folder  string
	Rows    []pipelineRow
	Entries []*cron.Entry
}

func (s *Server) pagePipelines(w http.ResponseWriter, r *http.Request) {
	d := pipelinesData{Folder: s.opts.Pipelines}
	for _, e := range s.pipelines() {
		d.Rows = append(d.Rows, s.pipelineRow(e))
	}
	if s.opts.Scheduler != nil {
		d.Entries = s.opts.Scheduler.Recent(50)
	}
	p := s.newPage(r, "pipelines", "pipelines")
	p.Data = d
	s.render(w, r, "pipelines", p)
}

func (s *Server) apiPipelines(w http.ResponseWriter, r *http.Request) {
	rows := []pipelineRow{}
	for _, e := range s.pipelines() {
		rows = append(rows, s.pipelineRow(e))
	}
	writeJSON(w, http.StatusOK, map[string]any{"folder": s.opts.Pipelines, "pipelines": rows})
}

func (s *Server) pagePipeline(w http.ResponseWriter, r *http.Request) {
	e, ok := s.pipelineByRel(r.PathValue("rel"))
	if !ok {
		s.notFound(w, r, "no such pipeline in the pipelines folder")
		return
	}
	row := s.pipelineRow(e)
	row.Graph = dagSVG(e.Steps, nil)
	if s.opts.Scheduler != nil {
		for _, en := range s.opts.Scheduler.Recent(keepScan) {
			if en.Pipeline == e.Rel && len(row.Entries) < 100 {
				row.Entries = append(row.Entries, en)
			}
		}
	}
	p := s.newPage(r, "pipeline "+e.Rel, "pipelines")
	p.Data = row
	s.render(w, r, "pipeline", p)
}

// keepScan is how many recent schedule log entries a pipeline page looks at.
const keepScan = 2000

func (s *Server) apiSchedule(w http.ResponseWriter, r *http.Request) {
	entries := []*cron.Entry{}
	out := map[string]any{"scheduler": s.opts.Scheduler != nil, "why": s.opts.NoScheduler}
	if s.opts.Scheduler != nil {
		entries = s.opts.Scheduler.Recent(keepScan)
		// With serve --hub, one serve leads the shared schedules.
		leading, leader := s.opts.Scheduler.Leader()
		out["leading"] = leading
		if leader != "" {
			out["leader"] = leader
		}
	}
	out["entries"] = entries
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) pageLogin(w http.ResponseWriter, r *http.Request) {
	p := s.newPage(r, "sign in", "")
	s.render(w, r, "login", p)
}

// postLogin takes the token from the login form and, when it is right,
// sets the session cookie (HttpOnly, SameSite=Strict).
func (s *Server) postLogin(w http.ResponseWriter, r *http.Request) {
	a := s.opts.Auth
	if len(a.Token) == 0 {
		http.Error(w, "this server signs in with a user name and password (basic auth)", http.StatusNotFound)
		return
	}
	if o := r.Header.Get("Origin"); o != "" {
		if u, err := url.Parse(o); err != nil || u.Host != r.Host {
			http.Error(w, "the request came from another site", http.StatusForbidden)
			return
		}
	}
	req := r.Clone(r.Context())
	req.Header.Set("Authorization", "Bearer "+r.PostFormValue("token"))
	if _, ok := a.user(req); !ok {
		http.Redirect(w, r, "/login?error="+url.QueryEscape("that token is not right"), http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: a.sign("session:token"), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// jsonWanted reports whether the client asked for JSON rather than a page.
func jsonWanted(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}
