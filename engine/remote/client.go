package remote

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Defaults of Config (docs/spec.md §8.7).
const (
	DefaultCallTimeout = 5 * time.Second
	DefaultGiveUp      = 2 * time.Minute
)

// Auth is how a client proves who it is to the hub: the same ways apollo
// hub accepts (a token file, an NKey seed, TLS client certificates).
type Auth struct {
	TokenFile string // a file holding the hub's token
	NKeySeed  string // a file holding the client's NKey seed
	TLSCA     string // CA file to verify the hub's certificate
	TLSCert   string // client certificate and key, for hubs that verify them
	TLSKey    string
	// Token, or User and Password, given in memory (apollo hub's own
	// client).
	Token          string
	User, Password string
}

// Config says how to reach the hub.
type Config struct {
	// URLs lists the hub's nodes, comma-separated (nats://host:port,...).
	URLs string
	Name string // the connection's name, as the hub shows it
	Auth Auth
	// CallTimeout bounds each call to the hub; a call that times out is
	// retried. GiveUp is how long the hub may stay unreachable before a
	// call fails with an *UnreachableError.
	CallTimeout time.Duration
	GiveUp      time.Duration
	// Waiting, when set, is told once per call that the hub has not
	// answered for WaitNotice (default 5s) while the call is retried: what
	// the call is for, how long it has waited and the last error.
	Waiting    func(what string, waited time.Duration, cause error)
	WaitNotice time.Duration
	// LogMaxBytes bounds the log stream this client creates, or brings up
	// to date (apollo hub --log-max-bytes); 0: no bound of its own, the
	// hub's storage is the bound.
	LogMaxBytes int64
}

// UnreachableError says the hub did not answer for longer than the limit.
type UnreachableError struct {
	URLs  string
	What  string
	For   time.Duration
	Cause error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("hub %s unreachable for %s (%s): %v", e.URLs, e.For.Round(time.Millisecond), e.What, e.Cause)
}

func (e *UnreachableError) Unwrap() error { return e.Cause }

// Client is a connection to the hub with deadlines and retries.
type Client struct {
	NC  *nats.Conn
	JS  jetstream.JetStream
	cfg Config

	mu      sync.Mutex
	streams map[string]jetstream.Stream
	buckets map[string]jetstream.KeyValue
	// feeds are the open feeds, rung when the connection comes back: what
	// the hub stored meanwhile rang nobody.
	feeds map[*Feed]struct{}
}

// Connect connects to the hub. It keeps reconnecting in the background for
// as long as the client lives: a node that goes away is replaced by
// another, and calls made meanwhile are retried.
func Connect(ctx context.Context, cfg Config) (*Client, error) {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.GiveUp <= 0 {
		cfg.GiveUp = DefaultGiveUp
	}
	var client atomic.Pointer[Client]
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.ReconnectHandler(func(*nats.Conn) {
			if c := client.Load(); c != nil {
				c.ringFeeds()
			}
		}),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.Timeout(min(cfg.CallTimeout, 2*time.Second)),
		nats.PingInterval(max(cfg.CallTimeout, time.Second)),
		nats.MaxPingsOutstanding(2),
		nats.RetryOnFailedConnect(true),
		nats.NoCallbacksAfterClientClose(),
	}
	a := cfg.Auth
	if a.TokenFile != "" {
		tok, err := ReadSecret(a.TokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Token(tok))
	}
	if a.Token != "" {
		opts = append(opts, nats.Token(a.Token))
	}
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, a.Password))
	}
	if a.NKeySeed != "" {
		o, err := nats.NkeyOptionFromSeed(a.NKeySeed)
		if err != nil {
			return nil, fmt.Errorf("nkey seed %s: %w", a.NKeySeed, err)
		}
		pub, err := nkeyPublic(a.NKeySeed)
		if err != nil {
			return nil, err
		}
		// apollo hub --nkeys lets a worker read replies under its own
		// key's prefix only.
		opts = append(opts, o, nats.CustomInboxPrefix(WorkerInbox(pub)))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" || a.TLSKey != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	if strings.Contains(strings.Trim(cfg.URLs, ", "), ",") {
		// Several nodes listed: the list is how this host reaches the hub,
		// and the addresses the nodes advertise (their own listen
		// addresses) may be ones it must not use: behind a proxy, NAT or
		// a container network. One URL listed: the nodes' addresses are
		// how the client learns the rest of the cluster.
		opts = append(opts, nats.IgnoreDiscoveredServers())
	}
	nc, err := nats.Connect(cfg.URLs, opts...)
	if err != nil {
		return nil, fmt.Errorf("hub %s: %w", cfg.URLs, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c := &Client{NC: nc, JS: js, cfg: cfg, streams: map[string]jetstream.Stream{}, buckets: map[string]jetstream.KeyValue{},
		feeds: map[*Feed]struct{}{}}
	client.Store(c)
	// The first call waits for the connection within the limits.
	if err := c.Do(ctx, "connect", func(ctx context.Context) error {
		if nc.IsConnected() {
			if v := nc.ConnectedServerVersion(); !serverNewEnough(v) {
				return Final(&ServerVersionError{URLs: cfg.URLs, Version: v})
			}
			return nil
		}
		err := nc.LastError()
		if refusedCredentials(err) {
			return Final(&CredentialsError{URLs: cfg.URLs, Cause: err})
		}
		if err != nil {
			return fmt.Errorf("not connected: %w", err)
		}
		return errors.New("not connected")
	}); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// ringFeeds rings every open feed: the connection came back, and what the
// hub stored while it was down rang none of them.
func (c *Client) ringFeeds() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for f := range c.feeds {
		f.ringsLost()
	}
}

// nkeyPublic is the public key of the NKey seed in a file.
func nkeyPublic(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("nkey seed: %w", err)
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", fmt.Errorf("nkey seed %s: %w", path, err)
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// orDefault is pool, or the default pool when it is "".
func orDefault(pool string) string {
	if pool == "" {
		return DefaultPool
	}
	return pool
}

// CredentialsError says the hub refused the credentials this client
// presented, or their absence: a retry cannot change that.
type CredentialsError struct {
	URLs  string
	Cause error
}

func (e *CredentialsError) Error() string {
	return fmt.Sprintf("hub %s refused this client's credentials (%v): give the hub's --token-file, --nkey-seed or --tls-cert and --tls-key",
		e.URLs, e.Cause)
}

func (e *CredentialsError) Unwrap() error { return e.Cause }

// MinServerVersion is the oldest NATS server a hub may run: 2.11 brought
// the per-message TTLs that let a lease key expire by the hub's own clock
// (LeaseBucket). Atomic batches (2.12) are used where the server has them.
const MinServerVersion = "2.11.0"

// ServerVersionError says the hub runs a NATS server older than
// MinServerVersion, which apollo cannot keep its guarantees on.
type ServerVersionError struct {
	URLs    string
	Version string
}

func (e *ServerVersionError) Error() string {
	return fmt.Sprintf("hub %s runs NATS server %s; apollo needs %s or later (its leases expire by per-message TTL): "+
		"upgrade the server, or run apollo hub", e.URLs, e.Version, MinServerVersion)
}

// serverNewEnough reports whether a server's version (major.minor.patch,
// perhaps with a suffix) is at least MinServerVersion. A version that does
// not read as one is let through: the calls that need the features then
// say what they miss.
func serverNewEnough(version string) bool {
	have, ok := majorMinor(version)
	if !ok {
		return true
	}
	want, _ := majorMinor(MinServerVersion)
	return have[0] > want[0] || have[0] == want[0] && have[1] >= want[1]
}

// majorMinor reads the first two numbers of a version "2.11.3-beta".
func majorMinor(version string) ([2]int, bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 {
		return [2]int{}, false
	}
	major, err1 := strconv.Atoi(parts[0])
	minor, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return [2]int{}, false
	}
	return [2]int{major, minor}, true
}

// PermissionError says the hub refused a call that this client's
// credentials do not allow (apollo hub --nkeys: a worker's key pulls and
// reports, a coordinator's key coordinates).
type PermissionError struct {
	URLs  string
	What  string
	Cause error
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("hub %s does not allow this client to %s (%v): a worker's NKey may only pull and report; coordinate with a coordinator's key",
		e.URLs, e.What, e.Cause)
}

func (e *PermissionError) Unwrap() error { return e.Cause }

// refusedCredentials reports whether err is the hub's refusal of the
// credentials a client presented (or of their absence), or the client's
// refusal of the hub's certificate: no retry changes it.
func refusedCredentials(err error) bool {
	// crypto/tls reports an alert from the hub (a certificate refused, or
	// required) as a *net.OpError whose Op is "remote error".
	var alert *net.OpError
	var verify *tls.CertificateVerificationError // we refused the hub's
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.As(err, &verify) ||
		(errors.As(err, &alert) && alert.Op == "remote error")
}

// Close closes the connection.
func (c *Client) Close() {
	if c != nil && c.NC != nil {
		c.NC.Close()
	}
}

// Config is the client's configuration, defaults filled in.
func (c *Client) Config() Config { return c.cfg }

// ReadSecret reads a token or password from a file, without its line end.
func ReadSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return s, nil
}

// finalError marks an error that retrying cannot change.
type finalError struct{ err error }

func (e finalError) Error() string { return e.err.Error() }
func (e finalError) Unwrap() error { return e.err }

// Final wraps err so that Do returns it at once instead of retrying.
func Final(err error) error {
	if err == nil {
		return nil
	}
	return finalError{err}
}

// Do calls fn with a context bounded by the call timeout until it
// succeeds, returns a Final error, ctx ends, or the hub has failed for
// longer than the give-up limit (an *UnreachableError). The research behind
// docs/spec.md §8 saw a JetStream request in flight through a fail-over
// hang for 88 s: no call is ever made without a deadline.
func (c *Client) Do(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	start := time.Now()
	wait := 20 * time.Millisecond
	said := false
	for {
		before := c.NC.LastError()
		cctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
		err := fn(cctx)
		cancel()
		if err == nil {
			return nil
		}
		var fe finalError
		if errors.As(err, &fe) {
			return fe.err
		}
		if errors.Is(err, nats.ErrConnectionClosed) {
			return err // closed by this process: nothing to wait for
		}
		// The hub answers a request its permissions forbid with silence
		// and an error on the connection: the call would time out forever.
		// The connection keeps its last error until it reconnects, so only
		// a violation reported during this call is this call's.
		if last := c.NC.LastError(); last != before && errors.Is(last, nats.ErrPermissionViolation) {
			return &PermissionError{URLs: c.cfg.URLs, What: what, Cause: last}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Since(start) >= c.cfg.GiveUp {
			return &UnreachableError{URLs: c.cfg.URLs, What: what, For: time.Since(start), Cause: err}
		}
		if waited := time.Since(start); !said && c.cfg.Waiting != nil && waited >= c.waitNotice() {
			said = true
			c.cfg.Waiting(what, waited, err)
		}
		// Jitter spreads the retries of many clients after a fail-over.
		sleep := wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sleep):
		}
		wait = min(wait*2, time.Second)
	}
}

// waitNotice is how long a call waits before Waiting is told.
func (c *Client) waitNotice() time.Duration {
	if c.cfg.WaitNotice > 0 {
		return c.cfg.WaitNotice
	}
	return 5 * time.Second
}

// Stream returns a handle of a stream, looked up once.
func (c *Client) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	c.mu.Lock()
	s, ok := c.streams[name]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	err := c.Do(ctx, "look up stream "+name, func(ctx context.Context) error {
		var err error
		s, err = c.JS.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return Final(fmt.Errorf("the hub has no stream %s: start the hub with apollo hub, or run a coordinator once against it", name))
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	c.keepStream(name, s)
	return s, nil
}

// keepStream remembers the handle of the stream name for Stream.
func (c *Client) keepStream(name string, s jetstream.Stream) {
	c.mu.Lock()
	c.streams[name] = s
	c.mu.Unlock()
}

// Publish stores data on subject with a dedup id and returns once the hub
// has stored it (replicated and, on apollo hub, fsynced). A retried publish
// whose acknowledgement was lost is stored once; dup reports that the hub
// had it already.
func (c *Client) Publish(ctx context.Context, subject, msgID string, data []byte) (seq uint64, dup bool, err error) {
	err = c.Do(ctx, "publish to "+subject, func(ctx context.Context) error {
		ack, err := c.JS.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
		if err != nil {
			if permanent(err) {
				return Final(err)
			}
			return err
		}
		seq, dup = ack.Sequence, ack.Duplicate
		return nil
	})
	return seq, dup, err
}

// permanent reports an answer of the hub that a retry cannot change; any
// other failure (a time-out, no responders, a cluster without a leader for
// the moment) is retried.
func permanent(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case jetstream.JSErrCodeBadRequest, jetstream.JSErrCodeStreamMessageExceedsMaximum,
		jetstream.JSErrCodeStreamWrongLastSequence, jetstream.JSErrCodeStreamWrongLastSequenceConstant:
		return true
	}
	return false
}

// Dispatch publishes one attempt, with its dedup id: a coordinator that
// dispatches the same attempt again (a restart) gets dup instead of a
// second message.
func (c *Client) Dispatch(ctx context.Context, w *Work) (dup bool, err error) {
	data, err := json.Marshal(w)
	if err != nil {
		return false, err
	}
	_, dup, err = c.Publish(ctx, w.Subject(), DispatchID(w.Run, w.Task, w.Step, w.Attempt), data)
	return dup, err
}

// Queued returns the run and attempt of a step's message that waits in the
// work queue or is held by a worker, if any: in the pool's queue or its
// container queue, the later one.
func (c *Client) Queued(ctx context.Context, pool, taskID, step string) (run string, attempt int, ok bool, err error) {
	s, err := c.Stream(ctx, StepsStream)
	if err != nil {
		return "", 0, false, err
	}
	err = c.Do(ctx, "look for a queued attempt", func(ctx context.Context) error {
		var m *jetstream.RawStreamMsg
		for _, subject := range []string{StepSubject(pool, taskID, step), ContainerStepSubject(pool, taskID, step)} {
			got, err := s.GetLastMsgForSubject(ctx, subject)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			if m == nil || got.Sequence > m.Sequence {
				m = got
			}
		}
		ok = m != nil
		if !ok {
			return nil
		}
		var w Work
		if err := json.Unmarshal(m.Data, &w); err != nil {
			return Final(err)
		}
		run, attempt, ok = w.Run, w.Attempt, true
		return nil
	})
	return run, attempt, ok, err
}

// LastEvent returns the hub sequence of the last event pool's workers
// reported for a task (0 when none), as the stream's leader has it.
func (c *Client) LastEvent(ctx context.Context, pool, taskID string) (uint64, error) {
	s, err := c.Stream(ctx, EventsStream)
	if err != nil {
		return 0, err
	}
	var seq uint64
	err = c.Do(ctx, "read the task's last event", func(ctx context.Context) error {
		m, err := s.GetLastMsgForSubject(ctx, EventSubject(orDefault(pool), taskID))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			seq = 0
			return nil
		}
		if err != nil {
			return err
		}
		seq = m.Sequence
		return nil
	})
	return seq, err
}

// Report publishes a worker's event and returns once the hub stored it.
func (c *Client) Report(ctx context.Context, ev *Event) (uint64, error) {
	data, err := json.Marshal(ev)
	if err != nil {
		return 0, err
	}
	seq, _, err := c.Publish(ctx, EventSubject(orDefault(ev.Pool), ev.Task), ev.MsgID(), data)
	return seq, err
}
