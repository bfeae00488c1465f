//go:build nohub

package main

import (
	"context"

	"apollo/engine/usage"
)

// hubCommand, in a build without the hub (-tags nohub), only says so: the
// embedded NATS server is most of the binary's size, and users who run
// their own NATS cluster do not need it.
func hubCommand() *command[*noOptions] {
	return &command[*noOptions]{
		about: about{name: "hub", exitCodes: hubExitCodes, summary: "not in this build (-tags nohub): use an existing NATS cluster",
			usage: "apollo hub", example: "  apollo run pipeline.yaml --hub nats://nats.example:4222"},
		nargs: positional{0, -1, ""},
		run: func(context.Context, *noOptions, invocation) error {
			return &usage.Error{Msg: "hub: this apollo was built without the hub (-tags nohub); point --hub at an existing " +
				"NATS cluster instead (nats-server 2.10 or later, run with sync_interval: always and JetStream on)"}
		},
	}
}
