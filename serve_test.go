package main

import (
	"context"
	"fmt"
	"html"
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
		Condition: func(cond string) (bool, error) {
			if cond == "romount" {
				return canROMount(), nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
		Setup: func(env *testscript.Env) error {
			env.Setenv("APOLLO_KILL_GRACE", "500ms")
			env.Setenv("NO_COLOR", "1")
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"ports":       cmdPorts,
			"http":        cmdHTTP,
			"waithttp":    cmdWaitHTTP,
			"followlinks": cmdFollowLinks,
			"romount":     cmdROMount,
			"setmatch":    cmdSetMatch,
			"hook":        cmdHook,     // serve_hooks_test.go
			"postjson":    cmdPostJSON, // serve_hooks_test.go
			"waithub":     cmdWaitHub,
		},
	})
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// cmdHTTP sends a request and prints the status and the body on stdout:
//
//	http [-token FILE] [-host HOST] GET URL
//	http [-token FILE] [-host HOST] POST URL PAGE k=v...   (the CSRF token is read from PAGE)
//	http [-token FILE] [-host HOST] [-header K=V]... -json BODY POST URL
//
// -host sends HOST as the Host header (as a browser does for a name that
// resolves to the server's address). It fails on a status of 400 or more,
// unless negated.
func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	token, host, jsonBody := "", "", ""
	var headers []string
	for len(args) > 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-token":
			token = strings.TrimSpace(ts.ReadFile(args[1]))
		case "-host":
			host = args[1]
		case "-json":
			jsonBody = args[1]
		case "-header":
			headers = append(headers, args[1])
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
		for _, kv := range headers {
			k, v, _ := strings.Cut(kv, "=")
			req.Header.Set(k, v)
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
		if jsonBody != "" {
			req, _ = http.NewRequest("POST", args[1], strings.NewReader(jsonBody))
			req.Header.Set("Content-Type", "application/json")
			break
		}
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

// linkAttr finds what a page links to: href (also SVG's xlink:href), src,
// and data-sse, the live stream app.js opens.
var linkAttr = regexp.MustCompile(`\b(?:href|src|data-sse)="([^"]*)"`)

// cmdFollowLinks fetches a page, then every page it links to on the same
// server, and theirs, down to -depth levels (default 2): followlinks
// [-token FILE] [-depth N] URL. It prints each URL with its status and
// fails on any status of 400 or more. A live stream (text/event-stream)
// counts once its headers come.
func cmdFollowLinks(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("followlinks cannot be negated")
	}
	token, depth := "", 2
	for len(args) > 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-token":
			token = strings.TrimSpace(ts.ReadFile(args[1]))
		case "-depth":
			n, err := strconv.Atoi(args[1])
			ts.Check(err)
			depth = n
		default:
			ts.Fatalf("followlinks: unknown option %s", args[0])
		}
		args = args[2:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: followlinks [-token FILE] [-depth N] URL")
	}
	start, err := url.Parse(args[0])
	ts.Check(err)
	type item struct {
		u     *url.URL
		level int
		from  string
	}
	seen := map[string]bool{start.String(): true}
	queue := []item{{start, 0, ""}}
	var bad []string
	for len(queue) > 0 && len(seen) < 500 {
		it := queue[0]
		queue = queue[1:]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", it.u.String(), nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			cancel()
			ts.Fatalf("GET %s (linked from %s): %v", it.u, it.from, err)
		}
		body := ""
		if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			b, _ := io.ReadAll(res.Body)
			body = string(b)
		}
		res.Body.Close()
		cancel()
		fmt.Fprintf(ts.Stdout(), "%d %s\n", res.StatusCode, it.u.RequestURI())
		if res.StatusCode >= 400 {
			bad = append(bad, fmt.Sprintf("%d %s (linked from %s)", res.StatusCode, it.u.RequestURI(), it.from))
			continue
		}
		if it.level >= depth || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			continue
		}
		for _, m := range linkAttr.FindAllStringSubmatch(body, -1) {
			ref, err := it.u.Parse(html.UnescapeString(m[1]))
			if err != nil || ref.Host != start.Host || ref.Scheme != start.Scheme {
				continue // another site, or not a URL
			}
			ref.Fragment = ""
			if !seen[ref.String()] {
				seen[ref.String()] = true
				queue = append(queue, item{ref, it.level + 1, it.u.RequestURI()})
			}
		}
	}
	if len(bad) > 0 {
		ts.Fatalf("followlinks: %d link(s) do not answer:\n%s", len(bad), strings.Join(bad, "\n"))
	}
}

// cmdSetMatch sets an environment variable to the first group of a
// regular expression in a file (stdout: the last command's output):
// setmatch VAR FILE REGEXP.
func cmdSetMatch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: setmatch VAR FILE REGEXP")
	}
	m := regexp.MustCompile(args[2]).FindStringSubmatch(ts.ReadFile(args[1]))
	if len(m) < 2 {
		ts.Fatalf("setmatch: no match for %q in %s", args[2], args[1])
	}
	ts.Setenv(args[0], m[1])
}
