package hub

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"apollo/engine/listen"
	"apollo/engine/remote"
)

// Options configure a hub node.
type Options struct {
	// Name names the node in its cluster (default: host-port).
	Name string
	// StoreDir holds JetStream's files.
	StoreDir string
	// Listen is the client address, host:port (default 127.0.0.1:4222).
	Listen string
	// Cluster is the address routes from other nodes come to; Routes are
	// the other nodes' cluster addresses (this node's own may be listed).
	Cluster string
	Routes  []string
	// Credentials: any one allows a non-loopback address.
	TokenFile string // a shared secret, for clients and routes
	NKeysFile string // lines "coordinator|worker PUBLIC_NKEY [pool,...]"
	TLSCert   string // the node's certificate and key
	TLSKey    string
	TLSCA     string // verify clients' (and routes') certificates against it
	// Log receives the server's warnings and errors; Verbose adds its
	// notices.
	Log     io.Writer
	Verbose bool
	// LogMaxBytes bounds the log stream APOLLO_LOG, which the node sets
	// up: at the bound new records are refused, none dropped (docs/spec.md
	// §8.8); 0: no bound of its own.
	LogMaxBytes int64
	// GiveUp bounds the setup of streams after start (default 10 minutes:
	// the cluster may still be forming).
	GiveUp time.Duration
}

// Hub is a running node.
type Hub struct {
	s    *server.Server
	opts Options
	size int // the cluster's expected size
	url  string

	ready    chan struct{} // closed once the streams are set up
	setupErr error
}

// ConfigError is a hub setting that cannot work; nothing was started.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

// CredentialsHelp says how to set credentials, for a refused address.
const CredentialsHelp = `set credentials with one of:
  --token-file FILE   a shared secret (one line); coordinators and workers pass the same --token-file
  --nkeys FILE        one client a line: "coordinator PUBLIC_NKEY" or "worker PUBLIC_NKEY [pool,...]";
                      clients pass --nkey-seed SEED_FILE (a worker may then only pull, report and
                      keep markers for its pools)
  --tls-cert FILE --tls-key FILE --tls-ca FILE
                      TLS, with client certificates signed by the CA; clients pass --tls-ca,
                      --tls-cert and --tls-key`

// check refuses settings that cannot work, above all a non-loopback
// address without credentials.
func (o *Options) check() error {
	if o.StoreDir == "" {
		return &ConfigError{Msg: "hub: --store DIR is required: JetStream keeps its files there"}
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:4222"
	}
	if _, _, err := splitHostPort(o.Listen); err != nil {
		return &ConfigError{Msg: fmt.Sprintf("hub: --listen %q: %v", o.Listen, err)}
	}
	creds := o.TokenFile != "" || o.NKeysFile != "" || o.verifiesClients()
	if !listen.Loopback(o.Listen) && !creds {
		return &ConfigError{Msg: fmt.Sprintf("hub: --listen %s is not a loopback address, and no credentials are set: "+
			"anyone who reaches it could run commands on your workers; %s", o.Listen, CredentialsHelp)}
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return &ConfigError{Msg: "hub: --tls-cert and --tls-key go together"}
	}
	if o.Cluster != "" {
		if _, _, err := splitHostPort(o.Cluster); err != nil {
			return &ConfigError{Msg: fmt.Sprintf("hub: --cluster %q: %v", o.Cluster, err)}
		}
		routeCreds := o.TokenFile != "" || o.verifiesClients()
		if !listen.Loopback(o.Cluster) && !routeCreds {
			return &ConfigError{Msg: fmt.Sprintf("hub: --cluster %s is not a loopback address, and routes between hubs "+
				"have no credentials: set --token-file FILE (the same on every hub), or --tls-cert, --tls-key and --tls-ca", o.Cluster)}
		}
	} else if len(o.Routes) > 0 {
		return &ConfigError{Msg: "hub: --routes needs --cluster HOST:PORT, the address the other hubs route to"}
	}
	return nil
}

// verifiesClients reports whether clients must present a certificate
// the hub's CA signed.
func (o *Options) verifiesClients() bool { return o.TLSCert != "" && o.TLSCA != "" }

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("port %q is not a number from 0 to 65535", p)
	}
	return host, port, nil
}

// Start starts the node and returns once it accepts connections. The
// streams are set up in the background, as soon as the cluster can hold
// them (see Ready).
func Start(o Options) (*Hub, error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.StoreDir, 0o755); err != nil {
		return nil, fmt.Errorf("hub: store %s: %w", o.StoreDir, err)
	}
	sopts := serverOptions(o)
	size, err := addCluster(sopts, o)
	if err != nil {
		return nil, err
	}
	internal, err := addCredentials(sopts, o)
	if err != nil {
		return nil, err
	}
	s, err := startServer(sopts, o)
	if err != nil {
		return nil, err
	}
	h := &Hub{s: s, opts: o, size: size, ready: make(chan struct{})}
	addr := s.Addr().(*net.TCPAddr)
	h.url = "nats://" + net.JoinHostPort(addrHost(sopts.Host), strconv.Itoa(addr.Port))
	if h.SetUpByClients() {
		close(h.ready)
	} else {
		go h.setup(internal)
	}
	return h, nil
}

// serverOptions are the embedded server's settings for a single node
// listening on o.Listen, before clustering and credentials.
func serverOptions(o Options) *server.Options {
	host, port, _ := splitHostPort(o.Listen)
	sopts := &server.Options{
		ServerName: o.Name, Host: host, Port: port,
		JetStream: true, StoreDir: o.StoreDir,
		// Every write is fsynced before it is acknowledged: the default
		// (every two minutes) loses acknowledged writes when a machine
		// loses power (Jepsen, NATS 2.12.1).
		SyncAlways: true,
		NoSigs:     true,
		MaxPayload: 8 << 20,
	}
	if o.Name == "" {
		h, _ := os.Hostname()
		sopts.ServerName = fmt.Sprintf("%s-%d", h, port)
	}
	return sopts
}

// addCluster sets up the cluster listener and the routes to the other
// nodes, and returns the cluster's expected size (1 without a cluster).
func addCluster(sopts *server.Options, o Options) (int, error) {
	if o.Cluster == "" {
		return 1, nil
	}
	ch, cp, _ := splitHostPort(o.Cluster)
	sopts.Cluster = server.ClusterOpts{Name: "apollo", Host: ch, Port: cp}
	var routes []*url.URL
	for _, r := range o.Routes {
		u, err := url.Parse(routeURL(r))
		if err != nil || u.Host == "" {
			return 0, &ConfigError{Msg: fmt.Sprintf("hub: --routes: %q is not host:port or nats://host:port", r)}
		}
		if sameAddr(u.Host, o.Cluster) {
			continue // this node itself, in a list shared by all
		}
		routes = append(routes, u)
	}
	sopts.Routes = routes
	return 1 + len(routes), nil
}

// addCredentials applies the token, nkeys and TLS settings to the server
// (and to its routes), and returns how the node's own client, which sets
// up the streams, authenticates.
func addCredentials(sopts *server.Options, o Options) (remote.Auth, error) {
	var internal remote.Auth
	switch {
	case o.TokenFile != "":
		tok, err := remote.ReadSecret(o.TokenFile)
		if err != nil {
			return internal, &ConfigError{Msg: "hub: " + err.Error()}
		}
		addToken(sopts, o, tok)
		internal.Token = tok
	case o.NKeysFile != "":
		users, err := readNKeys(o.NKeysFile)
		if err != nil {
			return internal, &ConfigError{Msg: "hub: " + err.Error()}
		}
		sopts.Nkeys = users
		internal.User, internal.Password = "apollo-hub", randomPassword()
		sopts.Users = []*server.User{{Username: internal.User, Password: internal.Password}}
	}
	if o.TLSCert != "" {
		if err := addTLS(sopts, o); err != nil {
			return internal, err
		}
	}
	return internal, nil
}

// addToken makes tok the clients' secret and, in a cluster, the routes'
// password.
func addToken(sopts *server.Options, o Options, tok string) {
	sopts.Authorization = tok
	if o.Cluster == "" {
		return
	}
	sopts.Cluster.Username, sopts.Cluster.Password = "apollo", tok
	for _, u := range sopts.Routes {
		u.User = url.UserPassword("apollo", tok)
	}
}

// randomPassword is the password of the node's own client under --nkeys,
// whose users all hold keys.
func randomPassword() string {
	secret := make([]byte, 24)
	rand.Read(secret)
	return hex.EncodeToString(secret)
}

// addTLS serves clients (and, in a cluster, routes) over TLS, verifying
// their certificates when a CA is given.
func addTLS(sopts *server.Options, o Options) error {
	tc, err := tlsConfig(o.TLSCert, o.TLSKey, o.TLSCA)
	if err != nil {
		return &ConfigError{Msg: "hub: " + err.Error()}
	}
	sopts.TLSConfig, sopts.TLS = tc, true
	sopts.TLSVerify = o.TLSCA != ""
	if o.Cluster != "" {
		sopts.Cluster.TLSConfig = tc.Clone()
	}
	return nil
}

// startServer starts the embedded server and waits until it accepts
// connections.
func startServer(sopts *server.Options, o Options) (*server.Server, error) {
	s, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if o.Log != nil {
		s.SetLoggerV2(&logger{w: o.Log, name: sopts.ServerName, verbose: o.Verbose}, false, false, false)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("hub: the server did not start listening on %s within 30s", o.Listen)
	}
	return s, nil
}

// setup creates (or updates) the streams and buckets, replicated on up to
// three nodes, once the cluster has a JetStream leader.
func (h *Hub) setup(auth remote.Auth) {
	defer close(h.ready)
	giveUp := h.opts.GiveUp
	if giveUp <= 0 {
		giveUp = 10 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), giveUp)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: h.url, Name: "apollo hub " + h.s.Name(), Auth: auth,
		CallTimeout: 2 * time.Second, GiveUp: giveUp, LogMaxBytes: h.opts.LogMaxBytes})
	if err != nil {
		h.setupErr = err
		h.logf("cannot set up the streams: %v", err)
		return
	}
	defer c.Close()
	if err := c.Ensure(ctx, h.size, true); err != nil {
		h.setupErr = err
		h.logf("cannot set up the streams: %v", err)
	}
}

func (h *Hub) logf(format string, args ...any) {
	if h.opts.Log != nil {
		fmt.Fprintf(h.opts.Log, "apollo hub %s: %s\n", h.s.Name(), fmt.Sprintf(format, args...))
	}
}

// Ready is closed once the node has set up the streams (or could not:
// SetupErr says why).
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// SetUpByClients reports whether the node leaves its streams to the first
// coordinator or worker: clients must present certificates, the node's own
// too, and it has none. Ready is closed at once then.
func (h *Hub) SetUpByClients() bool { return h.opts.verifiesClients() }

// SetupErr is why the streams could not be set up, once Ready is closed.
func (h *Hub) SetupErr() error { return h.setupErr }

// URL is the node's client URL.
func (h *Hub) URL() string { return h.url }

// ClusterURL is the address other nodes route to, "" without a cluster.
func (h *Hub) ClusterURL() string {
	if a := h.s.ClusterAddr(); a != nil {
		return "nats://" + a.String()
	}
	return ""
}

// Size is the number of nodes the cluster is configured with.
func (h *Hub) Size() int { return h.size }

// Name is the node's name.
func (h *Hub) Name() string { return h.s.Name() }

// Server is the embedded server, for tests that look inside.
func (h *Hub) Server() *server.Server { return h.s }

// Shutdown stops the node.
func (h *Hub) Shutdown() {
	h.s.Shutdown()
	h.s.WaitForShutdown()
}

// routeURL accepts host:port or nats://host:port.
func routeURL(r string) string {
	if strings.Contains(r, "://") {
		return r
	}
	return "nats://" + r
}

// sameAddr reports whether two host:port addresses are the same one.
func sameAddr(a, b string) bool {
	ah, ap, err1 := net.SplitHostPort(a)
	bh, bp, err2 := net.SplitHostPort(b)
	if err1 != nil || err2 != nil || ap != bp {
		return false
	}
	norm := func(h string) string {
		if h == "localhost" || h == "" {
			return "127.0.0.1"
		}
		return h
	}
	return norm(ah) == norm(bh)
}

// addrHost is the host clients should dial: the listening one, or
// loopback when it listens on every interface.
func addrHost(host string) string {
	if host == "" || host == "0.0.0.0" || host == "::" {
		return "127.0.0.1"
	}
	return host
}

// readNKeys reads the clients of --nkeys: "coordinator KEY" or
// "worker KEY [pool,...]" a line, # comments. A worker may pull only from
// its pools' consumers and publish only its reports (events, output,
// markers); a coordinator may do everything.
func readNKeys(path string) ([]*server.NkeyUser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--nkeys: %w", err)
	}
	defer f.Close()
	var users []*server.NkeyUser
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 || len(fields) > 3 || !strings.HasPrefix(fields[1], "U") {
			return nil, fmt.Errorf("--nkeys %s:%d: expected \"coordinator PUBLIC_NKEY\" or \"worker PUBLIC_NKEY [pool,...]\" (a user's public key starts with U)", path, n)
		}
		u := &server.NkeyUser{Nkey: fields[1]}
		switch fields[0] {
		case "coordinator":
			if len(fields) == 3 {
				return nil, fmt.Errorf("--nkeys %s:%d: a coordinator has no pools", path, n)
			}
		case "worker":
			pools := []string{remote.DefaultPool}
			if len(fields) == 3 {
				pools = strings.Split(fields[2], ",")
			}
			for _, p := range pools {
				if !remote.ValidPool(p) {
					return nil, fmt.Errorf("--nkeys %s:%d: pool %q may only hold letters, digits, _ and -", path, n, p)
				}
			}
			u.Permissions = &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: remote.WorkerPublish(pools)},
				Subscribe: &server.SubjectPermission{Allow: remote.WorkerSubscribe(fields[1])},
			}
		default:
			return nil, fmt.Errorf("--nkeys %s:%d: role %q: expected coordinator or worker", path, n, fields[0])
		}
		users = append(users, u)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--nkeys: %w", err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("--nkeys %s lists no client", path)
	}
	return users, nil
}

func tlsConfig(cert, key, ca string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", ca)
		}
		tc.ClientCAs, tc.RootCAs = pool, pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc, nil
}

// logger passes the server's warnings and errors on, and its notices when
// verbose. A notice the server repeats (a route that cannot connect, every
// second while a peer is down) is printed the first time, then at most
// once every repeatEvery with how many were held back.
type logger struct {
	w       io.Writer
	name    string
	verbose bool
	now     func() time.Time // nil: time.Now

	mu   sync.Mutex
	seen map[string]*repeated // by level and format
}

// repeated is what the logger knows of one kind of notice.
type repeated struct {
	printed time.Time
	held    int
}

// repeatEvery is how often a repeated notice is printed.
const repeatEvery = time.Minute

func (l *logger) printf(level, format string, v ...any) {
	now := time.Now
	if l.now != nil {
		now = l.now
	}
	t := now()
	// The server may put a connection's name (and its numbers) into the
	// format itself: notices that differ only in numbers are one kind.
	key := level + strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return '#'
		}
		return r
	}, format)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil || len(l.seen) > 1000 {
		l.seen = map[string]*repeated{}
	}
	r := l.seen[key]
	if r != nil && t.Sub(r.printed) < repeatEvery {
		r.held++
		return
	}
	suffix := ""
	if r != nil && r.held > 0 {
		suffix = fmt.Sprintf(" (%d more like it in the last %s)", r.held, t.Sub(r.printed).Round(time.Second))
	}
	l.seen[key] = &repeated{printed: t}
	fmt.Fprintf(l.w, "apollo hub %s: %s%s%s\n", l.name, level, fmt.Sprintf(format, v...), suffix)
}
func (l *logger) Noticef(format string, v ...any) {
	if l.verbose {
		l.printf("", format, v...)
	}
}
func (l *logger) Warnf(format string, v ...any)  { l.printf("warning: ", format, v...) }
func (l *logger) Fatalf(format string, v ...any) { l.printf("fatal: ", format, v...) }
func (l *logger) Errorf(format string, v ...any) { l.printf("error: ", format, v...) }
func (l *logger) Debugf(format string, v ...any) {}
func (l *logger) Tracef(format string, v ...any) {}

var _ server.Logger = (*logger)(nil)
