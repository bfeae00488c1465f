package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nkeys"
	"github.com/rogpeppe/go-internal/testscript"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
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
