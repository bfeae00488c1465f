package web

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"apollo/engine/cron"
	"apollo/engine/pipeline"
	"apollo/engine/statedir"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Options configure a Server.
type Options struct {
	// StateDirs are the state folders shown, in order; runs started from the
	// page and by schedules go to the first.
	StateDirs []string
	// Pipelines is the folder of pipeline files shown (and scheduled); ""
	// for none.
	Pipelines string
	// Auth says who may sign in; nil or empty: nobody, pages are open and
	// interventions refused.
	Auth *Auth
	// Scheduler starts runs and runs schedules; nil when it cannot (another
	// serve holds the schedule log: NoScheduler says so).
	Scheduler   *cron.Scheduler
	NoScheduler string
	// Now is the clock; nil means time.Now.
	Now     func() time.Time
	Version string
	// Logf receives what the server does, for its stderr.
	Logf func(format string, args ...any)
	// Host names this machine in interventions' "by".
	Host string
	// ReadOnly says, by state folder (in StateDirs' order), why it cannot
	// be written: "" for one that can. A read-only folder's runs are shown
	// but take no intervention; the first's, no schedule nor run either
	// (the caller gives no Scheduler).
	ReadOnly []string
	// AllowedHosts are the Host header names, besides loopback ones, that
	// a server with sign-in answers ("name" or "name:port"); none: any.
	// Without sign-in only loopback names are answered (hostAllowed).
	AllowedHosts []string
	// Hub, when set, is the copy of the hub's task logs (apollo serve
	// --hub, docs/spec.md §8.8), shown as one more state folder after
	// StateDirs: read-only, named by its label.
	Hub *HubFolder
}

// HubFolder is a folder laid out as a state folder's that holds a copy of
// the logs the hub holds, which a follower of the hub keeps up to date.
// Its runs take no intervention: their coordinators run elsewhere.
type HubFolder struct {
	Dir   string
	Label string // how pages and metrics name it ("hub nats://...")
	// Holder says whether a coordinator holds the task's lease, and its
	// pid (on its own host).
	Holder func(taskID string) (pid int, held bool)
}

// hubReadOnly is why the hub's runs take no intervention.
const hubReadOnly = "the hub's copy of logs that coordinators on other machines write: an intervention is taken where " +
	"the task's coordinator runs (apollo script, or the apollo serve of its state folder)"

// Server is apollo serve's HTTP side.
type Server struct {
	opts  Options
	dirs  []statedir.Dir
	ix    *index
	hub   *hub
	watch watcher
	tmpl  *template.Template
	reg   *prometheus.Registry
	start time.Time

	pmu   sync.RWMutex
	pipes []pipeEntry

	wmu     sync.Mutex
	watched map[string]watchTarget

	idem sync.Mutex // held across a start with an Idempotency-Key (idempotency.go)

	bg sync.WaitGroup // the goroutines Start started
}

// Wait waits, once the context given to Start is done, for the server's
// goroutines to end (the last one saves the index cache).
func (s *Server) Wait() { s.bg.Wait() }

// pipeEntry is one file of the pipelines folder.
type pipeEntry struct {
	cron.Pipe
	Steps []node
	Err   string
}

// watchTarget is what a watched folder holds.
type watchTarget struct {
	sd   int
	kind string // "logs", "archive", "root", "output", "pipelines"
}

// New builds the server over its options; Start makes it follow the logs.
func New(o Options) (*Server, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Auth == nil {
		o.Auth = &Auth{}
	}
	o.Auth.init()
	if o.Host == "" {
		o.Host, _ = os.Hostname()
	}
	s := &Server{opts: o, hub: newHub(), start: o.Now(), watched: map[string]watchTarget{}}
	for _, d := range o.StateDirs {
		s.dirs = append(s.dirs, statedir.Dir{Root: d})
	}
	hubSD := -1
	if o.Hub != nil {
		hubSD = len(s.dirs)
		s.dirs = append(s.dirs, statedir.Dir{Root: o.Hub.Dir})
	}
	s.ix = newIndex(s.dirs, o.Now)
	if o.Hub != nil {
		s.ix.hubSD, s.ix.hubHolder = hubSD, o.Hub.Holder
	}
	s.ix.changed = s.hub.runsChanged
	t, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	s.tmpl = t
	s.reg = s.metrics()
	return s, nil
}

// Start lists the runs (from the index cache where it can), reads the rest
// in the background, watches the folders and, with a scheduler, runs the
// schedules, until ctx is done. It returns once the server can answer.
func (s *Server) Start(ctx context.Context) error {
	w, err := newWatcher()
	if err != nil {
		return err
	}
	s.watch = w
	for sd, d := range s.dirs {
		if s.readOnly(sd) == "" {
			os.MkdirAll(d.Logs(), 0o755)
		}
		s.watchDir(d.Root, watchTarget{sd, "root"})
		s.watchDir(d.Logs(), watchTarget{sd, "logs"})
		s.watchDir(d.Archive(), watchTarget{sd, "archive"})
	}
	todo := s.ix.scan()
	s.bg.Add(3)
	go func() {
		defer s.bg.Done()
		s.ix.readAll(todo)
		if ctx.Err() == nil {
			s.ix.save()
		}
		s.hub.runsChanged(nil)
	}()
	if s.opts.Pipelines != "" {
		s.watchDir(s.opts.Pipelines, watchTarget{-1, "pipelines"})
		s.loadPipelines()
	}
	go func() {
		defer s.bg.Done()
		s.follow(ctx)
	}()
	go func() {
		defer s.bg.Done()
		tick := time.NewTicker(time.Minute)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				s.ix.save()
				return
			case <-tick.C:
				s.ix.save()
				if s.opts.Pipelines != "" {
					s.loadPipelines()
				}
			}
		}
	}()
	if s.opts.Scheduler != nil {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			s.opts.Scheduler.Run(ctx)
		}()
	}
	return nil
}

func (s *Server) watchDir(dir string, t watchTarget) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, ok := s.watched[dir]; ok {
		return
	}
	if s.watch.add(dir) == nil {
		s.watched[dir] = t
	}
}

// follow turns what the watcher sees into index updates and page events.
func (s *Server) follow(ctx context.Context) {
	ch := s.watch.changes()
	for {
		select {
		case <-ctx.Done():
			s.watch.close()
			return
		case c, ok := <-ch:
			if !ok {
				return
			}
			s.wmu.Lock()
			t, known := s.watched[c.dir]
			s.wmu.Unlock()
			if !known {
				continue
			}
			switch t.kind {
			case "logs":
				if strings.HasSuffix(c.name, ".jsonl") {
					s.ix.touch(t.sd, c.name)
				} else if c.name == "" {
					s.rescan()
				}
			case "archive":
				s.rescan()
			case "root":
				if c.name == "archive" {
					s.watchDir(s.dirs[t.sd].Archive(), watchTarget{t.sd, "archive"})
					s.rescan()
				}
			case "output":
				s.hub.fileChanged(c.dir)
			case "pipelines":
				s.loadPipelines()
			}
		}
	}
}

func (s *Server) rescan() {
	todo := s.ix.scan()
	s.ix.readAll(todo)
	keys := make([]runKey, len(todo))
	for i, r := range todo {
		keys[i] = r.key
	}
	s.hub.runsChanged(keys)
}

// maxPipelines bounds what is read of the pipelines folder.
const maxPipelines = 1000

// loadPipelines reads every .yaml and .yml file under the pipelines folder
// (not hidden ones) and gives the scheduler those with a schedule.
func (s *Server) loadPipelines() {
	root := s.opts.Pipelines
	var found []pipeEntry
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || len(found) >= maxPipelines {
			return nil
		}
		name := d.Name()
		if path != root && strings.HasPrefix(name, ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) || !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return nil
		}
		abs, _ := filepath.Abs(path)
		e := pipeEntry{Pipe: cron.Pipe{Rel: filepath.ToSlash(rel), Path: abs}}
		p, err := pipeline.Load(abs, pipeline.LoadOptions{})
		if err != nil {
			e.Err = err.Error()
		} else {
			e.TaskName, e.Schedule, e.Triggers = p.TaskName, p.Schedule, p.Triggers
			// Its steps as a run makes them (and validate counts them):
			// foreach and matrix steps as their instances.
			if x, err := p.Expand(p.Vars); err == nil {
				p = x
			}
			for _, i := range p.TopoOrder() {
				st := p.Steps[i]
				e.Steps = append(e.Steps, node{ID: st.ID, DependsOn: st.DependsOn, Optional: st.Optional, Handler: st.Handler})
			}
		}
		found = append(found, e)
		return nil
	})
	sort.Slice(found, func(i, j int) bool { return found[i].Rel < found[j].Rel }) // not slices.SortFunc: see statedir.scan
	s.pmu.Lock()
	s.pipes = found
	s.pmu.Unlock()
	if s.opts.Scheduler != nil {
		var pipes []cron.Pipe
		for _, e := range found {
			if e.Err == "" {
				pipes = append(pipes, e.Pipe)
			}
		}
		if err := s.opts.Scheduler.SetPipes(pipes); err != nil {
			s.opts.Logf("apollo serve: schedules: %v", err)
		}
	}
}

// pipelines returns the pipelines folder's files.
func (s *Server) pipelines() []pipeEntry {
	s.pmu.RLock()
	defer s.pmu.RUnlock()
	return s.pipes
}

func (s *Server) pipelineByRel(rel string) (pipeEntry, bool) {
	for _, p := range s.pipelines() {
		if p.Rel == rel {
			return p, true
		}
	}
	return pipeEntry{}, false
}

// Handler is the server's HTTP handler: every response carries the
// security headers, and every request but the login page needs a user when
// auth is on.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServer(http.FS(static))))
	mux.HandleFunc("GET /{$}", s.pageRuns)
	mux.HandleFunc("GET /api/runs", s.apiRuns)
	mux.HandleFunc("GET /runs/{sd}/{log}", s.pageRun)
	mux.HandleFunc("GET /api/runs/{sd}/{log}", s.apiRun)
	mux.HandleFunc("GET /runs/{sd}/{log}/gantt", s.fragGantt)
	mux.HandleFunc("GET /api/runs/{sd}/{log}/timeline", s.apiTimeline)
	mux.HandleFunc("GET /runs/{sd}/{log}/events", s.pageEvents)
	mux.HandleFunc("GET /api/runs/{sd}/{log}/events", s.apiEvents)
	mux.HandleFunc("GET /runs/{sd}/{log}/steps/{step}/{attempt}", s.pageOutput)
	mux.HandleFunc("GET /api/runs/{sd}/{log}/steps/{step}/{attempt}", s.apiOutput)
	mux.HandleFunc("GET /sse/runs", s.sseRuns)
	mux.HandleFunc("GET /sse/runs/{sd}/{log}", s.sseRun)
	mux.HandleFunc("GET /sse/runs/{sd}/{log}/steps/{step}/{attempt}", s.sseOutput)
	mux.HandleFunc("GET /pipelines", s.pagePipelines)
	mux.HandleFunc("GET /api/pipelines", s.apiPipelines)
	mux.HandleFunc("GET /pipelines/{rel...}", s.pagePipeline)
	mux.HandleFunc("GET /api/schedule", s.apiSchedule)
	mux.HandleFunc("POST /runs/{sd}/{log}/act", s.actRun)
	mux.HandleFunc("POST /pipelines/{rel...}", s.actPipeline)
	mux.HandleFunc("GET /api/openapi.json", s.apiOpenAPI)
	mux.HandleFunc("POST /api/runs/{sd}/{log}/{action}", s.apiActRun)
	mux.HandleFunc("POST /api/pipelines/{rel...}", s.apiStartRun)
	mux.HandleFunc("POST /hooks/{name}", s.postHook) // hooks.go: signed, not signed in
	mux.HandleFunc("GET /login", s.pageLogin)
	mux.HandleFunc("POST /login", s.postLogin)
	mux.Handle("GET /metrics", s.metricsHandler())
	return s.secure(mux)
}

// secure adds the security headers, turns away requests for a Host the
// server does not answer (421) and, when auth is on, requests without a
// user.
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if err := s.hostAllowed(r); err != nil {
			http.Error(w, err.Error(), http.StatusMisdirectedRequest)
			return
		}
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if a := s.opts.Auth; a.Enabled() && r.URL.Path != "/login" && !strings.HasPrefix(r.URL.Path, "/static/") && !isHook(r) {
			user, ok := a.user(r)
			if !ok {
				s.unauthorized(w, r)
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, user))
		}
		next.ServeHTTP(w, r)
	})
}

type userKey struct{}

// userOf returns the signed-in user of r, "" when there is none.
func userOf(r *http.Request) string {
	u, _ := r.Context().Value(userKey{}).(string)
	return u
}

func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request) {
	a := s.opts.Auth
	if len(a.Users) > 0 {
		w.Header().Set("WWW-Authenticate", `Basic realm="apollo", charset="UTF-8"`)
	}
	if len(a.Token) > 0 && r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") &&
		!strings.HasPrefix(r.URL.Path, "/sse/") && r.URL.Path != "/metrics" && len(a.Users) == 0 {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	http.Error(w, "sign in first: apollo serve needs a user here", http.StatusUnauthorized)
}

// runOf finds the run a request names by state folder and log name; only
// logs the index knows are served, so no path from a request reaches the
// file system.
func (s *Server) runOf(w http.ResponseWriter, r *http.Request) *run {
	sd, err := atoiStrict(r.PathValue("sd"))
	name := r.PathValue("log")
	if err == nil && sd >= 0 && sd < len(s.dirs) {
		if _, _, _, ok := statedir.ParseLogName(name); ok && filepath.Base(name) == name {
			if run := s.ix.get(runKey{sd, name}); run != nil {
				return run
			}
		}
	}
	s.notFound(w, r, "no such run")
	return nil
}

func atoiStrict(s string) (int, error) {
	if s == "" || len(s) > 6 || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("not a number")
	}
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n, nil
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request, msg string) {
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": msg})
		return
	}
	w.WriteHeader(http.StatusNotFound)
	s.render(w, r, "error", page{Title: "not found", Error: msg})
}

// readOnly says why state folder sd cannot be written, "" when it can.
func (s *Server) readOnly(sd int) string {
	if s.isHub(sd) {
		return hubReadOnly
	}
	if sd >= 0 && sd < len(s.opts.ReadOnly) {
		return s.opts.ReadOnly[sd]
	}
	return ""
}

// isHub reports whether state folder sd is the copy of the hub's logs.
func (s *Server) isHub(sd int) bool { return s.opts.Hub != nil && sd == len(s.dirs)-1 }

// dirName is how pages and metrics name state folder sd: its path, or the
// hub's label.
func (s *Server) dirName(sd int) string {
	if s.isHub(sd) {
		return s.opts.Hub.Label
	}
	return s.dirs[sd].Root
}

// readOnlyNote is what every page says of the read-only state folders, ""
// when there are none.
func (s *Server) readOnlyNote() string {
	var ro []string
	for sd := range s.dirs {
		if why := s.readOnly(sd); why != "" && !s.isHub(sd) {
			ro = append(ro, s.dirName(sd)+" ("+why+")")
		}
	}
	note := ""
	if len(ro) > 0 {
		note = "read-only: state folder " + strings.Join(ro, ", ") + ": its runs are shown as they are; " +
			"no schedule runs and no intervention is taken there"
	}
	if s.opts.Hub != nil {
		if note != "" {
			note += ". "
		}
		note += "The runs of " + s.opts.Hub.Label + " are shown from the hub, as their coordinators write them; " +
			"they take no intervention here"
	}
	return note
}

// Close saves the index cache.
func (s *Server) Close() { s.ix.save() }

// DescribeAuth says, for serve's start-up line, who may sign in.
func (s *Server) DescribeAuth() string {
	a := s.opts.Auth
	switch {
	case len(a.Token) > 0 && len(a.Users) > 0:
		return fmt.Sprintf("token or %d user(s)", len(a.Users))
	case len(a.Token) > 0:
		return "token"
	case len(a.Users) > 0:
		return fmt.Sprintf("%d user(s)", len(a.Users))
	}
	return "none (read-only)"
}
