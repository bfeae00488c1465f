package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/rogpeppe/go-internal/testscript"
)

// cmdHookSink starts a webhook receiver on 127.0.0.1 for the rest of the
// script: hooksink [-status CODE] NAME. $NAME is its URL; each request's
// body is saved as NAME/N.json (N from 1) and its X-Apollo-Notification-Id
// header as NAME/N.id. With -status it answers CODE (a receiver that is
// down is one at a closed port: use http://127.0.0.1:1).
func cmdHookSink(ts *testscript.TestScript, neg bool, args []string) {
	status := http.StatusOK
	if len(args) == 3 && args[0] == "-status" {
		fmt.Sscan(args[1], &status)
		args = args[2:]
	}
	if len(args) != 1 {
		ts.Fatalf("usage: hooksink [-status CODE] NAME")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		n++
		k := n
		mu.Unlock()
		var v any
		if r.Header.Get("Content-Type") != "application/json" || json.Unmarshal(body, &v) != nil {
			body = []byte("not JSON: " + string(body))
		}
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.id", k)), []byte(r.Header.Get("X-Apollo-Notification-Id")+"\n"), 0o644)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.json", k)), append(body, '\n'), 0o644)
		w.WriteHeader(status)
	}))
	ts.Defer(srv.Close)
	ts.Setenv(args[0], srv.URL)
}

// cmdHooks prints what a hooksink received, one line a request, in order:
// hooks NAME FIELD... prints those fields of each JSON body, the lines
// sorted.
func cmdHooks(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: hooks NAME FIELD...")
	}
	files, _ := filepath.Glob(ts.MkAbs(filepath.Join(args[0], "*.json")))
	sort.Slice(files, func(i, j int) bool { return num(files[i]) < num(files[j]) })
	var lines []string
	for _, f := range files {
		var m map[string]any
		data, _ := os.ReadFile(f)
		if err := json.Unmarshal(data, &m); err != nil {
			ts.Fatalf("%s: %v: %s", f, err, data)
		}
		var parts []string
		for _, k := range args[1:] {
			v, ok := m[k]
			if !ok {
				parts = append(parts, k+"=<none>")
				continue
			}
			parts = append(parts, fmt.Sprintf("%s=%v", k, v))
		}
		lines = append(lines, strings.Join(parts, " "))
	}
	sort.Strings(lines) // delivery runs in parallel: arrival order is not fixed
	for _, l := range lines {
		fmt.Fprintln(ts.Stdout(), l)
	}
}

func num(path string) int {
	var n int
	fmt.Sscan(strings.TrimSuffix(filepath.Base(path), filepath.Ext(path)), &n)
	return n
}

// cmdSMTPSink starts an SMTP server on 127.0.0.1 (go-smtp, no TLS) that
// takes AUTH PLAIN of USER and PASS only: smtpsink NAME USER PASS. $NAME
// is its HOST:PORT; each message is saved as NAME/N.eml, after a first
// line "auth=USER from=FROM to=TO,...".
func cmdSMTPSink(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: smtpsink NAME USER PASS")
	}
	dir := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(dir, 0o755))
	be := &sinkBackend{dir: dir, user: args[1], pass: args[2]}
	s := smtp.NewServer(be)
	s.Domain = "localhost"
	s.AllowInsecureAuth = true
	l, err := net.Listen("tcp", "127.0.0.1:0")
	ts.Check(err)
	go s.Serve(l)
	ts.Defer(func() { s.Close() })
	ts.Setenv(args[0], l.Addr().String())
}

type sinkBackend struct {
	dir, user, pass string
	mu              sync.Mutex
	n               int
}

func (b *sinkBackend) NewSession(*smtp.Conn) (smtp.Session, error) { return &sinkSession{b: b}, nil }

type sinkSession struct {
	b      *sinkBackend
	authed string
	from   string
	to     []string
}

func (s *sinkSession) AuthMechanisms() []string { return []string{sasl.Plain} }

func (s *sinkSession) Auth(mech string) (sasl.Server, error) {
	return sasl.NewPlainServer(func(identity, user, pass string) error {
		if user != s.b.user || pass != s.b.pass {
			return errors.New("bad credentials")
		}
		s.authed = user
		return nil
	}), nil
}

func (s *sinkSession) Mail(from string, _ *smtp.MailOptions) error {
	if s.authed == "" {
		return smtp.ErrAuthRequired
	}
	s.from = from
	return nil
}

func (s *sinkSession) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.to = append(s.to, to)
	return nil
}

func (s *sinkSession) Data(r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.b.mu.Lock()
	s.b.n++
	k := s.b.n
	s.b.mu.Unlock()
	head := fmt.Sprintf("auth=%s from=%s to=%s\n", s.authed, s.from, strings.Join(s.to, ","))
	return os.WriteFile(filepath.Join(s.b.dir, fmt.Sprintf("%d.eml", k)), append([]byte(head), data...), 0o644)
}

func (s *sinkSession) Reset()        { s.from, s.to = "", nil }
func (s *sinkSession) Logout() error { return nil }
