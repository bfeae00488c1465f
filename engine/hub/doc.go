// Package hub runs one node of apollo's hub: an embedded NATS server with
// JetStream on file storage and an fsync on every write (never the
// server's two-minute default), joined to its peers by routes into a
// cluster, on loopback unless credentials are set (docs/spec.md §8). It
// sets up the streams and buckets of engine/remote, replicated three ways
// once three nodes exist. apollo writes no coordinator service of its own:
// queues, acknowledgements, redelivery and the replicated key-value store
// are the server's.
//
// It is the one package that links the NATS server into apollo; a build
// with -tags nohub leaves it out (see cmd_hub.go).
package hub
