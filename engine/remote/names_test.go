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
		EventSubject("gpu", "daily.2026-12-04"):  "apollo.ev.gpu.daily=2026-12-04",
		TaskEvents("a.b"):                        "apollo.ev.*.a=b",
		SubjectPool("apollo.ev.gpu.a=b"):         "gpu",
		SubjectPool("apollo.out.cpu.a=b"):        "cpu",
		SubjectPool("apollo.step.gpu.a=b.s"):     "",
		DispatchID("r1", "t", "s", 2):            "r1/t/s/2",
		StepSubject("gpu", "a.b", "s1"):          "apollo.step.gpu.a=b.s1",
		LeaseKey("a.b"):                          "task.a=b",
		PoolFilter("gpu"):                        "apollo.step.gpu.>",
		ContainerStepSubject("gpu", "a.b", "s1"): "apollo.step.gpu~image.a=b.s1",
		ContainerPoolFilter("gpu"):               "apollo.step.gpu~image.>",
		AttemptID("t", "s", 2):                   "t/s/2",
		LeaseKey("p~load.x"):                     "task.p/load=x", // a sub-pipeline's task: '~' is no key character
		markerKey("gpu", "p~load", "m"):          "gpu.p/load.bQ",
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

// TestReportIDs: the dedup ids of a worker's events and output pieces hold
// the run's id, as its dispatch's does: a new run's attempt of the same
// number is never taken by the hub for a duplicate of an earlier run's.
func TestReportIDs(t *testing.T) {
	for _, typ := range []string{EventStarted, EventEnd, EventLost, EventMarker} {
		a := &Event{Type: typ, Run: "r1", Task: "t", Step: "s", Attempt: 0, Worker: "w"}
		b := *a
		b.Run = "r2"
		if a.MsgID() == b.MsgID() || !strings.HasPrefix(a.MsgID(), DispatchID("r1", "t", "s", 0)+"/") {
			t.Errorf("%s: ids %q and %q of two runs", typ, a.MsgID(), b.MsgID())
		}
	}
	a := &Output{Run: "r1", Task: "t", Step: "s", Offset: 10}
	b := *a
	b.Run = "r2"
	if a.MsgID() == b.MsgID() || !strings.HasPrefix(a.MsgID(), DispatchID("r1", "t", "s", 0)+"/") {
		t.Errorf("output ids %q and %q of two runs", a.MsgID(), b.MsgID())
	}
}

// TestWorkerPublish: a worker of pool gpu may take gpu's work, report for
// gpu and keep gpu's markers, never dispatch, report for another pool, touch
// its markers or take its work, nor read another client's replies.
func TestWorkerPublish(t *testing.T) {
	subs := WorkerPublish([]string{"gpu"})
	for _, want := range []string{"apollo.ev.gpu.>", "apollo.out.gpu.>", "$KV." + IdemBucket + ".gpu.>",
		"$JS.API.CONSUMER.MSG.NEXT." + StepsStream + "." + PoolConsumer("gpu"),
		"$JS.API.CONSUMER.CREATE." + StepsStream + "." + PoolConsumer("gpu") + ".apollo.step.gpu.>"} {
		if !slices.Contains(subs, want) {
			t.Errorf("a gpu worker may not publish to %s", want)
		}
	}
	for _, s := range subs {
		if strings.HasPrefix(s, "apollo.step.") || strings.Contains(s, PoolConsumer(DefaultPool)) || strings.Contains(s, "STREAM.CREATE") ||
			strings.Contains(s, "."+DefaultPool+".") || s == "apollo.ev.>" || s == "$KV."+IdemBucket+".>" ||
			strings.Contains(s, "MSG.GET") || s == "$JS.API.CONSUMER.CREATE."+StepsStream+"."+PoolConsumer("gpu") ||
			strings.HasSuffix(s, PoolConsumer("gpu")+".>") && strings.Contains(s, "CONSUMER.CREATE") {
			t.Errorf("a gpu worker may publish to %s", s)
		}
	}
	sub := WorkerSubscribe("UKEY")
	if slices.Contains(sub, "_INBOX.>") || !slices.Contains(sub, "_INBOX.UKEY.>") {
		t.Errorf("a worker may subscribe to %v: want its own replies only", sub)
	}
}

// TestAttemptSecret: each dispatch has its own secret, which only the run's
// key gives.
func TestAttemptSecret(t *testing.T) {
	k1, k2 := []byte("0123456789abcdef0123456789abcdef"), []byte("fedcba9876543210fedcba9876543210")
	a := AttemptSecret(k1, DispatchID("r", "t", "s", 0))
	if a != AttemptSecret(k1, DispatchID("r", "t", "s", 0)) || !SameSecret(a, AttemptSecret(k1, DispatchID("r", "t", "s", 0))) {
		t.Error("a dispatch's secret is not stable")
	}
	for _, other := range []string{AttemptSecret(k1, DispatchID("r", "t", "s", 1)), AttemptSecret(k1, DispatchID("r2", "t", "s", 0)),
		AttemptSecret(k2, DispatchID("r", "t", "s", 0)), ""} {
		if SameSecret(a, other) {
			t.Errorf("secret %q taken for %q", other, a)
		}
	}
	if SameSecret("", "") {
		t.Error("no secret taken for a secret")
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
