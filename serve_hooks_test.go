package main

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdHook sends a webhook delivery and prints the status and the body on
// stdout:
//
//	hook [-secret S] [-delivery ID] URL BODY
//
// The body is signed with S as GitHub signs (X-Hub-Signature-256:
// sha256=<hex HMAC-SHA256>); without -secret it goes unsigned. It fails on
// a status of 400 or more, unless negated.
func cmdHook(ts *testscript.TestScript, neg bool, args []string) {
	secret, delivery := "", ""
	for len(args) > 2 && strings.HasPrefix(args[0], "-") {
		switch args[0] {
		case "-secret":
			secret = args[1]
		case "-delivery":
			delivery = args[1]
		default:
			ts.Fatalf("hook: unknown option %s", args[0])
		}
		args = args[2:]
	}
	if len(args) != 2 {
		ts.Fatalf("usage: hook [-secret S] [-delivery ID] URL BODY")
	}
	req, err := http.NewRequest("POST", args[0], strings.NewReader(args[1]))
	ts.Check(err)
	req.Header.Set("Content-Type", "application/json")
	if secret != "" {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write([]byte(args[1]))
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(m.Sum(nil)))
	}
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	res, err := http.DefaultTransport.RoundTrip(req)
	ts.Check(err)
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	ts.Stdout().Write([]byte(strconv.Itoa(res.StatusCode) + "\n" + string(body)))
	if (res.StatusCode >= 400) != neg {
		ts.Fatalf("hook %s: status %d\n%s", args[0], res.StatusCode, body)
	}
}

// cmdPostJSON sends a JSON body with a Bearer token, as an API client
// does, and prints the status and the body: postjson -token FILE URL BODY.
// It fails on a status of 400 or more, unless negated.
func cmdPostJSON(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 4 || args[0] != "-token" {
		ts.Fatalf("usage: postjson -token FILE URL BODY")
	}
	req, err := http.NewRequest("POST", args[2], strings.NewReader(args[3]))
	ts.Check(err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(ts.ReadFile(args[1])))
	res, err := http.DefaultTransport.RoundTrip(req)
	ts.Check(err)
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	ts.Stdout().Write([]byte(strconv.Itoa(res.StatusCode) + "\n" + string(body)))
	if (res.StatusCode >= 400) != neg {
		ts.Fatalf("postjson %s: status %d\n%s", args[2], res.StatusCode, body)
	}
}
