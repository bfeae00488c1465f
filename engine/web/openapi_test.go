package web

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"
)

// TestOpenAPI: /api/openapi.json is a valid OpenAPI 3 document, and the
// live answers of every /api route, successes and refusals, match it.
func TestOpenAPI(t *testing.T) {
	h, jobs, token := apiServer(t)
	code, body := h.get(t, "/api/openapi.json", "Authorization", "Bearer "+token)
	if code != 200 {
		t.Fatalf("GET /api/openapi.json = %d", code)
	}
	ctx := context.Background()
	doc, err := openapi3.NewLoader().LoadFromData([]byte(body))
	if err != nil {
		t.Fatalf("load the document: %v", err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("the document is not valid OpenAPI 3: %v", err)
	}
	doc.Servers = openapi3.Servers{{URL: h.http.URL}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	log := "/api/runs/0/" + logName(t, h.dir, "bad")
	covered := map[string]bool{}
	check := func(method, path, reqBody string, wantCode int) {
		t.Helper()
		req, _ := http.NewRequest(method, h.http.URL+path, strings.NewReader(reqBody))
		req.Header.Set("Authorization", "Bearer "+token)
		if method == "POST" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != wantCode {
			t.Errorf("%s %s = %d %s, want %d", method, path, res.StatusCode, got, wantCode)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Errorf("%s %s: not in the document: %v", method, path, err)
			return
		}
		covered[method+" "+route.Path] = true
		req.Body = io.NopCloser(strings.NewReader(reqBody))
		in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		if wantCode < 400 {
			if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
				t.Errorf("%s %s: the request does not match the document: %v", method, path, err)
			}
		}
		if err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{RequestValidationInput: in,
			Status: res.StatusCode, Header: res.Header, Body: io.NopCloser(bytes.NewReader(got))}); err != nil {
			t.Errorf("%s %s = %d: the answer does not match the document: %v\n%s", method, path, res.StatusCode, err, got)
		}
	}
	check("GET", "/api/openapi.json", "", 200)
	check("GET", "/api/runs", "", 200)
	check("GET", "/api/runs?status=failed", "", 200)
	check("GET", log, "", 200)
	check("GET", "/api/runs/0/task_nope_1.jsonl", "", 404)
	check("GET", log+"/timeline", "", 200)
	check("GET", log+"/events", "", 200)
	check("GET", log+"/steps/fetch/1", "", 404)
	check("GET", "/api/pipelines", "", 200)
	check("GET", "/api/schedule", "", 200)
	check("POST", "/api/pipelines/demo.yaml/runs", `{"task_date":"2026-12-05","vars":{"region":"eu"}}`, 201)
	<-jobs
	check("POST", "/api/pipelines/demo.yaml/runs", `{"task_id":"-rf"}`, 400)
	check("POST", "/api/pipelines/nope.yaml/runs", `{}`, 404)
	check("POST", log+"/retry", `{"target":"fetch","why":"input fixed"}`, 200)
	check("POST", log+"/skip", `{"target":"x","why":"not needed"}`, 200)
	check("POST", log+"/stop", `{"why":"enough"}`, 422)
	check("POST", log+"/retry", `{"target":"fetch"}`, 400)
	for _, p := range doc.Paths.InMatchingOrder() {
		for method := range doc.Paths.Value(p).Operations() {
			if !covered[method+" "+p] {
				t.Errorf("%s %s: no live answer checked", method, p)
			}
		}
	}
}
