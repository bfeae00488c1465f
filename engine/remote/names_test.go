package remote

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
)

// TestSubjects: a task id's dots never split a subject or a key.
func TestSubjects(t *testing.T) {
	for got, want := range map[string]string{
		EventSubject("daily.2026-12-04"): "apollo.ev.daily=2026-12-04",
		StepSubject("gpu", "a.b", "s1"):  "apollo.step.gpu.a=b.s1",
		LeaseKey("a.b"):                  "task.a=b",
		LeaseKey("p~load.x"):             "task.p/load=x", // a sub-pipeline's task: '~' is no key character
		markerKey("p~load", "m"):         "p/load.bQ",
		PoolFilter("gpu"):                "apollo.step.gpu.>",
		AttemptID("t", "s", 2):           "t/s/2",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	if AttemptID("t", "s", 2) == AttemptID("t", "s", 3) {
		t.Error("two attempts share an id")
	}
	for pool, want := range map[string]bool{"gpu": true, "big_mem-2": true, "": false, "a.b": false, "a b": false, "a>": false} {
		if ValidPool(pool) != want {
			t.Errorf("ValidPool(%q) = %v, want %v", pool, !want, want)
		}
	}
}

// TestWorkerPublish: a worker of pool gpu may take gpu's work and report,
// never dispatch or take another pool's work.
func TestWorkerPublish(t *testing.T) {
	subs := WorkerPublish([]string{"gpu"})
	for _, want := range []string{"apollo.ev.>", "$JS.API.CONSUMER.MSG.NEXT." + StepsStream + "." + PoolConsumer("gpu")} {
		if !slices.Contains(subs, want) {
			t.Errorf("a gpu worker may not publish to %s", want)
		}
	}
	for _, s := range subs {
		if strings.HasPrefix(s, "apollo.step.") || strings.Contains(s, PoolConsumer(DefaultPool)) || strings.Contains(s, "STREAM.CREATE") {
			t.Errorf("a gpu worker may publish to %s", s)
		}
	}
}

// TestRefusedCredentials: what no retry can change is told apart from a
// hub that is down.
func TestRefusedCredentials(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nats.ErrAuthorization, true},
		{fmt.Errorf("connect: %w", nats.ErrAuthorization), true},
		{&net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}, true},
		{&tls.CertificateVerificationError{Err: errors.New("x509: unknown authority")}, true},
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, false},
		{nats.ErrNoServers, false},
		{nil, false},
	} {
		if got := refusedCredentials(c.err); got != c.want {
			t.Errorf("refusedCredentials(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	msg := (&CredentialsError{URLs: "nats://h:4222", Cause: nats.ErrAuthorization}).Error()
	if !strings.Contains(msg, "refused this client's credentials") || !strings.Contains(msg, "--token-file") {
		t.Errorf("CredentialsError says %q", msg)
	}
}
