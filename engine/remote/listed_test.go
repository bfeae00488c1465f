package remote_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// TestOnlyListedURLs checks that a client given several URLs of the hub
// connects to those only, never to the addresses the nodes advertise: a
// node's own address may be one this host must not or cannot use (behind a
// proxy, NAT, a container network), and a fault-injecting proxy in front
// of every connection must not be routed around (engine/nemesis).
func TestOnlyListedURLs(t *testing.T) {
	if testing.Short() {
		t.Skip("a new hub cluster elects its first leader in 4 to 9 s")
	}
	cl := hubtest.Start(t, 3)
	direct := strings.Split(cl.URLs(), ",")
	p1 := hubtest.NewProxy(t, strings.TrimPrefix(direct[0], "nats://"))
	p2 := hubtest.NewProxy(t, strings.TrimPrefix(direct[1], "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: p1.URL() + "," + p2.URL(), Name: "listed", CallTimeout: time.Second, GiveUp: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ensure(ctx, 3, false); err != nil {
		t.Fatal(err)
	}
	// Both listed ways to the hub break: the client must wait for them,
	// not reconnect to a node's own address.
	p1.Close()
	p2.Close()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if u := c.NC.ConnectedUrl(); u != "" {
			for _, d := range direct {
				if u == d {
					t.Fatalf("the client reconnected to %s, which it was not given (given %s and %s)", u, p1.URL(), p2.URL())
				}
			}
		}
	}
}
