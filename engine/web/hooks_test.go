package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHookRoute: POST /hooks/NAME needs no signed-in user but a good
// signature, keeps the Host rule, and refuses a body over 1 MiB before the
// scheduler sees it.
func TestHookRoute(t *testing.T) {
	h, jobs, _ := apiServer(t)
	t.Setenv("APOLLO_WEB_HOOK_SECRET", "hook-secret")
	pipes := h.srv.opts.Pipelines
	os.WriteFile(filepath.Join(pipes, "hooked.yaml"), []byte("task_name: hooked\nsecrets: [APOLLO_WEB_HOOK_SECRET]\n"+
		"triggers: [{webhook: deploy, secret: APOLLO_WEB_HOOK_SECRET}]\nsteps: [{id: a, command: 'echo {{trigger.delivery}}'}]\n"), 0o644)
	h.srv.loadPipelines()
	post := func(host, body, secret string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", h.http.URL+"/hooks/deploy", strings.NewReader(body))
		if host != "" {
			req.Host = host
		}
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(body))
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
		req.Header.Set("X-Apollo-Delivery", "d-1")
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := post("", `{}`, "wrong"); code != 401 {
		t.Errorf("bad signature: %d %s", code, body)
	}
	if code, body := post("", strings.Repeat(" ", 1<<20+1), "hook-secret"); code != 413 {
		t.Errorf("a body over 1 MiB: %d %s", code, body)
	}
	h.srv.opts.AllowedHosts = []string{"apollo.example"} // the Host rule of every page
	if code, body := post("evil.example", `{}`, "hook-secret"); code != 421 {
		t.Errorf("another Host: %d %s", code, body)
	}
	if code, body := post("apollo.example", `{}`, "hook-secret"); code != 202 {
		t.Errorf("good delivery without a user: %d %s", code, body)
	}
	h.srv.opts.Scheduler.Tick()
	if j := <-jobs; j.Vars["trigger.delivery"] != "d-1" {
		t.Errorf("started %s with %v", j.TaskID, j.Vars)
	}
}
