package main

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestServeScripts runs the end-to-end scripts of apollo serve in
// testdata/serve: the real binary serving on a free loopback port, driven
// over HTTP, starting real apollo run children.
func TestServeScripts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and child runs; skipped with -short")
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/serve",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			env.Setenv("APOLLO_KILL_GRACE", "500ms")
			env.Setenv("NO_COLOR", "1")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"ports":    cmdPorts,
			"http":     cmdHTTP,
			"waithttp": cmdWaitHTTP,
		},
	})
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// cmdHTTP sends a request and prints the status and the body on stdout:
//
//	http [-token FILE] [-host HOST] GET URL
//	http [-token FILE] [-host HOST] POST URL PAGE k=v...   (the CSRF token is read from PAGE)
//
// -host sends HOST as the Host header (as a browser does for a name that
// resolves to the server's address). It fails on a status of 400 or more,
// unless negated.
func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	token, host := "", ""
	for len(args) > 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-token":
			token = strings.TrimSpace(ts.ReadFile(args[1]))
		case "-host":
			host = args[1]
		default:
			ts.Fatalf("http: unknown option %s", args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 {
		ts.Fatalf("usage: http [-token FILE] [-host HOST] GET|POST URL [PAGE k=v...]")
	}
	do := func(req *http.Request) (int, string) {
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if host != "" {
			req.Host = host
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		ts.Check(err)
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	var req *http.Request
	switch args[0] {
	case "GET":
		req, _ = http.NewRequest("GET", args[1], nil)
	case "POST":
		form := url.Values{}
		if len(args) > 2 {
			if _, page := do(mustRequest(ts, "GET", args[2])); csrfField.MatchString(page) {
				form.Set("csrf", csrfField.FindStringSubmatch(page)[1])
			}
			for _, kv := range args[3:] {
				k, v, _ := strings.Cut(kv, "=")
				form.Set(k, v)
			}
		}
		req, _ = http.NewRequest("POST", args[1], strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "application/json")
	default:
		ts.Fatalf("http: unknown method %s", args[0])
	}
	code, body := do(req)
	ts.Stdout().Write([]byte(strconv.Itoa(code) + "\n" + body))
	if (code >= 400) != neg {
		ts.Fatalf("http %s %s: status %d\n%s", args[0], args[1], code, body)
	}
}

func mustRequest(ts *testscript.TestScript, method, u string) *http.Request {
	req, err := http.NewRequest(method, u, nil)
	ts.Check(err)
	return req
}

// cmdWaitHTTP waits (up to 30s, or the -wait duration) until GET URL
// answers and its body matches a regular expression:
// waithttp [-token FILE] [-wait DURATION] URL [REGEXP].
func cmdWaitHTTP(ts *testscript.TestScript, neg bool, args []string) {
	token, wait := "", 30*time.Second
	for len(args) > 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-token":
			token = strings.TrimSpace(ts.ReadFile(args[1]))
		case "-wait":
			d, err := time.ParseDuration(args[1])
			ts.Check(err)
			wait = d
		default:
			ts.Fatalf("waithttp: unknown option %s", args[0])
		}
		args = args[2:]
	}
	if len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: waithttp [-token FILE] [-wait DURATION] URL [REGEXP]")
	}
	re := regexp.MustCompile(".")
	if len(args) == 2 {
		re = regexp.MustCompile(args[1])
	}
	last := ""
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		req, _ := http.NewRequest("GET", args[0], nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			last = err.Error()
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if last = string(body); re.MatchString(last) {
			return
		}
	}
	ts.Fatalf("waithttp %s: no answer matching %q within %s; last:\n%s", args[0], re, wait, last)
}
