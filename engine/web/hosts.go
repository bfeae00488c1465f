package web

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// hostAllowed checks the Host header of r against what the server
// answers, and says why it does not when it does not. A loopback address
// (127.0.0.0/8, ::1) or "localhost", with any port, always passes: the
// name can only lead to this machine. Without sign-in nothing else does,
// so that a web page whose name was rebound to 127.0.0.1 (DNS rebinding)
// reads no run. With sign-in, AllowedHosts, when set, lists the other
// names: "name" with any port, "name:port" with that one.
func (s *Server) hostAllowed(r *http.Request) error {
	host, port := splitHost(r.Host)
	if loopbackName(host) {
		return nil
	}
	if !s.opts.Auth.Enabled() {
		return fmt.Errorf("host %q is not a loopback address: apollo serve without sign-in answers only 127.0.0.1, [::1] "+
			"or localhost (open http://127.0.0.1:PORT/, or give --token-file or --auth-file)", r.Host)
	}
	if len(s.opts.AllowedHosts) == 0 {
		return nil
	}
	for _, a := range s.opts.AllowedHosts {
		ah, ap := splitHost(a)
		if strings.EqualFold(ah, host) && (ap == "" || ap == port) {
			return nil
		}
	}
	return fmt.Errorf("host %q is not among --allowed-hosts (%s)", r.Host, strings.Join(s.opts.AllowedHosts, ", "))
}

// splitHost splits a Host header into its name (no brackets, no final dot)
// and its port, "" when it has none.
func splitHost(h string) (host, port string) {
	if hh, p, err := net.SplitHostPort(h); err == nil {
		h, port = hh, p
	}
	h = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(h, "]"), "["), "]")
	return strings.TrimSuffix(h, "."), port
}

// loopbackName reports whether host, from splitHost, can only name this
// machine: localhost, or a loopback address literal.
func loopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ValidAllowedHost checks one --allowed-hosts entry: a host name or
// address, with an optional port.
func ValidAllowedHost(a string) error {
	h, p := splitHost(a)
	if h == "" || strings.ContainsAny(h, "/ @?#*") {
		return fmt.Errorf("%q is not a host name (name or name:port)", a)
	}
	if p != "" {
		if _, err := atoiStrict(p); err != nil {
			return fmt.Errorf("%q: the port %q is not a number", a, p)
		}
	}
	return nil
}
