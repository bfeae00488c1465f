package cron

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"apollo/engine/pipeline"
)

// Webhook triggers: POST /hooks/NAME on apollo serve. A delivery is
// signed as GitHub signs one — X-Hub-Signature-256: sha256=<hex of the
// HMAC-SHA256 of the body under the secret> — and names itself with
// X-GitHub-Delivery or X-Apollo-Delivery; the pipeline's webhook: entry
// names the secret (an entry of its secrets:) and maps payload fields to
// vars. A delivery id already decided is a replay: it starts nothing.

// Headers of a webhook delivery.
const (
	HeaderSignature = "X-Hub-Signature-256"
	HeaderDelivery  = "X-Apollo-Delivery"
	headerGitHubID  = "X-GitHub-Delivery"
)

// MaxHookBody bounds a delivery's body.
const MaxHookBody = 1 << 20

// maxDeliveryID bounds a delivery id.
const maxDeliveryID = 200

// secretTimeout bounds a secret's command.
const secretTimeout = 30 * time.Second

// HookResult is what a delivery did: its HTTP status and the JSON body of
// the answer.
type HookResult struct {
	Status int
	Body   map[string]any
}

func hookError(status int, msg string) HookResult {
	return HookResult{Status: status, Body: map[string]any{"error": msg}}
}

// hookPipe is a pipeline with a webhook: trigger.
type hookPipe struct {
	pipe Pipe
	t    pipeline.Trigger
}

// Hook handles a delivery of the webhook name with its headers and body:
// 404 when no pipeline declares it, 400 for a delivery without an id or
// with a payload the vars cannot be read from, 401 when its signature is
// not that of any pipeline's secret, 200 for a replay (nothing started),
// 202 with the queued runs otherwise.
func (s *Scheduler) Hook(ctx context.Context, name string, h http.Header, body []byte) HookResult {
	var hooks []hookPipe
	s.mu.Lock()
	for _, rel := range slices.Sorted(maps.Keys(s.pipes)) {
		p := s.pipes[rel].pipe
		for _, t := range p.Triggers {
			if t.Kind == pipeline.TriggerWebhook && t.Webhook == name {
				hooks = append(hooks, hookPipe{p, t})
			}
		}
	}
	s.mu.Unlock()
	if len(hooks) == 0 {
		return hookError(http.StatusNotFound, fmt.Sprintf("no pipeline declares the webhook %q", name))
	}
	sig, ok := strings.CutPrefix(h.Get(HeaderSignature), "sha256=")
	mac, err := hex.DecodeString(sig)
	if !ok || err != nil || len(mac) != sha256.Size {
		return hookError(http.StatusUnauthorized, HeaderSignature+" must be sha256=<hex of the HMAC-SHA256 of the body>")
	}
	var signed []hookPipe
	for _, hp := range hooks {
		secret, err := readSecret(ctx, hp.t)
		if err == nil && secret == "" {
			err = errors.New("its value is empty: anyone could sign with it")
		}
		if err != nil {
			s.opts.Logf("apollo serve: webhook %s of %s: secret %s: %v", name, hp.pipe.Rel, hp.t.Secret, err)
			continue
		}
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(body)
		if hmac.Equal(m.Sum(nil), mac) {
			signed = append(signed, hp)
		}
	}
	if len(signed) == 0 {
		return hookError(http.StatusUnauthorized, "the signature does not match: sign the body with the pipeline's secret")
	}
	id := h.Get(HeaderDelivery)
	if id == "" {
		id = h.Get(headerGitHubID)
	}
	if id == "" || len(id) > maxDeliveryID || strings.ContainsFunc(id, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return hookError(http.StatusBadRequest, fmt.Sprintf("a delivery needs an id: %s or %s, up to %d printable characters; "+
			"a delivery sent again with the same id is not run twice", HeaderDelivery, headerGitHubID, maxDeliveryID))
	}
	var payload any
	var payloadErr error
	if len(bytes.TrimSpace(body)) > 0 {
		payloadErr = json.Unmarshal(body, &payload)
	}
	type plan struct {
		hp   hookPipe
		vars map[string]string
	}
	var plans []plan
	for _, hp := range signed {
		vars := map[string]string{"trigger.kind": TriggerWebhook, "trigger.webhook": name, "trigger.delivery": id}
		for _, v := range slices.Sorted(maps.Keys(hp.t.Vars)) {
			if payloadErr != nil {
				return hookError(http.StatusBadRequest, "the body is not JSON, so its fields cannot be read: "+payloadErr.Error())
			}
			x, ok := hp.t.Vars[v].Lookup(payload)
			if !ok || x == nil {
				continue // the var keeps its default
			}
			text, isText := x.(string)
			if !isText {
				b, _ := json.Marshal(x)
				text = string(b)
			}
			if len(text) > maxTriggerVar || !noNUL(text) {
				return hookError(http.StatusBadRequest, fmt.Sprintf("the field %s for var %s is over %d bytes or holds a NUL byte",
					hp.t.Vars[v].Expr, v, maxTriggerVar))
			}
			vars[v] = text
		}
		plans = append(plans, plan{hp, vars})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var queued []map[string]string
	replayed := 0
	for _, pl := range plans {
		e, ok := s.fireTrigger(pl.hp.pipe, TriggerWebhook, "webhook:"+name+":"+id, "webhook "+name, pl.vars)
		switch {
		case ok:
			queued = append(queued, map[string]string{"pipeline": e.Pipeline, "task_id": e.TaskID})
		case s.fired[firedKey(pl.hp.pipe.Rel, "webhook:"+name+":"+id)]:
			replayed++
		default:
			return hookError(http.StatusServiceUnavailable, "the schedule log could not be written; send the delivery again")
		}
	}
	if len(queued) == 0 {
		return HookResult{Status: http.StatusOK, Body: map[string]any{"delivery": id, "replayed": true,
			"note": "this delivery id was handled before; nothing was started"}}
	}
	return HookResult{Status: http.StatusAccepted, Body: map[string]any{"delivery": id, "queued": queued}}
}

// readSecret reads the value of the secret a webhook trigger names: from
// apollo serve's environment (or, failing it, the pipeline's env_file:
// files), a file, or a command's standard output.
func readSecret(ctx context.Context, t pipeline.Trigger) (string, error) {
	src := t.SecretFrom
	switch {
	case src.Env != "":
		if v, ok := os.LookupEnv(src.Env); ok {
			return v, nil
		}
		if v, ok := t.EnvFile[src.Env]; ok {
			return v, nil
		}
		return "", fmt.Errorf("apollo serve's environment has no %s, nor has an env_file: of the pipeline", src.Env)
	case src.File != "":
		path := src.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(t.Dir, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", src.File, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	case src.Command != "":
		ctx, cancel := context.WithTimeout(ctx, secretTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", src.Command)
		cmd.Dir = t.Dir
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("its command failed (%v)", err) // its stderr may hold the secret
		}
		return strings.TrimRight(out.String(), "\r\n"), nil
	}
	return "", errors.New("it has no source")
}
