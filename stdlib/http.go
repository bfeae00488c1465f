package stdlib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// DefaultHTTPTimeout is the timeout of an apollo.http request that does not set one.
const DefaultHTTPTimeout = 30 * time.Second

// MaxResponseBytes is the largest response body apollo.http reads; a larger one is an error.
const MaxResponseBytes = 64 << 20

// errHTTPTimeout is the cause of a request's own timeout.
var errHTTPTimeout = errors.New("request timeout")

func (lib *library) httpFuncs() map[string]lua.LGFunction {
	return map[string]lua.LGFunction{
		"request": lib.httpRequest,
		"get":     lib.httpGet,
		"post":    lib.httpPost,
	}
}

// httpCall is one request as the script describes it.
type httpCall struct {
	method  string
	url     string
	headers map[string]string
	body    *string
	timeout time.Duration
}

// readHTTPOptions reads method, headers, body and timeout from t (the request table, or the
// options of get and post).
func readHTTPOptions(L *lua.LState, fn string, t *lua.LTable, c *httpCall) {
	if t == nil {
		return
	}
	if fn == "http.request" {
		checkOptions(L, fn, t, "method", "url", "headers", "body", "timeout")
	} else {
		checkOptions(L, fn, t, "method", "headers", "body", "timeout")
	}
	if m, ok := optStringField(L, fn, t, "method"); ok && m != "" {
		c.method = strings.ToUpper(m)
	}
	c.headers = stringMap(L, fn, "headers", t.RawGetString("headers"))
	if b, ok := optStringField(L, fn, t, "body"); ok {
		c.body = &b
	}
	c.timeout = optSeconds(L, fn, t, "timeout", DefaultHTTPTimeout)
}

func (lib *library) httpRequest(L *lua.LState) int {
	const fn = "http.request"
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		argError(L, fn, 1, "request must be a table {method=, url=, headers=, body=, timeout=}, got %s", typeName(L.Get(1)))
	}
	c := httpCall{method: http.MethodGet, timeout: DefaultHTTPTimeout}
	u, ok := optStringField(L, fn, t, "url")
	if !ok || u == "" {
		raise(L, fn, "url is required")
	}
	c.url = u
	readHTTPOptions(L, fn, t, &c)
	return lib.doHTTP(L, fn, c)
}

func (lib *library) httpGet(L *lua.LState) int {
	const fn = "http.get"
	c := httpCall{method: http.MethodGet, url: checkString(L, fn, 1, "url"), timeout: DefaultHTTPTimeout}
	readHTTPOptions(L, fn, optTable(L, fn, 2, "options"), &c)
	c.method = http.MethodGet
	return lib.doHTTP(L, fn, c)
}

func (lib *library) httpPost(L *lua.LState) int {
	const fn = "http.post"
	c := httpCall{method: http.MethodPost, url: checkString(L, fn, 1, "url"), timeout: DefaultHTTPTimeout}
	body := checkString(L, fn, 2, "body")
	readHTTPOptions(L, fn, optTable(L, fn, 3, "options"), &c)
	c.method, c.body = http.MethodPost, &body
	return lib.doHTTP(L, fn, c)
}

func (lib *library) doHTTP(L *lua.LState, fn string, c httpCall) int {
	where := c.method + " " + c.url
	pu, err := url.Parse(c.url)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		raise(L, fn, "%s: the url must be absolute, http:// or https://", where)
	}
	checkContext(L, fn)
	ctx, cancel := context.WithTimeoutCause(stepContext(L), c.timeout, errHTTPTimeout)
	defer cancel()
	var body io.Reader
	if c.body != nil {
		body = strings.NewReader(*c.body)
	}
	req, err := http.NewRequestWithContext(ctx, c.method, c.url, body)
	if err != nil {
		raise(L, fn, "%s: %v", where, err)
	}
	for k, v := range c.headers {
		if strings.EqualFold(k, "host") {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	failed := func(err error) {
		switch {
		case errors.Is(context.Cause(ctx), errHTTPTimeout):
			raise(L, fn, "%s: timed out after %s", where, c.timeout)
		case stepContext(L).Err() != nil:
			raise(L, fn, "%s: the step was stopped: %v", where, context.Cause(stepContext(L)))
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		raise(L, fn, "%s: %v", where, err)
	}
	client := http.DefaultClient
	if caps, ok := lib.env.(Capabilities); ok {
		if !caps.AllowHost(pu.Hostname()) {
			raise(L, fn, "%s: host %s is not in the step's allow: [{http: [...]}] list", where, pu.Hostname())
		}
		client = &http.Client{CheckRedirect: func(r *http.Request, via []*http.Request) error {
			if !caps.AllowHost(r.URL.Hostname()) {
				return fmt.Errorf("redirected to host %s, which is not in the step's allow list", r.URL.Hostname())
			}
			if len(via) >= 10 {
				return errors.New("stopped after 10 redirects")
			}
			return nil
		}}
	}
	resp, err := client.Do(req)
	if err != nil {
		failed(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		failed(err)
	}
	if len(data) > MaxResponseBytes {
		raise(L, fn, "%s: the response body is larger than %d MiB", where, MaxResponseBytes>>20)
	}
	headers := L.CreateTable(0, len(resp.Header))
	for k, vs := range resp.Header {
		headers.RawSetString(strings.ToLower(k), lua.LString(strings.Join(vs, ", ")))
	}
	t := L.CreateTable(0, 3)
	t.RawSetString("status", lua.LNumber(resp.StatusCode))
	t.RawSetString("body", lua.LString(data))
	t.RawSetString("headers", headers)
	L.Push(t)
	return 1
}
