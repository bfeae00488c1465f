package hubtest

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/engine/hub"
)

// Cluster is a hub of embedded nodes on 127.0.0.1.
type Cluster struct {
	t      testing.TB
	Nodes  []*Node
	stores []string
}

// Node is one node of a cluster.
type Node struct {
	Opts hub.Options
	Hub  *hub.Hub // nil while stopped
	Port int
}

// Start starts n nodes routed to each other, and waits until the streams
// are set up. The nodes stop when the test ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c, err := StartShared(n)
	if c != nil {
		t.Cleanup(c.StopAll)
	}
	if err != nil {
		t.Fatal(err)
	}
	c.t = t
	return c
}

// StartShared starts a cluster that outlives one test (a package's tests
// share it; a fresh cluster waits 4 to 9 s for its first leader
// election). StopAll stops it and removes its stores.
func StartShared(n int) (*Cluster, error) {
	c := &Cluster{}
	var routes []string
	free, err := FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	ports, cports := free[:n], free[n:]
	for i := range n {
		routes = append(routes, "127.0.0.1:"+strconv.Itoa(cports[i]))
	}
	for i := range n {
		dir, err := os.MkdirTemp("", "apollo-hub-")
		if err != nil {
			return nil, err
		}
		c.stores = append(c.stores, dir)
		o := hub.Options{Name: fmt.Sprintf("n%d", i+1), StoreDir: dir,
			Listen: "127.0.0.1:" + strconv.Itoa(ports[i]), GiveUp: 60 * time.Second, Log: io.Discard}
		if n > 1 {
			o.Cluster, o.Routes = routes[i], routes
		}
		c.Nodes = append(c.Nodes, &Node{Opts: o, Port: ports[i]})
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, nd := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.Hub, errs[i] = hub.Start(nd.Opts)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.StopAll()
			return nil, err
		}
	}
	for _, nd := range c.Nodes {
		select {
		case <-nd.Hub.Ready():
			if err := nd.Hub.SetupErr(); err != nil {
				c.StopAll()
				return nil, fmt.Errorf("node %s: %w", nd.Opts.Name, err)
			}
		case <-time.After(90 * time.Second):
			c.StopAll()
			return nil, fmt.Errorf("node %s: streams not set up within 90s", nd.Opts.Name)
		}
	}
	return c, nil
}

// FreePorts returns n distinct free loopback ports. Every listener stays
// open until all are chosen: a port closed at once may be handed out again.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// URLs are the nodes' client URLs, comma-separated.
func (c *Cluster) URLs() string {
	var us []string
	for _, nd := range c.Nodes {
		us = append(us, "nats://127.0.0.1:"+strconv.Itoa(nd.Port))
	}
	return strings.Join(us, ",")
}

// Stop shuts node i down.
func (c *Cluster) Stop(i int) {
	if nd := c.Nodes[i]; nd.Hub != nil {
		nd.Hub.Shutdown()
		nd.Hub = nil
	}
}

// Restart starts node i again on its store and ports.
func (c *Cluster) Restart(i int) error {
	nd := c.Nodes[i]
	if nd.Hub != nil {
		return nil
	}
	var err error
	for try := 0; try < 50; try++ { // the ports may take a moment to be free
		if nd.Hub, err = hub.Start(nd.Opts); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("restart node %s: %w", nd.Opts.Name, err)
}

// StopAll shuts every node down and removes their stores.
func (c *Cluster) StopAll() {
	for i := range c.Nodes {
		c.Stop(i)
	}
	for _, d := range c.stores {
		os.RemoveAll(d)
	}
	c.stores = nil
}

// Leader returns the index of the node that leads stream, or -1.
func (c *Cluster) Leader(stream string) int {
	for i, nd := range c.Nodes {
		if nd.Hub != nil && nd.Hub.Server().JetStreamIsStreamLeader("$G", stream) {
			return i
		}
	}
	return -1
}

// Proxy forwards TCP connections from a loopback port to a target until
// Block: then it stops forwarding (the connections stay open, silent), as a
// network partition does.
type Proxy struct {
	l       net.Listener
	target  string
	mu      sync.Mutex
	blocked bool
	cut     bool
	conns   []net.Conn
}

// NewProxy starts a proxy to target; it stops when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{l: l, target: target}
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// URL is the proxy's client URL.
func (p *Proxy) URL() string { return "nats://" + p.l.Addr().String() }

func (p *Proxy) accept() {
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		blocked, cut := p.blocked, p.cut
		p.mu.Unlock()
		if cut {
			in.Close()
			continue
		}
		if blocked {
			p.track(in) // held open, never answered
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		p.track(in)
		p.track(out)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

func (p *Proxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

// pipe copies from src to dst until src ends, holding what it reads while
// the proxy is blocked.
func (p *Proxy) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			for {
				p.mu.Lock()
				blocked := p.blocked
				p.mu.Unlock()
				if !blocked {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// Block stops forwarding.
func (p *Proxy) Block() {
	p.mu.Lock()
	p.blocked = true
	p.mu.Unlock()
}

// Cut closes the connections through the proxy and refuses new ones
// until Restore: what the hub sends meanwhile reaches nobody.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Restore lets connections through again after Cut.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Close stops the proxy and its connections.
func (p *Proxy) Close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}
