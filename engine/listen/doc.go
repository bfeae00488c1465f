// Package listen holds the rule every apollo listener follows (apollo hub,
// apollo serve): it may listen on a loopback address without credentials,
// and anywhere else only with them. It imports nothing of apollo.
package listen
