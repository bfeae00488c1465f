package main

import (
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine/remote"
)

// hubFlags are how apollo run --hub and apollo worker reach the hub and
// prove who they are (docs/spec.md §8).
type hubFlags struct {
	urls      string
	tokenFile string
	nkeySeed  string
	tlsCA     string
	tlsCert   string
	tlsKey    string
}

func (o *hubFlags) addFlags(fs *pflag.FlagSet, what string) { o.addFlagsAs(fs, what, "token-file") }

// addFlagsAs adds the flags with tokenFlag naming the hub's token file
// (apollo serve's --token-file is its sign-in token).
func (o *hubFlags) addFlagsAs(fs *pflag.FlagSet, what, tokenFlag string) {
	fs.StringVar(&o.urls, "hub", "", what)
	fs.StringVar(&o.tokenFile, tokenFlag, "", "a file holding the hub's token (apollo hub --token-file)")
	fs.StringVar(&o.nkeySeed, "nkey-seed", "", "a file holding this client's NKey seed (apollo hub --nkeys)")
	fs.StringVar(&o.tlsCA, "tls-ca", "", "CA file that signed the hub's certificate")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "client certificate, for a hub that verifies them")
	fs.StringVar(&o.tlsKey, "tls-key", "", "the client certificate's key")
}

// runArgs are the flags that give an apollo run child the same hub and
// credentials, with absolute paths.
func (o *hubFlags) runArgs() []string {
	args := []string{"--hub", o.urls}
	for _, f := range []struct{ flag, path string }{{"--token-file", o.tokenFile}, {"--nkey-seed", o.nkeySeed},
		{"--tls-ca", o.tlsCA}, {"--tls-cert", o.tlsCert}, {"--tls-key", o.tlsKey}} {
		if f.path != "" {
			p, err := filepath.Abs(f.path)
			if err != nil {
				p = f.path
			}
			args = append(args, f.flag, p)
		}
	}
	return args
}

func (o *hubFlags) auth() remote.Auth {
	return remote.Auth{TokenFile: o.tokenFile, NKeySeed: o.nkeySeed, TLSCA: o.tlsCA, TLSCert: o.tlsCert, TLSKey: o.tlsKey}
}

// envDuration reads a duration from the environment; 0 when unset or not a
// positive duration.
func envDuration(name string) time.Duration {
	d, err := time.ParseDuration(os.Getenv(name))
	if err != nil || d <= 0 {
		return 0
	}
	return d
}

// Environment variables that tune the hub's deadlines (docs/spec.md §7.13).
const (
	envHubCallTimeout = "APOLLO_HUB_CALL_TIMEOUT" // one call to the hub (default 5s)
	envHubGiveUp      = "APOLLO_HUB_GIVE_UP"      // the hub unreachable this long stops a run (default 2m)
	envHubLeaseTTL    = "APOLLO_HUB_LEASE_TTL"    // a dead coordinator's lease lapses after this (default 30s)
	envLiveness       = "APOLLO_LIVENESS"         // a silent worker's attempt is redelivered after this (default 30s)
	envHubUntaken     = "APOLLO_HUB_UNTAKEN"      // a dispatch no worker took for this long is said (default 1m)
)

// hubExitCodes is apollo hub's exit code table.
const hubExitCodes = `Exit codes:
  0    the node stopped on SIGINT or SIGTERM
  1    the node could not start or stopped on an error (an address in use, an unreadable store)
  2    a usage or configuration error; nothing was started
`
