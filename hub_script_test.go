package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/rogpeppe/go-internal/testscript"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
	"apollo/eventlog"
)

// cmdPorts sets each named variable to a free loopback port: ports A B C.
func cmdPorts(ts *testscript.TestScript, neg bool, args []string) {
	ports, err := hubtest.FreePorts(len(args))
	if err != nil {
		ts.Fatalf("ports: %v", err)
	}
	for i, name := range args {
		ts.Setenv(name, strconv.Itoa(ports[i]))
	}
}

// cmdNKey makes a user NKey: nkey NAME writes its seed to NAME.seed and
// sets $NAME_PUB to its public key, for apollo hub --nkeys files.
func cmdNKey(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: nkey NAME")
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		ts.Fatalf("nkey: %v", err)
	}
	seed, err := kp.Seed()
	ts.Check(err)
	pub, err := kp.PublicKey()
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]+".seed"), seed, 0o600))
	ts.Setenv(args[0]+"_PUB", pub)
}

// cmdTLSCerts writes a CA (ca.pem), a certificate for a hub on 127.0.0.1
// (hub.pem, hub.key) and a client certificate (client.pem, client.key),
// all signed by the CA: tlscerts.
func cmdTLSCerts(ts *testscript.TestScript, neg bool, args []string) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ts.Check(err)
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "apollo test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	ts.Check(err)
	writePEM(ts, "ca.pem", "CERTIFICATE", caDER)
	for i, name := range []string{"hub", "client"} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		ts.Check(err)
		cert := &x509.Certificate{SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: name},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"}}
		der, err := x509.CreateCertificate(rand.Reader, cert, ca, &key.PublicKey, caKey)
		ts.Check(err)
		writePEM(ts, name+".pem", "CERTIFICATE", der)
		keyDER, err := x509.MarshalECPrivateKey(key)
		ts.Check(err)
		writePEM(ts, name+".key", "EC PRIVATE KEY", keyDER)
	}
}

func writePEM(ts *testscript.TestScript, name, kind string, der []byte) {
	ts.Check(os.WriteFile(ts.MkAbs(name), pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600))
}

// cmdWaitHub waits (up to 60 s: a new cluster elects its first leader in 4
// to 9 s) until the hub at URLS has its streams: waithub URLS [CREDENTIALS],
// where CREDENTIALS is a token file or an NKey seed (NAME.seed).
func cmdWaitHub(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 && len(args) != 2 {
		ts.Fatalf("usage: waithub URLS [CREDENTIALS]")
	}
	var auth remote.Auth
	switch {
	case len(args) == 1:
	case strings.HasSuffix(args[1], ".seed"):
		auth.NKeySeed = ts.MkAbs(args[1])
	default:
		auth.TokenFile = ts.MkAbs(args[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: args[0], Name: "waithub", Auth: auth, CallTimeout: time.Second, GiveUp: 60 * time.Second})
	if err != nil {
		ts.Fatalf("waithub: %v", err)
	}
	defer c.Close()
	for _, s := range []string{remote.StepsStream, remote.EventsStream, remote.OutputStream, "KV_" + remote.LeaseBucket, "KV_" + remote.IdemBucket} {
		for {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			_, err := c.JS.Stream(cctx, s)
			ccancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				ts.Fatalf("waithub: stream %s not there within 60s: %v", s, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// cmdHubCheck checks the invariants I1–I7 of a task run on a hub:
// hubcheck TASK STEPS URLS.
func cmdHubCheck(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: hubcheck TASK STEPS URLS")
	}
	steps, err := strconv.Atoi(args[1])
	if err != nil {
		ts.Fatalf("hubcheck: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: args[2], Name: "hubcheck", CallTimeout: time.Second, GiveUp: 20 * time.Second})
	if err != nil {
		ts.Fatalf("hubcheck: %v", err)
	}
	defer c.Close()
	errs := hubtest.Check(latestLog(ts, args[0]), ts.MkAbs(filepath.Join(".apollo", "artifacts", args[0])), steps, c)
	for _, e := range errs {
		ts.Logf("%v", e)
	}
	if len(errs) > 0 {
		ts.Fatalf("hubcheck: %d invariant(s) broken", len(errs))
	}
}

// cmdWaitLog waits (up to 30 s) until the task's latest log holds a record
// of that type (of that step, if given; N of them, if given): waitlog TASK
// TYPE [STEP [N]].
func cmdWaitLog(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || len(args) > 4 {
		ts.Fatalf("usage: waitlog TASK TYPE [STEP [N]]")
	}
	want := 1
	if len(args) == 4 {
		var err error
		if want, err = strconv.Atoi(args[3]); err != nil {
			ts.Fatalf("waitlog: N: %v", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		matches, _ := filepath.Glob(ts.MkAbs(filepath.Join(".apollo", "logs", "task_"+args[0]+"_*.jsonl")))
		if len(matches) > 0 {
			recs, _, _ := eventlog.ReadAll(matches[len(matches)-1], eventlog.ReadOptions{TaskID: args[0]})
			n := 0
			for _, r := range recs {
				if r.EventType == args[1] && (len(args) == 2 || r.StepID == args[2]) {
					n++
				}
			}
			if n >= want {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.Fatalf("waitlog: not %d %s record(s) %v in task %s's log within 30s", want, args[1], args[2:], args[0])
}

// hubAuth reads a credentials argument: a token file, an NKey seed
// (NAME.seed), or "tls" (ca.pem, client.pem, client.key of tlscerts).
func hubAuth(ts *testscript.TestScript, arg string) remote.Auth {
	switch {
	case arg == "tls":
		return remote.Auth{TLSCA: ts.MkAbs("ca.pem"), TLSCert: ts.MkAbs("client.pem"), TLSKey: ts.MkAbs("client.key")}
	case strings.HasSuffix(arg, ".seed"):
		return remote.Auth{NKeySeed: ts.MkAbs(arg)}
	}
	return remote.Auth{TokenFile: ts.MkAbs(arg)}
}

// cmdForge plays a client that forges a worker's reports: with the
// credentials it is given, it publishes a started and a succeeded end of
// attempt 0 of STEP on the event subject of POOL — naming the task run as
// the coordinator's log does, but without anything the attempt's dispatch
// carried — and sets an idem marker of POOL's in the task's name. It says
// for each whether the hub stored it: forge URLS CREDENTIALS TASK STEP POOL.
func cmdForge(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 5 {
		ts.Fatalf("usage: forge URLS CREDENTIALS TASK STEP POOL")
	}
	task, step, pool := args[2], args[3], args[4]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: args[0], Name: "forger", Auth: hubAuth(ts, args[1]),
		CallTimeout: time.Second, GiveUp: 5 * time.Second})
	if err != nil {
		ts.Fatalf("forge: %v", err)
	}
	defer c.Close()
	// The run's id is no secret: the run_nonce of its log.
	recs, _, err := eventlog.ReadAll(latestLog(ts, task), eventlog.ReadOptions{TaskID: task})
	if err != nil || len(recs) == 0 || recs[0].Start == nil {
		ts.Fatalf("forge: no TASK_START in task %s's log (%v)", task, err)
	}
	run := recs[0].Start.RunNonce
	for _, typ := range []string{remote.EventStarted, remote.EventEnd} {
		ev := &remote.Event{Type: typ, Run: run, Task: task, Step: step, Pool: pool, Worker: "forger:666",
			Secret: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", Output: []byte(`{"forged":"yes"}`)}
		_, err := c.Report(ctx, ev)
		ts.Logf("forge %s: %v", typ, err)
		fmt.Fprintf(ts.Stdout(), "%s on pool %s: %s\n", typ, pool, stored(err))
	}
	mk, err := c.Markers(ctx, pool, task)
	if err == nil {
		err = mk.Set(ctx, remote.Marker{Name: "forged", State: "done", Result: []byte(`"forged"`), Step: step})
	}
	ts.Logf("forge marker: %v", err)
	fmt.Fprintf(ts.Stdout(), "marker of pool %s: %s\n", pool, stored(err))
}

func stored(err error) string {
	if err != nil {
		return "refused"
	}
	return "stored"
}

// cmdSnoop plays a worker of pool MINE that tries to see pool OTHER's work
// and reports: it subscribes to every reply subject (where the hub delivers
// the work a worker pulls) and to every event, re-points its pool's
// consumer at OTHER's work, and reads OTHER's idem marker of the task. It
// says for each whether the hub let it: snoop URLS CREDENTIALS TASK MINE OTHER.
func cmdSnoop(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 5 {
		ts.Fatalf("usage: snoop URLS CREDENTIALS TASK MINE OTHER")
	}
	task, mine, other := args[2], args[3], args[4]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: args[0], Name: "snoop", Auth: hubAuth(ts, args[1]),
		CallTimeout: time.Second, GiveUp: 5 * time.Second})
	if err != nil {
		ts.Fatalf("snoop: %v", err)
	}
	defer c.Close()
	for _, subject := range []string{"_INBOX.>", "apollo.ev.>"} {
		before := c.NC.LastError()
		sub, err := c.NC.SubscribeSync(subject)
		if err == nil {
			err = c.NC.Flush()
			sub.Unsubscribe()
		}
		if last := c.NC.LastError(); err == nil && last != before {
			err = last
		}
		fmt.Fprintf(ts.Stdout(), "subscribe %s: %s\n", subject, allowed(err))
	}
	err = c.Do(ctx, "re-point a consumer", func(ctx context.Context) error {
		_, err := c.JS.CreateOrUpdateConsumer(ctx, remote.StepsStream, jetstream.ConsumerConfig{Durable: remote.PoolConsumer(mine),
			FilterSubject: remote.PoolFilter(other), AckPolicy: jetstream.AckExplicitPolicy})
		return err
	})
	fmt.Fprintf(ts.Stdout(), "consumer of pool %s on pool %s's work: %s\n", mine, other, allowed(err))
	mk, err := c.Markers(ctx, other, task)
	if err == nil {
		_, _, _, err = mk.Get(ctx, "forged")
	}
	fmt.Fprintf(ts.Stdout(), "read marker of pool %s: %s\n", other, allowed(err))
}

func allowed(err error) string {
	if err != nil {
		return "refused"
	}
	return "allowed"
}

// cmdHubPurge drops a task's log from the hub but not its index entry, as
// an apollo gc --hub cut off between the two leaves it: hubpurge URLS TASK.
func cmdHubPurge(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: hubpurge URLS TASK")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: args[0], Name: "hubpurge", CallTimeout: time.Second, GiveUp: 30 * time.Second})
	if err != nil {
		ts.Fatalf("hubpurge: %v", err)
	}
	defer c.Close()
	l, err := c.OpenLog(ctx, args[1])
	ts.Check(err)
	ts.Check(l.Purge(ctx))
}
