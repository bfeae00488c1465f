package listen

import "net"

// Loopback reports whether addr (host:port) listens on loopback only. An
// empty host or 0.0.0.0 listens on every interface: not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
