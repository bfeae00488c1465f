package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"apollo/engine/pipeline"
	"apollo/engine/textfmt"
	"apollo/engine/usage"
)

// A pipeline's secrets are read when a run starts — from apollo's
// environment, a file, or a command — and given to each step in its
// environment (ctx.secrets in Lua). They are never written: records,
// output files and what apollo prints have them, and the values of
// secret_vars, masked as ***. The input digest holds a hash of them, so a
// changed secret changes it (docs/spec.md §2.11).

// secretTimeout bounds a secret's command.
const secretTimeout = 30 * time.Second

// readSecrets reads the pipeline's secrets.
func readSecrets(ctx context.Context, p *pipeline.Pipeline, workdir string) (map[string]string, error) {
	if len(p.Secrets) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(p.Secrets))
	for _, s := range p.Secrets {
		v, err := readSecret(ctx, p, s, workdir)
		if err != nil {
			return nil, usage.Errorf("secret %s: %v", s.Name, err)
		}
		out[s.Name] = v
	}
	return out, nil
}

func readSecret(ctx context.Context, p *pipeline.Pipeline, s pipeline.Secret, workdir string) (string, error) {
	switch {
	case s.Env != "":
		if v, ok := os.LookupEnv(s.Env); ok {
			return v, nil
		}
		// A .env file is where a token is kept: the value is taken as
		// written there, and is now a secret, masked like any.
		if v, ok := p.Defaults.EnvFile[s.Env]; ok {
			return v, nil
		}
		return "", fmt.Errorf("apollo's environment has no %s, nor has an env_file: of the pipeline; set it before apollo run", s.Env)
	case s.File != "":
		path := s.File
		if !filepath.IsAbs(path) {
			path = filepath.Join(p.Dir, path)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("read %s: %w", s.File, err)
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
	ctx, cancel := context.WithTimeout(ctx, secretTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", s.Command)
	cmd.Dir = workdir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		// stderr may hold the secret: say only that it failed.
		return "", fmt.Errorf("its command failed (%v); run it by hand to see why", err)
	}
	return strings.TrimRight(stdout.String(), "\r\n"), nil
}

// masker masks the secrets and the secret vars' values, raw and as JSON
// writes them (a record's output holds JSON).
func masker(t *task, secrets map[string]string) *textfmt.Masker {
	var values []string
	add := func(v string) {
		values = append(values, v)
		if q, err := json.Marshal(v); err == nil {
			values = append(values, string(q[1:len(q)-1]))
		}
	}
	for _, name := range t.p.SecretVars {
		add(t.vars[name])
	}
	for _, name := range slices.Sorted(maps.Keys(secrets)) {
		add(secrets[name])
	}
	for _, s := range t.p.Steps { // the items of a secret var, one by one
		if s.SecretItem {
			for _, k := range slices.Sorted(maps.Keys(s.Item)) {
				add(s.Item[k])
			}
		}
	}
	return textfmt.NewMasker(values...)
}

// shownVars are the task's vars as records show them: secret vars masked.
func shownVars(t *task) map[string]string {
	if len(t.p.SecretVars) == 0 {
		return t.vars
	}
	out := maps.Clone(t.vars)
	for _, name := range t.p.SecretVars {
		if _, ok := out[name]; ok {
			out[name] = textfmt.Masked
		}
	}
	return out
}

// secretsDigest is a hash of the secrets, for the input digest: it changes
// when one does, and tells nothing of them.
func secretsDigest(secrets map[string]string) string {
	if len(secrets) == 0 {
		return ""
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		fmt.Fprintf(&b, "%s=%d:%s\n", k, len(secrets[k]), secrets[k])
	}
	return sha256Hex([]byte(b.String()))
}
