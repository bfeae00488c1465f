package stdlib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"apollo/luart"
)

func newServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Thing", "yes")
		w.Header().Add("Set-Cookie", "a=1")
		w.Header().Add("Set-Cookie", "b=2")
		fmt.Fprintf(w, "hello %s", r.URL.Query().Get("who"))
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		fmt.Fprintf(w, "%s %s ct=%s auth=%s body=%s", r.Method, r.URL.Path, r.Header.Get("Content-Type"), r.Header.Get("Authorization"), body)
	})
	mux.HandleFunc("/fail", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return srv
}

func TestHTTP(t *testing.T) {
	env := newFakeEnv(t)
	srv := newServer(t)
	tests := []struct {
		name, call, want string
	}{
		{"get", `http.get("` + srv.URL + `/hello?who=apollo")`, `{"status":200,"body":"hello apollo","thing":"yes","cookie":"a=1, b=2"}`},
		{"post", `http.post("` + srv.URL + `/echo", "{\"a\":1}", {headers = {["Content-Type"] = "application/json", Authorization = "Bearer t"}})`,
			`{"status":200,"body":"POST /echo ct=application/json auth=Bearer t body={\"a\":1}"}`},
		{"request", `http.request{method = "put", url = "` + srv.URL + `/echo", body = "x", timeout = 5}`, `{"status":200,"body":"PUT /echo ct= auth= body=x"}`},
		{"request defaults to get", `http.request{url = "` + srv.URL + `/echo"}`, `{"status":200,"body":"GET /echo ct= auth= body="}`},
		{"500 is returned", `http.get("` + srv.URL + `/fail")`, `{"status":500,"body":"broken\n"}`},
		{"404 is returned", `http.get("` + srv.URL + `/nope")`, `{"status":404,"body":"404 page not found\n"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustRun(t, env, `
				local http = require("apollo.http")
				local r = `+tt.call+`
				return {status = r.status, body = r.body, thing = r.headers["x-thing"], cookie = r.headers["set-cookie"]}
			`)
			if !jsonEqual(t, got, tt.want) {
				t.Errorf("%s = %v\nwant %s", tt.call, got, tt.want)
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	env := newFakeEnv(t)
	srv := newServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String() + "/x"
	ln.Close()
	for _, tt := range []struct {
		name, call string
		want       []string
	}{
		{"timeout", `http.get("` + srv.URL + `/slow", {timeout = 0.2})`, []string{"http.get", "GET " + srv.URL + "/slow", "timed out after 200ms"}},
		{"refused", `http.get("` + refused + `")`, []string{"http.get", refused, "refused"}},
		{"bad url", `http.get("ftp://x/y")`, []string{"http.get", "ftp://x/y", "http://"}},
		{"relative url", `http.get("/y")`, []string{"http.get", "must be absolute"}},
		{"no url", `http.request{}`, []string{"http.request", "url is required"}},
		{"request not a table", `http.request("x")`, []string{"http.request", "must be a table"}},
		{"bad timeout", `http.get("` + srv.URL + `", {timeout = 0})`, []string{"timeout must be a positive number"}},
		{"bad headers", `http.get("` + srv.URL + `", {headers = {X = {}}})`, []string{"headers.X must be a string"}},
		{"unknown option", `http.get("` + srv.URL + `", {header = {}})`, []string{"http.get", `unknown option "header" (the options are body, headers, method, timeout)`}},
		{"unknown request field", `http.request{url = "` + srv.URL + `", timout = 1}`, []string{"http.request", `unknown option "timout" (the options are body, headers, method, timeout, url)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, env, `local http = require("apollo.http"); `+tt.call, tt.want...)
		})
	}
}

// TestHTTPStepCancel: a request in flight ends when the step's context does.
func TestHTTPStepCancel(t *testing.T) {
	env := newFakeEnv(t)
	started := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-r.Context().Done()
	}))
	defer srv.Close()
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-started
		cancel()
	}()
	_, err := runLuaCtx(t, ctx, env, `require("apollo.http").get("`+srv.URL+`", {timeout = 60})`)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("run = %v, want the state stopped by the cancellation", err)
	}
	var se *luart.StopError
	if !errors.As(err, &se) && !strings.Contains(err.Error(), "stopped") {
		t.Errorf("run = %T %v", err, err)
	}
}
