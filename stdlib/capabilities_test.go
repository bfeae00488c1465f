package stdlib

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// grantedEnv is a fakeEnv with a step's allow: list.
type grantedEnv struct {
	*fakeEnv
	allow []string
	hosts []string // nil: any
}

func (e *grantedEnv) Allowed(c string) bool { return slices.Contains(e.allow, c) }

func (e *grantedEnv) AllowHost(h string) bool { return e.hosts == nil || slices.Contains(e.hosts, h) }

// TestCapabilitiesDenied: a step not granted exec or http cannot require
// them, and the error says how to grant them; fs and the rest need no grant.
func TestCapabilitiesDenied(t *testing.T) {
	env := &grantedEnv{fakeEnv: newFakeEnv(t)}
	for _, c := range []string{"exec", "http"} {
		wantError(t, env, `require("apollo.`+c+`")`, "apollo."+c+" is not allowed for this step", "allow: ["+c+"]")
	}
	got := mustRun(t, env, `
		require("apollo.fs").write("f.txt", "x")
		require("apollo.json"); require("apollo.log"); require("apollo.digest"); require("apollo.idem")
		return require("apollo.fs").read("f.txt")`)
	if got != "x" {
		t.Errorf("fs with no grants = %v, want x", got)
	}
	env.allow = []string{"exec"}
	if got := mustRun(t, env, `return require("apollo.exec").run({"echo", "hi"}).stdout`); got != "hi\n" {
		t.Errorf("exec when allowed: stdout = %q", got)
	}
	wantError(t, env, `require("apollo.http")`, "apollo.http is not allowed")
}

// TestHTTPHostList: with a host list, apollo.http reaches only those hosts,
// and a redirect to another host is refused rather than followed.
func TestHTTPHostList(t *testing.T) {
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("elsewhere"))
	}))
	defer elsewhere.Close()
	// Served on 127.0.0.1; the redirect names localhost, another host.
	other := strings.Replace(elsewhere.URL, "127.0.0.1", "localhost", 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/away" {
			http.Redirect(w, r, other+"/x", http.StatusFound)
			return
		}
		w.Write([]byte("home"))
	}))
	defer srv.Close()
	env := &grantedEnv{fakeEnv: newFakeEnv(t), allow: []string{"http"}, hosts: []string{"127.0.0.1"}}
	if got := mustRun(t, env, `return require("apollo.http").get("`+srv.URL+`/").body`); got != "home" {
		t.Errorf("listed host: body = %v, want home", got)
	}
	wantError(t, env, `require("apollo.http").get("`+other+`/x")`, "host localhost is not in the step's allow")
	wantError(t, env, `require("apollo.http").get("`+srv.URL+`/away")`, "redirected to host localhost")
	env.hosts = nil
	if got := mustRun(t, env, `return require("apollo.http").get("`+srv.URL+`/away").body`); got != "elsewhere" {
		t.Errorf("any host: redirect body = %v, want elsewhere", got)
	}
}
