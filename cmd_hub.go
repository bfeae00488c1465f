//go:build !nohub

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"apollo/engine/hub"
	"apollo/engine/usage"
)

func hubCommand() *command[*hubOptions] {
	return &command[*hubOptions]{
		about: about{name: "hub", exitCodes: hubExitCodes, summary: "run a node of the hub that dispatches steps to workers (scale-out)",
			usage: "apollo hub --store DIR [--listen HOST:PORT] [--cluster HOST:PORT --routes HOST:PORT,...] [--name N] [--log-max-bytes SIZE]",
			example: "  apollo hub --store /var/lib/apollo/hub\n" +
				"  # three nodes (run each on its own machine, or with its own ports):\n" +
				"  apollo hub --store h1 --name h1 --listen 127.0.0.1:4222 --cluster 127.0.0.1:6222 --routes 127.0.0.1:6222,127.0.0.1:6223,127.0.0.1:6224\n" +
				"  apollo hub --store h2 --name h2 --listen 127.0.0.1:4223 --cluster 127.0.0.1:6223 --routes 127.0.0.1:6222,127.0.0.1:6223,127.0.0.1:6224\n" +
				"  apollo hub --store h3 --name h3 --listen 127.0.0.1:4224 --cluster 127.0.0.1:6224 --routes 127.0.0.1:6222,127.0.0.1:6223,127.0.0.1:6224\n" +
				"  apollo hub --store h1 --listen 0.0.0.0:4222 --token-file hub.token   # any other address needs credentials"},
		nargs: positional{0, 0, "takes no arguments"},
		flags: newHubOptions,
		run:   runHub,
	}
}

// hubOptions are the flags of apollo hub.
type hubOptions struct {
	o           hub.Options
	routes      string
	logMaxBytes string
}

// newHubOptions returns apollo hub's options, bound to the flags it adds to fs.
func newHubOptions(fs *pflag.FlagSet) *hubOptions {
	o := new(hubOptions)
	fs.StringVar(&o.o.StoreDir, "store", "", "folder for the node's JetStream files (required)")
	fs.StringVar(&o.o.Listen, "listen", "127.0.0.1:4222", "address for coordinators and workers; not loopback needs credentials")
	fs.StringVar(&o.o.Cluster, "cluster", "", "address the other hubs route to (forms a cluster)")
	fs.StringVar(&o.routes, "routes", "", "the cluster addresses of the hubs, comma-separated (this one's may be listed)")
	fs.StringVar(&o.o.Name, "name", "", "the node's name in the cluster (default host-port)")
	fs.StringVar(&o.o.TokenFile, "token-file", "", "a file holding a shared secret that clients (and the other hubs) must present")
	fs.StringVar(&o.o.NKeysFile, "nkeys", "", "a file of clients: \"coordinator PUBLIC_NKEY\" or \"worker PUBLIC_NKEY [pool,...]\" a line")
	fs.StringVar(&o.o.TLSCert, "tls-cert", "", "the node's TLS certificate")
	fs.StringVar(&o.o.TLSKey, "tls-key", "", "the node's TLS key")
	fs.StringVar(&o.o.TLSCA, "tls-ca", "", "CA whose client certificates the node accepts (and verifies)")
	fs.BoolVar(&o.o.Verbose, "verbose", false, "print the server's notices too")
	fs.StringVar(&o.logMaxBytes, "log-max-bytes", "", "bound the tasks' logs stream (APOLLO_LOG), e.g. 20GiB: when full, new records are refused, none dropped; archive with apollo gc --hub (default: no bound but the store's)")
	return o
}

// parseSize reads a size: a whole number of bytes with an optional unit,
// B, KB, MB, GB, TB (powers of 1000) or KiB, MiB, GiB, TiB (of 1024); at
// least 1 MiB.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		n      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = strings.TrimSpace(rest), u.n
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("%q: give a size such as 500MiB, 20GiB or 1TB", s)
	}
	if n*mult < 1<<20 {
		return 0, fmt.Errorf("%q: at least 1MiB", s)
	}
	return n * mult, nil
}

// runHub runs the node until SIGINT or SIGTERM.
func runHub(ctx context.Context, o *hubOptions, in invocation) error {
	if o.routes != "" {
		for _, r := range strings.Split(o.routes, ",") {
			if r = strings.TrimSpace(r); r != "" {
				o.o.Routes = append(o.o.Routes, r)
			}
		}
	}
	if o.logMaxBytes != "" {
		n, err := parseSize(o.logMaxBytes)
		if err != nil {
			return &usage.Error{Msg: "hub: --log-max-bytes " + err.Error()}
		}
		o.o.LogMaxBytes = n
	}
	o.o.Log = in.stderr
	h, err := hub.Start(o.o)
	var ce *hub.ConfigError
	if errors.As(err, &ce) {
		return &usage.Error{Msg: ce.Msg}
	}
	if err != nil {
		return err
	}
	defer h.Shutdown()
	cluster := ""
	if c := h.ClusterURL(); c != "" {
		cluster = fmt.Sprintf(", cluster %s (%d nodes)", c, h.Size())
	}
	fmt.Fprintf(in.stdout, "apollo hub %s: listening on %s%s; store %s (JetStream, fsync on every write)\n",
		h.Name(), h.URL(), cluster, o.o.StoreDir)
	select {
	case <-h.Ready():
		switch err := h.SetupErr(); {
		case err != nil:
		case h.SetUpByClients():
			fmt.Fprintf(in.stdout, "apollo hub %s: the first coordinator or worker sets the streams up (clients need certificates, and this node has none of its own)\n", h.Name())
		default:
			fmt.Fprintf(in.stdout, "apollo hub %s: streams ready, %d replica(s) each\n", h.Name(), min(h.Size(), 3))
			if o.o.LogMaxBytes > 0 {
				fmt.Fprintf(in.stdout, "apollo hub %s: the tasks' logs are bounded to %s: once full, new records are refused "+
					"(none dropped) until apollo gc --hub archives finished runs\n", h.Name(), o.logMaxBytes)
			}
		}
	case <-ctx.Done():
	}
	<-ctx.Done()
	fmt.Fprintf(in.stdout, "apollo hub %s: stopping\n", h.Name())
	return nil
}
