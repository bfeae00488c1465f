package web

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"apollo/engine/statedir"
)

// The API for other systems: the same actions as the pages' forms, sent as
// JSON by a client that proves who it is on each request (a Bearer token or
// HTTP basic auth), so without the forms' CSRF token (docs/spec.md §9).

// openAPI is the OpenAPI 3 document of every /api route, served at
// /api/openapi.json.
//
//go:embed openapi.json
var openAPI []byte

func (s *Server) apiOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(openAPI)
}

type apiKey struct{}

// apiClient reports whether r is an API call that needs no CSRF token: it
// carries an Authorization header (the secure handler has checked it) and a
// JSON body, which no cross-site HTML form can send. A request carrying only
// a session cookie still needs the CSRF token.
func apiClient(r *http.Request) bool {
	if r.Header.Get("Authorization") == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// isAPI reports whether r was let in as an API call by apiRequest.
func isAPI(r *http.Request) bool { v, _ := r.Context().Value(apiKey{}).(bool); return v }

// apiRequest reads the JSON object of an API call into r's form values, so
// that the forms' handlers serve it, and marks r as an API call.
func (s *Server) apiRequest(w http.ResponseWriter, r *http.Request, form url.Values) *http.Request {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	r.Header.Set("Accept", "application/json")
	r.PostForm = form
	r.Form = form
	return r.WithContext(context.WithValue(r.Context(), apiKey{}, apiClient(r)))
}

// apiError answers a refused API call: JSON naming the field at fault.
func apiError(w http.ResponseWriter, code int, field, msg string) {
	body := map[string]string{"error": msg}
	if field != "" {
		body["field"] = field
	}
	writeJSON(w, code, body)
}

// apiActions maps the API's intervention names to the forms' actions.
var apiActions = map[string]string{"retry": "reset", "skip": "skip", "stop": "stop", "resume": "resume"}

// apiActRun is POST /api/runs/{sd}/{log}/{action}: retry, skip, stop or
// resume, with a JSON body {"why": ..., "target": step} (target for retry
// and skip).
func (s *Server) apiActRun(w http.ResponseWriter, r *http.Request) {
	action, ok := apiActions[r.PathValue("action")]
	if !ok {
		apiError(w, http.StatusNotFound, "", fmt.Sprintf("no action %q: retry, skip, stop or resume", r.PathValue("action")))
		return
	}
	var body struct {
		Why    string `json:"why"`
		Target string `json:"target"`
		Resume bool   `json:"resume"`
	}
	if !decodeJSON(w, r, &body) {
		return
	}
	form := url.Values{"action": {action}, "why": {body.Why}, "target": {body.Target}}
	if body.Resume {
		form.Set("resume", "1")
	}
	if body.Why == "" {
		apiError(w, http.StatusBadRequest, "why", "say why: the reason is kept in the log")
		return
	}
	if (action == "reset" || action == "skip") && body.Target == "" {
		apiError(w, http.StatusBadRequest, "target", "name the step to "+r.PathValue("action"))
		return
	}
	r = s.apiRequest(w, r, form)
	s.actRun(w, r)
}

// apiStartRun is POST /api/pipelines/{rel}/runs: start a run of a pipeline
// of the pipelines folder now, as the page's "run now" does, and answer 201
// with its task id.
func (s *Server) apiStartRun(w http.ResponseWriter, r *http.Request) {
	rel, ok := strings.CutSuffix(r.PathValue("rel"), "/runs")
	if !ok {
		apiError(w, http.StatusNotFound, "", "no such route: POST /api/pipelines/{pipeline}/runs starts a run")
		return
	}
	var body struct {
		Vars     map[string]string `json:"vars"`
		TaskDate string            `json:"task_date"`
		TaskID   string            `json:"task_id"`
		Fresh    bool              `json:"fresh"`
		Why      string            `json:"why"`
	}
	if !decodeJSON(w, r, &body) {
		return
	}
	for k := range body.Vars {
		// As apollo run --var name=value takes them; task_date has its field.
		if k == "" || strings.Contains(k, "=") || k == "task_date" {
			apiError(w, http.StatusBadRequest, "vars."+k, fmt.Sprintf("var %q: expected a name without = (task_date has its own field)", k))
			return
		}
	}
	if body.TaskID != "" {
		if err := statedir.ValidTaskID(body.TaskID); err != nil {
			apiError(w, http.StatusBadRequest, "task_id", err.Error())
			return
		}
	}
	if body.Why == "" {
		body.Why = "started through the API"
	}
	form := url.Values{"action": {"run"}, "date": {body.TaskDate}, "why": {body.Why}}
	if body.Fresh {
		form.Set("fresh", "1")
	}
	r = s.apiRequest(w, r, form)
	r.SetPathValue("rel", rel)
	key := r.Header.Get("Idempotency-Key")
	if key == "" || !isAPI(r) {
		s.startRun(w, r, body.TaskID, body.Vars, "")
		return
	}
	if len(key) > 255 {
		apiError(w, http.StatusBadRequest, "Idempotency-Key", "an Idempotency-Key is at most 255 characters")
		return
	}
	request, _ := json.Marshal(struct {
		Pipeline string
		Body     any
	}{rel, body})
	s.once(w, userOf(r), key, request, func(w http.ResponseWriter, entryKey string) {
		s.startRun(w, r, body.TaskID, body.Vars, entryKey)
	})
}

// decodeJSON reads r's body, one JSON object with known fields only.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "application/json" {
		apiError(w, http.StatusUnsupportedMediaType, "", "send a JSON body (Content-Type: application/json)")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		field := ""
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field = strings.Trim(f, `"`)
		}
		apiError(w, http.StatusBadRequest, field, "the body is not the JSON object expected: "+err.Error())
		return false
	}
	return true
}
